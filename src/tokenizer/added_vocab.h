// tessera tokenizer internals: added tokens (tokenizer.json "added_tokens"), found in the text
// before pre-tokenization by leftmost-longest matching, honouring single_word, lstrip and rstrip.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

// One piece of the input: plain text [start, end) when id < 0, else the added token `id`
// (which covers [start, end), including stripped whitespace).
struct Segment {
  size_t start, end;
  int32_t id;
};

// A byte trie over a set of token strings, matched leftmost-longest.
class AddedTokenMatcher {
 public:
  void Add(const std::string& pattern, const AddedToken* token);
  // Splits text into text and token segments (appended to *out).
  void Split(std::string_view text, std::vector<Segment>* out) const;
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
    const AddedToken* token = nullptr;                    // a pattern ends here
  };
  int32_t Child(int32_t node, unsigned char b) const;
  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

}  // namespace tessera::tok

// tessera grammar: a tokenizer's vocabulary as grammar-constrained decoding sees it: each token
// id's exact bytes, which ids may appear inside a structure at all, the stop ids that may only end
// it, and a byte trie over the token strings in which the token-mask computation walks (pruning a
// whole subtree at the first byte the grammar rejects). Built once per tokenizer and shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace tessera {
class Tokenizer;
}

namespace tessera::grammar {

// Words of a token bitmask for a vocabulary: bit i of word i / 32 is token i.
inline size_t BitmaskWords(int64_t vocab_size) { return static_cast<size_t>((vocab_size + 31) / 32); }

class TokenVocabulary {
 public:
  // Token bytes from Tokenizer::TokenBytes. Added tokens (special or not: chat-template markers
  // such as <|im_end|> or <tool_call>) are never allowed inside a structure; `stop_ids` (the
  // model's eos ids; empty: the tokenizer's eos token) are allowed exactly when the structure is
  // complete.
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const Tokenizer& tok,
                                                              const std::vector<int32_t>& stop_ids);
  // For tests and tools: token i has bytes tokens[i]; ids in `excluded` are never allowed.
  static std::shared_ptr<const TokenVocabulary> FromTokenBytes(std::vector<std::string> tokens,
                                                               const std::vector<int32_t>& stop_ids,
                                                               const std::vector<int32_t>& excluded);

  int64_t vocab_size() const { return vocab_size_; }
  std::string_view token_bytes(int32_t id) const {
    return {bytes_.data() + offsets_[static_cast<size_t>(id)],
            offsets_[static_cast<size_t>(id) + 1] - offsets_[static_cast<size_t>(id)]};
  }
  // True for ids that may appear inside a structure (not added, not stop, not empty).
  bool is_grammar_token(int32_t id) const { return grammar_token_[static_cast<size_t>(id)] != 0; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool is_stop(int32_t id) const { return stop_[static_cast<size_t>(id)] != 0; }

  // The trie, nodes in depth-first preorder; node 0 is the root (the empty prefix). The children
  // of node n are n + 1, then each previous child's subtree_end, while below n's subtree_end.
  // Grammar tokens are numbered by their position in the same order ("trie positions"): the tokens
  // of a subtree are a contiguous range of positions.
  struct Node {
    int32_t subtree_end;  // one past the last node of the subtree
    int32_t pos_begin;    // first token position at or below this node
    int32_t pos_here;     // number of tokens ending exactly here (positions pos_begin...)
    uint8_t byte;         // the byte leading to this node from its parent
    uint8_t depth;        // bytes from the root (tokens longer than 255 bytes are left out)
  };
  const std::vector<Node>& trie() const { return trie_; }
  int32_t num_positions() const { return static_cast<int32_t>(pos_to_id_.size()); }
  int32_t max_token_bytes() const { return max_token_bytes_; }  // longest grammar token
  int32_t pos_end(int32_t node) const {
    int32_t e = trie_[static_cast<size_t>(node)].subtree_end;
    return e < static_cast<int32_t>(trie_.size()) ? trie_[static_cast<size_t>(e)].pos_begin : num_positions();
  }
  int32_t pos_to_id(int32_t pos) const { return pos_to_id_[static_cast<size_t>(pos)]; }
  // The bitmask of every grammar token (what a state accepting "any bytes" would allow).
  const std::vector<uint32_t>& grammar_token_mask() const { return grammar_mask_; }

 private:
  void Build();

  int64_t vocab_size_ = 0;
  std::vector<char> bytes_;
  std::vector<size_t> offsets_;  // vocab_size_ + 1
  std::vector<uint8_t> grammar_token_, stop_;
  std::vector<int32_t> stop_ids_;
  std::vector<Node> trie_;
  std::vector<int32_t> pos_to_id_;
  std::vector<uint32_t> grammar_mask_;
  int32_t max_token_bytes_ = 0;
};

}  // namespace tessera::grammar

// tessera tokenizer internals: added-token matching (see added_vocab.h).
#include "tokenizer/added_vocab.h"

#include <algorithm>

#include "tokenizer/text_util.h"

namespace tessera::tok {
namespace {

// The code point that ends at text[end) (end > 0) / starts at text[start].
char32_t CharBefore(std::string_view text, size_t end, size_t* len) {
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
  char32_t cp;
  DecodeUtf8(text, k, &cp);
  *len = end - k;
  return cp;
}

bool IsWordChar(char32_t cp) { return cp == '_' || IsAlnum(cp); }

}  // namespace

int32_t AddedTokenMatcher::Child(int32_t node, unsigned char b) const {
  const auto& v = nodes_[node].next;
  auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(b, INT32_MIN));
  return it != v.end() && it->first == b ? it->second : -1;
}

void AddedTokenMatcher::Add(const std::string& pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  int32_t n = 0;
  for (char c : pattern) {
    auto b = static_cast<unsigned char>(c);
    int32_t child = Child(n, b);
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& v = nodes_[n].next;
      v.insert(std::lower_bound(v.begin(), v.end(), std::make_pair(b, INT32_MIN)), {b, child});
    }
    n = child;
  }
  if (!nodes_[n].token) nodes_[n].token = token;  // the first token with this content wins
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out) const {
  size_t seg_start = 0;  // start of the pending text segment
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    // Longest pattern starting at i.
    const AddedToken* best = nullptr;
    size_t best_end = 0;
    int32_t n = 0;
    for (size_t k = i; k < text.size(); ++k) {
      n = Child(n, static_cast<unsigned char>(text[k]));
      if (n < 0) break;
      if (nodes_[n].token) {
        best = nodes_[n].token;
        best_end = k + 1;
      }
    }
    if (!best) {
      ++i;
      continue;
    }
    size_t start = i, end = best_end, len;
    if (best->single_word) {
      bool ok_before = start == 0 || !IsWordChar(CharBefore(text, start, &len));
      char32_t after = 0;
      if (end < text.size()) DecodeUtf8(text, end, &after);
      bool ok_after = end == text.size() || !IsWordChar(after);
      if (!ok_before || !ok_after) {
        ++i;
        continue;
      }
    }
    if (best->lstrip) {
      while (start > seg_start) {
        char32_t cp = CharBefore(text, start, &len);
        if (!IsWhitespace(cp)) break;
        start -= len;
      }
    }
    if (best->rstrip) {
      while (end < text.size()) {
        char32_t cp;
        size_t l = DecodeUtf8(text, end, &cp);
        if (!IsWhitespace(cp)) break;
        end += l;
      }
    }
    if (start > seg_start) out->push_back({seg_start, start, -1});
    out->push_back({start, end, best->id});
    seg_start = i = end;
  }
  if (seg_start < text.size()) out->push_back({seg_start, text.size(), -1});
}

}  // namespace tessera::tok

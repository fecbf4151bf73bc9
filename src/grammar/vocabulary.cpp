// tessera grammar: token bytes and the vocabulary trie (see vocabulary.h).
#include "grammar/vocabulary.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tessera::grammar {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(const Tokenizer& tok,
                                                                      const std::vector<int32_t>& stop_ids) {
  int64_t n = tok.vocab_size();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> excluded;
  for (int32_t id = 0; id < n; ++id) {
    // Ids with no token (holes in the id range) and added tokens are left out.
    if (tok.IsAdded(id) || tok.IdToToken(id).empty()) {
      excluded.push_back(id);
      continue;
    }
    tokens[static_cast<size_t>(id)] = tok.TokenBytes(id);
  }
  std::vector<int32_t> stops = stop_ids;
  if (stops.empty() && tok.eos_id()) stops.push_back(*tok.eos_id());
  return FromTokenBytes(std::move(tokens), stops, excluded);
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenBytes(std::vector<std::string> tokens,
                                                                       const std::vector<int32_t>& stop_ids,
                                                                       const std::vector<int32_t>& excluded) {
  auto v = std::make_shared<TokenVocabulary>();
  v->vocab_size_ = static_cast<int64_t>(tokens.size());
  size_t n = tokens.size();
  v->offsets_.resize(n + 1);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    v->offsets_[i] = total;
    total += tokens[i].size();
  }
  v->offsets_[n] = total;
  v->bytes_.reserve(total);
  for (const auto& t : tokens) v->bytes_.insert(v->bytes_.end(), t.begin(), t.end());
  v->grammar_token_.assign(n, 1);
  v->stop_.assign(n, 0);
  for (int32_t id : excluded)
    if (id >= 0 && static_cast<size_t>(id) < n) v->grammar_token_[static_cast<size_t>(id)] = 0;
  for (int32_t id : stop_ids) {
    if (id < 0 || static_cast<size_t>(id) >= n)
      Fail(ErrorKind::kInvalidArgument, "grammar: stop token id {} is outside the vocabulary [0, {})", id, n);
    v->stop_[static_cast<size_t>(id)] = 1;
    v->grammar_token_[static_cast<size_t>(id)] = 0;
    if (std::find(v->stop_ids_.begin(), v->stop_ids_.end(), id) == v->stop_ids_.end()) v->stop_ids_.push_back(id);
  }
  for (size_t i = 0; i < n; ++i)
    if (tokens[i].empty() || tokens[i].size() > 255) v->grammar_token_[i] = 0;
  v->Build();
  return v;
}

void TokenVocabulary::Build() {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size_; ++id)
    if (grammar_token_[static_cast<size_t>(id)]) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [this](int32_t a, int32_t b) {
    auto x = token_bytes(a), y = token_bytes(b);
    return x != y ? x < y : a < b;
  });
  pos_to_id_ = ids;
  grammar_mask_.assign(BitmaskWords(vocab_size_), 0);
  for (int32_t id : ids) grammar_mask_[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);

  trie_.clear();
  trie_.push_back(Node{0, 0, 0, 0, 0});
  std::vector<int32_t> path{0};  // path[d]: the node at depth d on the current token's path
  std::string_view prev;
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    std::string_view s = token_bytes(ids[pos]);
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int32_t>(s.size()));
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    while (path.size() > lcp + 1) {
      trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(Node{0, static_cast<int32_t>(pos), 0, static_cast<uint8_t>(s[d]), static_cast<uint8_t>(d + 1)});
    }
    trie_[static_cast<size_t>(path.back())].pos_here += 1;
    prev = s;
  }
  while (!path.empty()) {
    trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

}  // namespace tessera::grammar

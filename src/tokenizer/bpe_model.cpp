// tessera tokenizer internals: BPE model (see bpe_model.h). The merge loop mirrors HF tokenizers'
// Word::merge_all (lowest rank first, leftmost on ties, stale heap entries skipped) so that ties
// and overlapping merges resolve exactly as the reference does.
#include "tokenizer/bpe_model.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/text_util.h"

namespace tessera::tok {

using nlohmann::json;

void BpeModel::AddVocab(const std::string& token, int64_t id) {
  if (id < 0 || id > (1 << 30))
    Fail(ErrorKind::kCorrupt, "tokenizer.json: model.vocab['{}'] has id {} out of range", token, id);
  vocab_[token] = static_cast<int32_t>(id);
  if (static_cast<size_t>(id) >= id_to_token_.size()) {
    id_to_token_.resize(id + 1);
    has_token_.resize(id + 1, false);
  }
  id_to_token_[id] = token;
  has_token_[id] = true;
}

void BpeModel::AddMerge(const MergeEntry& m, int32_t rank) {
  std::string_view a = m.a, b = m.b;
  if (m.string_form) {
    size_t sp = m.a.find(' ');
    if (sp == std::string::npos || m.a.find(' ', sp + 1) != std::string::npos)
      Fail(ErrorKind::kCorrupt, "tokenizer.json: merge #{} '{}' is not two tokens separated by one space",
           rank, m.a);
    a = std::string_view(m.a).substr(0, sp);
    b = std::string_view(m.a).substr(sp + 1);
  }
  auto ia = vocab_.find(a), ib = vocab_.find(b);
  std::string merged(a);
  if (!prefix_.empty() && b.substr(0, prefix_.size()) == prefix_) merged.append(b.substr(prefix_.size()));
  else merged.append(b);
  auto im = vocab_.find(merged);
  if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
    Fail(ErrorKind::kCorrupt, "tokenizer.json: merge #{} ('{}', '{}') uses a token not in the vocab",
         rank, a, b);
  merges_[PairKey(ia->second, ib->second)] = {rank, im->second};
}

BpeModel::BpeModel(const json& model, const TokenizerJson* parsed) {
  try {
    if (parsed && parsed->extracted) {
      vocab_.reserve(parsed->vocab.size());
      for (const auto& [token, id] : parsed->vocab) AddVocab(token, id);
    } else {
      const json& vocab = model.at("vocab");
      if (!vocab.is_object())
        Fail(ErrorKind::kCorrupt, "tokenizer.json: model.vocab must be an object of token -> id");
      vocab_.reserve(vocab.size());
      for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (!it.value().is_number_integer())
          Fail(ErrorKind::kCorrupt, "tokenizer.json: model.vocab['{}'] is not an integer id", it.key());
        AddVocab(it.key(), it.value().get<int64_t>());
      }
    }

    auto str_or_empty = [&](const char* key) {
      return model.contains(key) && model[key].is_string() ? model[key].get<std::string>() : "";
    };
    prefix_ = str_or_empty("continuing_subword_prefix");
    suffix_ = str_or_empty("end_of_word_suffix");
    unk_token_ = str_or_empty("unk_token");
    if (!unk_token_.empty()) {
      auto it = vocab_.find(unk_token_);
      if (it == vocab_.end())
        Fail(ErrorKind::kCorrupt, "tokenizer.json: model.unk_token '{}' is not in the vocab", unk_token_);
      unk_id_ = it->second;
    }
    auto flag = [&](const char* key) {
      return model.contains(key) && model[key].is_boolean() && model[key].get<bool>();
    };
    fuse_unk_ = flag("fuse_unk");
    byte_fallback_ = flag("byte_fallback");
    ignore_merges_ = flag("ignore_merges");
    for (int b = 0; b < 256; ++b) {
      auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
      byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    }

    if (parsed && parsed->extracted) {
      merges_.reserve(parsed->merges.size());
      int32_t rank = 0;
      for (const auto& m : parsed->merges) AddMerge(m, rank++);
    } else {
      const json& merges = model.contains("merges") ? model["merges"] : json::array();
      if (!merges.is_array()) Fail(ErrorKind::kCorrupt, "tokenizer.json: model.merges must be a list");
      merges_.reserve(merges.size());
      int32_t rank = 0;
      for (const auto& m : merges) {
        if (m.is_string()) {
          AddMerge({m.get<std::string>(), "", true}, rank);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
          AddMerge({m[0].get<std::string>(), m[1].get<std::string>(), false}, rank);
        } else {
          Fail(ErrorKind::kCorrupt, "tokenizer.json: merge #{} is neither \"a b\" nor [\"a\", \"b\"]",
               rank);
        }
        ++rank;
      }
    }
  } catch (const json::exception& e) {
    Fail(ErrorKind::kCorrupt, "tokenizer.json: bad model section: {}", e.what());
  }
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWordBytes) {
    TokenizeUncached(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  TokenizeUncached(word, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

void BpeModel::TokenizeUncached(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    if (auto id = TokenToId(word)) {
      out->push_back(*id);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    size_t len;  // bytes of the word covered; 0 once merged into its left neighbour
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id, size_t len) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1, len});
    if (n > 0) syms[n - 1].next = n;
  };

  // Initial symbols: one per character (with the subword prefix / word suffix when configured).
  // A pending unk symbol (id, bytes), so that fuse_unk can grow it over consecutive characters.
  int32_t unk_pending = -1;
  size_t unk_len = 0;
  auto flush_unk = [&] {
    if (unk_pending >= 0) add(unk_pending, unk_len);
    unk_pending = -1;
  };
  std::string key;
  for (size_t i = 0; i < word.size();) {
    char32_t cp;
    size_t n = DecodeUtf8(word, i, &cp);
    if (i + n > word.size()) n = word.size() - i;
    std::string_view ch = word.substr(i, n);
    bool first = i == 0, last = i + n == word.size();
    std::optional<int32_t> id;
    if (prefix_.empty() && suffix_.empty()) {
      id = TokenToId(ch);
    } else {
      key.clear();
      if (!first) key += prefix_;
      key.append(ch);
      if (last) key += suffix_;
      id = TokenToId(key);
    }
    if (id) {
      flush_unk();
      add(*id, n);
    } else {
      bool handled = false;
      if (byte_fallback_) {
        bool all = true;
        for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
        if (all) {
          flush_unk();
          for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)], 1);
          handled = true;
        }
      }
      if (!handled && unk_id_) {
        if (unk_pending >= 0 && fuse_unk_) {
          unk_len += n;
        } else {
          flush_unk();
          unk_pending = *unk_id_;
          unk_len = n;
        }
      }
      // Without unk_token the character is dropped, as HF does.
    }
    i += n;
  }
  flush_unk();

  struct Merge {
    int32_t pos, rank, new_id;
  };
  auto worse = [](const Merge& x, const Merge& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::priority_queue<Merge, std::vector<Merge>, decltype(worse)> queue(worse);
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    auto it = merges_.find(PairKey(syms[i].id, syms[i + 1].id));
    if (it != merges_.end()) queue.push({static_cast<int32_t>(i), it->second.rank, it->second.new_id});
  }
  while (!queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    int32_t next_pos = cur.next;
    Symbol right = syms[next_pos];
    auto it = merges_.find(PairKey(cur.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    syms[next_pos].len = 0;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      auto pit = merges_.find(PairKey(syms[cur.prev].id, cur.id));
      if (pit != merges_.end()) queue.push({cur.prev, pit->second.rank, pit->second.new_id});
    }
    if (cur.next >= 0) {
      auto nit = merges_.find(PairKey(cur.id, syms[cur.next].id));
      if (nit != merges_.end()) queue.push({top.pos, nit->second.rank, nit->second.new_id});
    }
  }
  for (const Symbol& s : syms)
    if (s.len > 0) out->push_back(s.id);
}

}  // namespace tessera::tok

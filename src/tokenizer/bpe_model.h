// tessera tokenizer internals: the BPE model of tokenizer.json (vocab + ranked merges, both merge
// encodings, ignore_merges, byte_fallback, unk_token/fuse_unk, continuing_subword_prefix and
// end_of_word_suffix) with a cache of tokenized words, since words repeat a lot in real text.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_json.h"

namespace tessera::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object. When `parsed` holds the vocab and merges extracted
  // by ParseTokenizerJson, those are used instead of model.vocab / model.merges.
  // Throws Error(kCorrupt/kUnsupported).
  BpeModel(const nlohmann::json& model, const TokenizerJson* parsed = nullptr);

  // Appends the ids of one pre-tokenized word. Thread-safe.
  void Tokenize(std::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  const std::string* IdToToken(int32_t id) const;  // nullptr when no token has this id
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct MergeInfo {
    int32_t rank, new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void TokenizeUncached(std::string_view word, std::vector<int32_t>* out) const;
  void AddVocab(const std::string& token, int64_t id);
  void AddMerge(const MergeEntry& m, int32_t rank);

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, MergeInfo> merges_;
  std::string unk_token_, prefix_, suffix_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int32_t byte_ids_[256];  // id of "<0xXX>" or -1 (byte_fallback)

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace tessera::tok

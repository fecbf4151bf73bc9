// tessera tokenizer: Hugging Face tokenizer.json (byte-level BPE: Qwen3, Llama 3, DeepSeek-V3,
// gpt-oss) plus the parts of tokenizer_config.json the server needs (special tokens, chat template).
// Encode follows HF `tokenizers`: added tokens are split out first, the rest is normalized,
// pre-tokenized and run through the BPE model; the post-processor runs when add_special_tokens.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera {

namespace tok {
class TokenizerImpl;
}

struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token, unk_token, mask_token;  // "" when not set
  std::string chat_template;  // default template text ("" if none)
  std::map<std::string, std::string> named_chat_templates;  // every template by name (incl. "default")
  nlohmann::json raw;  // the whole tokenizer_config.json (an empty object when there is none)
  // transformers' flags, informational: Encode(add_special_tokens=true) applies only tokenizer.json's
  // post_processor, exactly as HF tokenizers does (transformers 5 does not add bos either).
  bool add_bos_token = false;
  bool add_eos_token = false;
};

class Tokenizer {
 public:
  // Reads <dir>/tokenizer.json, <dir>/tokenizer_config.json (optional) and
  // <dir>/chat_template.jinja (optional, overrides the config's default template).
  static std::unique_ptr<Tokenizer> FromDir(const std::string& dir);
  // tokenizer_config_text may be "" (no config).
  static std::unique_ptr<Tokenizer> FromJson(const std::string& tokenizer_json_text,
                                             const std::string& tokenizer_config_text);
  ~Tokenizer();

  // Thread-safe. add_special_tokens runs tokenizer.json's post_processor (TemplateProcessing adds
  // bos etc.; ByteLevel adds nothing). Throws Error(kInvalidArgument) if text is not valid UTF-8.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = false) const;
  // Throws Error(kInvalidArgument) for an id outside [0, vocab_size()) or an id with no token.
  // Bytes that do not form valid UTF-8 become U+FFFD (as HF does).
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // The bytes token `id` adds to the decoded text in the middle of a sequence, exactly: a token
  // holding part of a UTF-8 character gives those raw bytes (Decode would give U+FFFD), and nothing
  // is stripped as at the start of a text. An added token gives its content. Grammar-constrained
  // decoding (src/grammar) matches these bytes. Throws Error(kInvalidArgument) like Decode.
  std::string TokenBytes(int32_t id) const;

  int64_t vocab_size() const;  // max id + 1 over vocab and added tokens
  std::optional<int32_t> TokenToId(std::string_view token) const;
  std::string IdToToken(int32_t id) const;  // "" when out of range
  bool IsSpecial(int32_t id) const;         // an added token flagged "special"
  bool IsAdded(int32_t id) const;           // any added token (special or not, e.g. <think>)
  const TokenizerConfig& config() const { return config_; }

  // Convenience: ids of config().bos_token / eos_token ... (nullopt when unset or unknown).
  std::optional<int32_t> bos_id() const { return TokenToIdOpt(config_.bos_token); }
  std::optional<int32_t> eos_id() const { return TokenToIdOpt(config_.eos_token); }
  std::optional<int32_t> pad_id() const { return TokenToIdOpt(config_.pad_token); }

 private:
  Tokenizer() = default;
  std::optional<int32_t> TokenToIdOpt(const std::string& t) const {
    return t.empty() ? std::nullopt : TokenToId(t);
  }

  std::unique_ptr<tok::TokenizerImpl> impl_;
  TokenizerConfig config_;
};

// Streaming detokenization: Push returns the text that became final; never returns a broken UTF-8
// sequence (holds back bytes of an incomplete character until completed), Flush returns the rest.
// The concatenation of every Push and the Flush equals Tokenizer::Decode of all ids: a run of
// byte-fallback tokens "<0xXX>" is held back until a non-byte token ends it, since one invalid byte
// turns the whole run into U+FFFD. Past 16 ids held back, text goes out at character boundaries
// (or, for bytes that never form one, as U+FFFD); only a run that turns invalid after that may then
// differ. Holds a reference to the tokenizer (which must outlive it); one decoder per stream, not
// thread-safe. `keep_special`: special tokens whose text stays although skip_special_tokens drops
// the others (a chat format's markers that the server parses: Gemma 4's <|tool_call>, <|channel>).
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false,
                              std::vector<int32_t> keep_special = {});
  std::string Push(int32_t id);  // throws Error like Decode for a bad id (and forgets that id)
  std::string Flush();           // the held-back rest (U+FFFD for incomplete bytes); resets

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> keep_special_;  // sorted
  bool skip_dropped_ = false;          // skipping special tokens not kept happens in Push
  std::vector<int32_t> ids_;  // ids from prefix_offset_ on (older ones are dropped)
  size_t read_offset_ = 0;    // ids_[0, read_offset_) have been emitted
  std::string prefix_text_;   // Decode(ids_[0, read_offset_))
};

}  // namespace tessera

// tessera tokenizer: loading tokenizer.json / tokenizer_config.json, the encode and decode
// pipelines, and streaming detokenization (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/text_util.h"
#include "tokenizer/tokenizer_json.h"

namespace tessera {
namespace tok {

using nlohmann::json;

class TokenizerImpl {
 public:
  explicit TokenizerImpl(const TokenizerJson& parsed);

  std::vector<int32_t> Encode(std::string_view text) const;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const;
  std::string TokenBytes(int32_t id) const;
  void PostProcess(std::vector<int32_t>* ids) const {
    if (post_) post_->Process(ids);
  }

  std::optional<int32_t> TokenToId(std::string_view token) const {
    auto it = added_by_content_.find(token);
    if (it != added_by_content_.end()) return it->second->id;
    return model_->TokenToId(token);
  }
  const std::string* IdToToken(int32_t id) const {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return &it->second->content;
    return model_->IdToToken(id);
  }
  bool IsSpecial(int32_t id) const {
    auto it = added_by_id_.find(id);
    return it != added_by_id_.end() && it->second->special;
  }
  bool IsAdded(int32_t id) const { return added_by_id_.count(id) != 0; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  void EncodeText(std::string_view text, bool first_segment, std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<std::unique_ptr<AddedToken>> added_;
  std::unordered_map<int32_t, const AddedToken*> added_by_id_;
  std::unordered_map<std::string, const AddedToken*, StringHash, std::equal_to<>> added_by_content_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  int64_t vocab_size_ = 0;
};

TokenizerImpl::TokenizerImpl(const TokenizerJson& parsed) {
  const json& j = parsed.doc;
  if (!j.is_object()) Fail(ErrorKind::kCorrupt, "tokenizer.json: top level is not an object");
  if (!j.contains("model") || !j["model"].is_object())
    Fail(ErrorKind::kCorrupt, "tokenizer.json: no \"model\" object");
  const json& model = j["model"];
  std::string type = model.value("type", std::string());
  if (type.empty() && model.contains("merges")) type = "BPE";  // old files omit the type
  if (type != "BPE")
    Fail(ErrorKind::kUnsupported, "tokenizer.json: model type '{}' is not supported (only BPE)",
         type.empty() ? "<none>" : type);
  model_ = std::make_unique<BpeModel>(model, &parsed);
  normalizer_ = MakeNormalizer(j.value("normalizer", json()));
  pre_tokenizer_ = MakePreTokenizer(j.value("pre_tokenizer", json()));
  post_ = MakePostProcessor(j.value("post_processor", json()));
  decoder_ = MakeDecoder(j.value("decoder", json()));
  vocab_size_ = model_->max_id() + 1;

  const json& added = j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"]
                                                                                  : json::array();
  for (const auto& a : added) {
    auto t = std::make_unique<AddedToken>();
    try {
      t->id = a.at("id").get<int32_t>();
      t->content = a.at("content").get<std::string>();
      t->special = a.value("special", false);
      t->single_word = a.value("single_word", false);
      t->lstrip = a.value("lstrip", false);
      t->rstrip = a.value("rstrip", false);
      t->normalized = a.value("normalized", !t->special);
    } catch (const json::exception& e) {
      Fail(ErrorKind::kCorrupt, "tokenizer.json: bad added_tokens entry {}: {}", a.dump(), e.what());
    }
    if (t->id < 0) Fail(ErrorKind::kCorrupt, "tokenizer.json: added token '{}' has id {}", t->content, t->id);
    if (t->content.empty()) continue;
    vocab_size_ = std::max<int64_t>(vocab_size_, t->id + 1);
    added_by_id_[t->id] = t.get();
    added_by_content_.emplace(t->content, t.get());
    added_.push_back(std::move(t));
  }
  for (const auto& t : added_) {
    if (!t->normalized || !normalizer_) {
      // With no normalizer a "normalized" token matches the raw text too; matching it there keeps
      // the HF order of operations irrelevant.
      (t->normalized ? normalized_matcher_ : raw_matcher_).Add(t->content, t.get());
    } else {
      std::string n = t->content;
      normalizer_->Normalize(n);
      normalized_matcher_.Add(n, t.get());
    }
  }
}

void TokenizerImpl::EncodeText(std::string_view text, bool first_segment,
                               std::vector<int32_t>* ids) const {
  std::vector<std::string> pieces(1, std::string(text));
  if (pre_tokenizer_) pre_tokenizer_->PreTokenize(&pieces, first_segment);
  for (const auto& w : pieces) model_->Tokenize(w, ids);
}

std::vector<int32_t> TokenizerImpl::Encode(std::string_view text) const {
  size_t bad = FindInvalidUtf8(text);
  if (bad != std::string_view::npos)
    Fail(ErrorKind::kInvalidArgument, "tokenizer: input text is not valid UTF-8 (byte {} of {})", bad,
         text.size());
  std::vector<int32_t> ids;
  std::vector<Segment> raw, norm;
  raw_matcher_.Split(text, &raw);
  for (const Segment& s : raw) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    std::string piece(text.substr(s.start, s.end - s.start));
    if (normalizer_) normalizer_->Normalize(piece);
    norm.clear();
    normalized_matcher_.Split(piece, &norm);
    for (const Segment& n : norm) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else {
        EncodeText(std::string_view(piece).substr(n.start, n.end - n.start),
                   s.start == 0 && n.start == 0, &ids);
      }
    }
  }
  return ids;
}

std::string TokenizerImpl::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_)
      Fail(ErrorKind::kInvalidArgument, "tokenizer: cannot decode id {}: outside [0, {})", id,
           vocab_size_);
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      if (skip_special && it->second->special) continue;
      tokens.push_back(it->second->content);
      continue;
    }
    const std::string* t = model_->IdToToken(id);
    if (!t) Fail(ErrorKind::kInvalidArgument, "tokenizer: cannot decode id {}: no token has this id", id);
    tokens.push_back(*t);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->Decode(&tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string TokenizerImpl::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_)
    Fail(ErrorKind::kInvalidArgument, "tokenizer: no token bytes for id {}: outside [0, {})", id, vocab_size_);
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return it->second->content;
  const std::string* t = model_->IdToToken(id);
  if (!t) Fail(ErrorKind::kInvalidArgument, "tokenizer: no token bytes for id {}: no token has this id", id);
  if (!decoder_) return *t;
  std::vector<std::string> tokens(1, *t);
  decoder_->DecodeRaw(&tokens);
  std::string out;
  for (const auto& piece : tokens) out += piece;
  return out;
}

}  // namespace tok

namespace {

using nlohmann::json;

std::string ReadText(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) Fail(ErrorKind::kNotFound, "tokenizer: cannot read {}", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json: "<s>", {"content": "<s>", ...} or null.
std::string TokenString(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  if (v.is_null()) return "";
  Fail(ErrorKind::kCorrupt, "tokenizer_config.json: \"{}\" is neither a string nor {{\"content\": ...}}",
       key);
}

void ParseChatTemplates(const json& v, TokenizerConfig* c) {
  if (v.is_null()) return;
  if (v.is_string()) {
    c->chat_template = v.get<std::string>();
    c->named_chat_templates["default"] = c->chat_template;
    return;
  }
  if (!v.is_array())
    Fail(ErrorKind::kCorrupt, "tokenizer_config.json: chat_template is neither a string nor a list");
  for (const auto& e : v) {
    if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
        !e["template"].is_string())
      Fail(ErrorKind::kCorrupt,
           "tokenizer_config.json: chat_template list entries must be {{\"name\", \"template\"}}");
    c->named_chat_templates[e["name"].get<std::string>()] = e["template"].get<std::string>();
  }
  auto it = c->named_chat_templates.find("default");
  if (it != c->named_chat_templates.end()) c->chat_template = it->second;
}

json ParseJson(const std::string& text, const char* name) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    Fail(ErrorKind::kCorrupt, "{}: malformed JSON: {}", name, e.what());
  }
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::FromJson(const std::string& tokenizer_json_text,
                                               const std::string& tokenizer_config_text) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->impl_ = std::make_unique<tok::TokenizerImpl>(tok::ParseTokenizerJson(tokenizer_json_text));
  // The post-processor's special ids come from its own JSON (BertProcessing's "cls": ["[CLS]", 101]):
  // an id no token has made Encode(add_special_tokens) return ids that Decode refuses (found by
  // fuzz/tokenizer_fuzz.cpp). Refused here, where the file is named.
  std::vector<int32_t> special_ids;
  t->impl_->PostProcess(&special_ids);
  for (int32_t id : special_ids) {
    try {
      (void)t->Decode({id});
    } catch (const Error&) {
      Fail(ErrorKind::kCorrupt, "tokenizer.json: the post_processor adds id {}, which no token has", id);
    }
  }
  TokenizerConfig& c = t->config_;
  c.raw = tokenizer_config_text.empty() ? json::object()
                                        : ParseJson(tokenizer_config_text, "tokenizer_config.json");
  if (!c.raw.is_object()) Fail(ErrorKind::kCorrupt, "tokenizer_config.json: top level is not an object");
  c.bos_token = TokenString(c.raw, "bos_token");
  c.eos_token = TokenString(c.raw, "eos_token");
  c.pad_token = TokenString(c.raw, "pad_token");
  c.unk_token = TokenString(c.raw, "unk_token");
  c.mask_token = TokenString(c.raw, "mask_token");
  auto flag = [&](const char* key) {
    return c.raw.contains(key) && c.raw[key].is_boolean() && c.raw[key].get<bool>();
  };
  c.add_bos_token = flag("add_bos_token");
  c.add_eos_token = flag("add_eos_token");
  if (c.raw.contains("chat_template")) ParseChatTemplates(c.raw["chat_template"], &c);
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::FromDir(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path d(dir);
  if (!fs::is_directory(d)) Fail(ErrorKind::kNotFound, "tokenizer: {} is not a directory", dir);
  fs::path tj = d / "tokenizer.json";
  if (!fs::exists(tj)) Fail(ErrorKind::kNotFound, "tokenizer: {} not found", tj.string());
  fs::path cj = d / "tokenizer_config.json";
  std::string config_text = fs::exists(cj) ? ReadText(cj) : "";
  std::unique_ptr<Tokenizer> t;
  try {
    t = FromJson(ReadText(tj), config_text);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{} (in {})", e.what(), dir));
  }
  // Newer checkpoints keep the template beside the config; it wins over the config's one.
  fs::path jinja = d / "chat_template.jinja";
  fs::path ct_json = d / "chat_template.json";
  if (fs::exists(jinja)) {
    t->config_.chat_template = ReadText(jinja);
    t->config_.named_chat_templates["default"] = t->config_.chat_template;
  } else if (fs::exists(ct_json)) {
    json j = ParseJson(ReadText(ct_json), "chat_template.json");
    if (j.is_object() && j.contains("chat_template")) ParseChatTemplates(j["chat_template"], &t->config_);
  }
  return t;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids = impl_->Encode(text);
  if (add_special_tokens) impl_->PostProcess(&ids);
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return impl_->Decode(ids, skip_special_tokens);
}

std::string Tokenizer::TokenBytes(int32_t id) const { return impl_->TokenBytes(id); }

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  return impl_->TokenToId(token);
}

std::string Tokenizer::IdToToken(int32_t id) const {
  const std::string* t = impl_->IdToToken(id);
  return t ? *t : std::string();
}

bool Tokenizer::IsSpecial(int32_t id) const { return impl_->IsSpecial(id); }
bool Tokenizer::IsAdded(int32_t id) const { return impl_->IsAdded(id); }

// ---- IncrementalDecoder ----
// Decodes a sliding window of ids: the text of ids_[0, read_offset_) was already emitted; a new id
// is emitted as Decode(window) minus that prefix once the result no longer ends in U+FFFD (an
// incomplete character). Decoding with left context keeps decoders such as Metaspace (which strip
// a leading space only at the start) consistent with a one-shot Decode.

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens,
                                       std::vector<int32_t> keep_special)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens), keep_special_(std::move(keep_special)) {
  std::sort(keep_special_.begin(), keep_special_.end());
  // With tokens to keep, the window holds no other special token and decodes without skipping:
  // the same text as Decode(all ids, skip) with the kept tokens' text in place.
  if (!keep_special_.empty() && skip_special_) {
    skip_dropped_ = true;
    skip_special_ = false;
  }
}

namespace {
constexpr size_t kMaxPendingIds = 16;
bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
// A SentencePiece byte token ("<0xF0>"). The ByteFallback decoder decodes a run of them as a whole,
// as HF does: one invalid byte anywhere in the run turns every byte of it into U+FFFD, text that
// already decoded ("z" "\xC3\xA9" then "\xF4") included. So a run's text is final only once a
// non-byte token ends it. (Found by fuzz/tokenizer_fuzz.cpp: <0x7A> <0xC3> <0xA9> <0xF4> streamed as
// "z\u00e9" then U+FFFD, while Decode gives U+FFFD four times.) Without a ByteFallback decoder such a token is plain text and holding it
// back for one token changes nothing.
bool IsByteToken(const std::string& t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4]);
}
}  // namespace

std::string IncrementalDecoder::Push(int32_t id) {
  if (skip_dropped_ && tokenizer_.IsSpecial(id) && !std::binary_search(keep_special_.begin(), keep_special_.end(), id))
    return "";
  ids_.push_back(id);
  std::string text;
  try {
    text = tokenizer_.Decode(ids_, skip_special_);
  } catch (...) {
    ids_.pop_back();
    throw;
  }
  const size_t pending = ids_.size() - read_offset_;
  // A byte-fallback run is held back whole up to kMaxPendingIds ids; a longer one (a CJK text
  // spelled byte by byte) goes out at character boundaries, as below.
  if (IsByteToken(tokenizer_.IdToToken(id)) && pending <= kMaxPendingIds) return "";
  // A character needs at most 4 byte tokens: a longer run still ending in U+FFFD is invalid bytes
  // (the model's output is garbage), emitted as U+FFFD rather than re-decoded on every Push. (+ 4:
  // a byte run held back to the limit above may still need 3 bytes to end its character.)
  bool give_up_waiting = pending > kMaxPendingIds + 4;
  if (text.size() <= prefix_text_.size() || (EndsWithReplacement(text) && !give_up_waiting)) return "";
  std::string out = text.substr(prefix_text_.size());
  // Keep the last emitted ids as context for the next step, drop the older ones.
  size_t keep_from = read_offset_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  read_offset_ = ids_.size();
  prefix_text_ = tokenizer_.Decode(ids_, skip_special_);
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string text = ids_.empty() ? std::string() : tokenizer_.Decode(ids_, skip_special_);
  std::string out = text.size() > prefix_text_.size() ? text.substr(prefix_text_.size()) : "";
  ids_.clear();
  read_offset_ = 0;
  prefix_text_.clear();
  return out;
}

}  // namespace tessera

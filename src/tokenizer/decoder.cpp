// tessera tokenizer internals: decoders and post-processors (see decoder.h).
#include "tokenizer/decoder.h"

#include "core/error.h"
#include "tokenizer/text_util.h"

namespace tessera::tok {
namespace {

using nlohmann::json;

class ByteLevelDecoder : public Decoder {
 public:
  void Decode(std::vector<std::string>* tokens) const override {
    DecodeRaw(tokens);
    (*tokens)[0] = LossyUtf8((*tokens)[0]);
  }
  void DecodeRaw(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const auto& t : *tokens) {
      // A token with a character outside the byte alphabet (an added token such as DeepSeek's
      // "<｜begin▁of▁sentence｜>", or one containing a plain space) is taken as raw UTF-8.
      size_t start = bytes.size();
      bool ok = true;
      for (size_t i = 0; i < t.size();) {
        char32_t cp;
        i += DecodeUtf8(t, i, &cp);
        int b = UnicodeToByte(cp);
        if (b < 0) {
          ok = false;
          break;
        }
        bytes += static_cast<char>(b);
      }
      if (!ok) {
        bytes.resize(start);
        bytes += t;
      }
    }
    tokens->assign(1, std::move(bytes));
  }
};

class ByteFallbackDecoder : public Decoder {
 public:
  void Decode(std::vector<std::string>* tokens) const override { Run(tokens, false); }
  void DecodeRaw(std::vector<std::string>* tokens) const override { Run(tokens, true); }

 private:
  void Run(std::vector<std::string>* tokens, bool raw) const {
    std::vector<std::string> out;
    std::string pending;  // bytes from consecutive <0xXX> tokens
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (raw || FindInvalidUtf8(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending_count; ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (auto& t : *tokens) {
      int byte = ParseByteToken(t);
      if (byte >= 0) {
        pending += static_cast<char>(byte);
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }

  static int ParseByteToken(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int h = hex(t[3]), l = hex(t[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void Decode(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const auto& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeRaw(std::vector<std::string>* tokens) const override {}  // strips only at the ends
  void Decode(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (auto& t : *tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0 && b < e; ++k)
        b += content_.size();
      for (size_t k = 0; k < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(const json& j) {
    const json& p = j.at("pattern");
    content_ = j.at("content").get<std::string>();
    if (p.contains("String")) literal_ = p["String"].get<std::string>();
    else if (p.contains("Regex")) regex_ = std::make_unique<Regex>(p["Regex"].get<std::string>(), "decoder Replace");
    else Fail(ErrorKind::kCorrupt, "tokenizer.json: decoder Replace has no String/Regex pattern");
  }
  void Decode(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      std::vector<std::pair<size_t, size_t>> m;
      if (regex_) {
        if (FindInvalidUtf8(t) != std::string::npos) continue;
        regex_->FindAll(t, &m);
      } else if (!literal_.empty()) {
        for (size_t p = t.find(literal_); p != std::string::npos; p = t.find(literal_, p + literal_.size()))
          m.emplace_back(p, p + literal_.size());
      }
      if (m.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (auto [a, b] : m) {
        out.append(t, prev, a - prev);
        out += content_;
        prev = b;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string literal_, content_;
  std::unique_ptr<Regex> regex_;
};

class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(const json& j) {
    replacement_ = j.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = j.value("prepend_scheme", std::string());
    strip_first_ = scheme.empty() ? j.value("add_prefix_space", true) : scheme != "never";
  }
  void Decode(std::vector<std::string>* tokens) const override { Run(tokens, strip_first_); }
  void DecodeRaw(std::vector<std::string>* tokens) const override { Run(tokens, false); }

 private:
  void Run(std::vector<std::string>* tokens, bool strip_first) const {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string out;
      for (size_t p = 0; p < t.size();) {
        if (t.compare(p, replacement_.size(), replacement_) == 0) {
          out += ' ';
          p += replacement_.size();
        } else {
          out += t[p++];
        }
      }
      if (i == 0 && strip_first && !out.empty() && out[0] == ' ') out.erase(0, 1);
      t = std::move(out);
    }
  }

  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> v) : v_(std::move(v)) {}
  void Decode(std::vector<std::string>* tokens) const override {
    for (const auto& d : v_) d->Decode(tokens);
  }
  void DecodeRaw(std::vector<std::string>* tokens) const override {
    for (const auto& d : v_) d->DecodeRaw(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> v_;
};

std::string TypeOf(const json& j, const char* section) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    Fail(ErrorKind::kCorrupt, "tokenizer.json: {} entry has no string \"type\"", section);
  return j["type"].get<std::string>();
}

// Ids added around the sequence: `before` + ids + `after`.
class WrapProcessor : public PostProcessor {
 public:
  WrapProcessor(std::vector<int32_t> before, std::vector<int32_t> after, bool adds)
      : before_(std::move(before)), after_(std::move(after)), adds_(adds) {}
  void Process(std::vector<int32_t>* ids) const override {
    ids->insert(ids->begin(), before_.begin(), before_.end());
    ids->insert(ids->end(), after_.begin(), after_.end());
  }
  bool AddsTokens() const override { return adds_; }

 private:
  std::vector<int32_t> before_, after_;
  bool adds_;
};

std::unique_ptr<PostProcessor> MakeTemplate(const json& j) {
  const json& single = j.at("single");
  const json& specials = j.contains("special_tokens") ? j["special_tokens"] : json::object();
  std::vector<int32_t> before, after;
  bool seen_seq = false;
  for (const auto& piece : single) {
    if (piece.contains("Sequence")) {
      seen_seq = true;
    } else if (piece.contains("SpecialToken")) {
      std::string name = piece["SpecialToken"].at("id").get<std::string>();
      if (!specials.contains(name))
        Fail(ErrorKind::kCorrupt, "tokenizer.json: TemplateProcessing uses special token '{}' not in "
             "special_tokens", name);
      for (const auto& id : specials[name].at("ids"))
        (seen_seq ? after : before).push_back(id.get<int32_t>());
    } else {
      Fail(ErrorKind::kCorrupt, "tokenizer.json: bad TemplateProcessing piece {}", piece.dump());
    }
  }
  return std::make_unique<WrapProcessor>(std::move(before), std::move(after), true);
}

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> v) : v_(std::move(v)) {}
  void Process(std::vector<int32_t>* ids) const override {
    for (const auto& p : v_) p->Process(ids);
  }
  bool AddsTokens() const override {
    for (const auto& p : v_)
      if (p->AddsTokens()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> v_;
};

}  // namespace

std::unique_ptr<Decoder> MakeDecoder(const json& j) {
  if (j.is_null()) return nullptr;
  std::string type = TypeOf(j, "decoder");
  try {
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    if (type == "Strip")
      return std::make_unique<StripDecoder>(j.at("content").get<std::string>(),
                                            j.value("start", 0), j.value("stop", 0));
    if (type == "Replace") return std::make_unique<ReplaceDecoder>(j);
    if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(j);
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Decoder>> v;
      for (const auto& e : j.at("decoders"))
        if (auto d = MakeDecoder(e)) v.push_back(std::move(d));
      return std::make_unique<SequenceDecoder>(std::move(v));
    }
  } catch (const json::exception& e) {
    Fail(ErrorKind::kCorrupt, "tokenizer.json: decoder {}: {}", type, e.what());
  }
  Fail(ErrorKind::kUnsupported, "tokenizer.json: decoder type '{}' is not supported", type);
}

std::unique_ptr<PostProcessor> MakePostProcessor(const json& j) {
  if (j.is_null()) return nullptr;
  std::string type = TypeOf(j, "post_processor");
  try {
    if (type == "ByteLevel") return std::make_unique<WrapProcessor>(std::vector<int32_t>{},
                                                                    std::vector<int32_t>{}, false);
    if (type == "TemplateProcessing") return MakeTemplate(j);
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      // "cls": ["[CLS]", 101], "sep": ["[SEP]", 102]
      return std::make_unique<WrapProcessor>(std::vector<int32_t>{j.at("cls").at(1).get<int32_t>()},
                                             std::vector<int32_t>{j.at("sep").at(1).get<int32_t>()},
                                             true);
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PostProcessor>> v;
      for (const auto& e : j.at("processors"))
        if (auto p = MakePostProcessor(e)) v.push_back(std::move(p));
      return std::make_unique<SequenceProcessor>(std::move(v));
    }
  } catch (const json::exception& e) {
    Fail(ErrorKind::kCorrupt, "tokenizer.json: post_processor {}: {}", type, e.what());
  }
  Fail(ErrorKind::kUnsupported, "tokenizer.json: post_processor type '{}' is not supported", type);
}

}  // namespace tessera::tok

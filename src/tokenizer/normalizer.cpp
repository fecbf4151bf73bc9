// tessera tokenizer internals: normalizers (see normalizer.h), Unicode forms via utf8proc.
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "tokenizer/text_util.h"

namespace tessera::tok {
namespace {

using nlohmann::json;

std::string TypeOf(const json& j, const char* section) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    Fail(ErrorKind::kCorrupt, "tokenizer.json: {} entry has no string \"type\": {}", section,
         j.dump().substr(0, 200));
  return j["type"].get<std::string>();
}

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(utf8proc_option_t opts) : opts_(opts) {}
  void Normalize(std::string& s) const override {
    if (s.empty()) return;
    utf8proc_uint8_t* out = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                          static_cast<utf8proc_ssize_t>(s.size()), &out, opts_);
    if (n < 0) Fail(ErrorKind::kInvalidArgument, "normalizer: {}", utf8proc_errmsg(n));
    s.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  utf8proc_option_t opts_;
};

class Lowercase : public Normalizer {
 public:
  void Normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      char32_t cp;
      i += DecodeUtf8(s, i, &cp);
      AppendUtf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    s = std::move(out);
  }
};

class Replace : public Normalizer {
 public:
  explicit Replace(const json& j) {
    const json& p = j.at("pattern");
    content_ = j.at("content").get<std::string>();
    if (p.contains("String")) {
      literal_ = p["String"].get<std::string>();
    } else if (p.contains("Regex")) {
      regex_ = std::make_unique<Regex>(p["Regex"].get<std::string>(), "normalizer Replace");
    } else {
      Fail(ErrorKind::kCorrupt, "tokenizer.json: normalizer Replace has no String/Regex pattern");
    }
  }
  void Normalize(std::string& s) const override {
    std::vector<std::pair<size_t, size_t>> m;
    if (regex_) {
      regex_->FindAll(s, &m);
    } else if (!literal_.empty()) {
      for (size_t p = s.find(literal_); p != std::string::npos; p = s.find(literal_, p + literal_.size()))
        m.emplace_back(p, p + literal_.size());
    }
    if (m.empty()) return;
    std::string out;
    size_t prev = 0;
    for (auto [a, b] : m) {
      out.append(s, prev, a - prev);
      out += content_;
      prev = b;
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  std::string literal_, content_;
  std::unique_ptr<Regex> regex_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  void Normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, p_);
  }

 private:
  std::string p_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        char32_t cp;
        size_t n = DecodeUtf8(s, b, &cp);
        if (!IsWhitespace(cp)) break;
        b += n;
      }
    }
    if (right_) {
      while (e > b) {
        size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        char32_t cp;
        DecodeUtf8(s, k, &cp);
        if (!IsWhitespace(cp)) break;
        e = k;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  void Normalize(std::string& s) const override {
    for (const auto& n : v_) n->Normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

}  // namespace

std::unique_ptr<Normalizer> MakeNormalizer(const json& j) {
  if (j.is_null()) return nullptr;
  std::string type = TypeOf(j, "normalizer");
  try {
    if (type == "NFC") return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (type == "NFD") return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
    if (type == "NFKC") return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
    if (type == "NFKD") return std::make_unique<UnicodeForm>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
    if (type == "Lowercase") return std::make_unique<Lowercase>();
    if (type == "Replace") return std::make_unique<Replace>(j);
    if (type == "Prepend") return std::make_unique<Prepend>(j.at("prepend").get<std::string>());
    if (type == "Strip")
      return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Normalizer>> v;
      for (const auto& e : j.at("normalizers"))
        if (auto n = MakeNormalizer(e)) v.push_back(std::move(n));
      return std::make_unique<Sequence>(std::move(v));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorKind::kCorrupt, "tokenizer.json: normalizer {}: {}", type, e.what());
  }
  Fail(ErrorKind::kUnsupported, "tokenizer.json: normalizer type '{}' is not supported", type);
}

}  // namespace tessera::tok

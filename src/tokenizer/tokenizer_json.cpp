// tessera tokenizer internals: SAX reader for tokenizer.json (see tokenizer_json.h). Anything
// unexpected inside model.vocab / model.merges (a non-integer id, a 3-element merge) makes it fall
// back to a plain DOM parse, so BpeModel's own checks report the problem with their usual message.
#include "tokenizer/tokenizer_json.h"

#include "core/error.h"

namespace tessera::tok {
namespace {

using nlohmann::json;

class Handler {
 public:
  explicit Handler(TokenizerJson* out) : out_(out), dom_(out->doc, true) {}

  bool null() { return Value([&] { return dom_.null(); }); }
  bool boolean(bool v) { return Value([&] { return dom_.boolean(v); }); }
  bool number_integer(json::number_integer_t v) {
    if (mode_ == kVocab && depth_in_ == 0) return VocabId(v);
    return Value([&] { return dom_.number_integer(v); });
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (mode_ == kVocab && depth_in_ == 0) return VocabId(static_cast<int64_t>(v));
    return Value([&] { return dom_.number_unsigned(v); });
  }
  bool number_float(json::number_float_t v, const std::string& s) {
    return Value([&] { return dom_.number_float(v, s); });
  }
  bool string(std::string& v) {
    if (mode_ == kMerges) {
      if (depth_in_ == 0) {
        out_->merges.push_back({std::move(v), "", true});
        return true;
      }
      if (depth_in_ == 1 && pair_.size() < 2) {
        pair_.push_back(std::move(v));
        return true;
      }
    }
    return Value([&] { return dom_.string(v); });
  }
  bool binary(json::binary_t& v) { return Value([&] { return dom_.binary(v); }); }

  bool start_object(std::size_t n) {
    if (mode_ != kNormal) {
      ++depth_in_;
      fallback_ = true;  // objects never appear inside vocab values or merges
      return true;
    }
    path_.push_back(pending_key_);
    if (IsModelChild("vocab")) {
      mode_ = kVocab;
      depth_in_ = 0;
      return dom_.start_object(0) && dom_.end_object();
    }
    return dom_.start_object(n);
  }
  bool end_object() {
    if (mode_ != kNormal) {
      if (depth_in_ == 0) {
        mode_ = kNormal;
        path_.pop_back();
        return true;
      }
      --depth_in_;
      return true;
    }
    path_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (mode_ == kMerges) {
      ++depth_in_;
      pair_.clear();
      if (depth_in_ > 1) fallback_ = true;
      return true;
    }
    if (mode_ == kVocab) {
      ++depth_in_;
      fallback_ = true;
      return true;
    }
    path_.push_back(pending_key_);
    pending_key_.clear();
    if (IsModelChild("merges")) {
      mode_ = kMerges;
      depth_in_ = 0;
      return dom_.start_array(0) && dom_.end_array();
    }
    return dom_.start_array(n);
  }
  bool end_array() {
    if (mode_ == kMerges) {
      if (depth_in_ == 0) {
        mode_ = kNormal;
        path_.pop_back();
        return true;
      }
      if (depth_in_ == 1) {
        if (pair_.size() == 2) out_->merges.push_back({std::move(pair_[0]), std::move(pair_[1]), false});
        else fallback_ = true;
      }
      --depth_in_;
      return true;
    }
    if (mode_ == kVocab) {
      --depth_in_;
      return true;
    }
    path_.pop_back();
    return dom_.end_array();
  }
  bool key(std::string& k) {
    if (mode_ == kVocab) {
      if (depth_in_ == 0) vocab_key_ = std::move(k);
      return true;
    }
    if (mode_ == kMerges) return true;
    pending_key_ = k;
    return dom_.key(k);
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    error_ = fmt::format("malformed JSON at byte {}: {}", pos, e.what());
    return false;
  }

  bool fallback() const { return fallback_; }
  const std::string& error() const { return error_; }

 private:
  enum Mode { kNormal, kVocab, kMerges };

  // A scalar: swallowed inside vocab/merges (where it is unexpected), else added to the DOM.
  template <typename F>
  bool Value(F&& f) {
    if (mode_ != kNormal) {
      fallback_ = true;
      return true;
    }
    return f();
  }
  bool VocabId(int64_t id) {
    out_->vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }
  // True when the container just opened is <root>.model.<name>.
  bool IsModelChild(const char* name) const {
    return path_.size() == 3 && path_[1] == "model" && path_[2] == name;
  }

  TokenizerJson* out_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::string> path_;  // key under which each open container was opened
  std::string pending_key_, vocab_key_, error_;
  std::vector<std::string> pair_;
  Mode mode_ = kNormal;
  int depth_in_ = 0;  // nesting inside the vocab object / merges array
  bool fallback_ = false;
};

}  // namespace

TokenizerJson ParseTokenizerJson(const std::string& text) {
  TokenizerJson out;
  bool ok = false;
  std::string error, fallback_error;
  bool fallback = false;
  {
    Handler h(&out);
    try {
      ok = json::sax_parse(text, &h);
    } catch (const json::exception& e) {
      ok = false;
      error = e.what();
    }
    if (!h.error().empty()) error = h.error();
    fallback = h.fallback();
  }
  if (!ok) Fail(ErrorKind::kCorrupt, "tokenizer.json: {}", error.empty() ? "malformed JSON" : error);
  if (fallback) {
    out = TokenizerJson();
    out.doc = json::parse(text);
    return out;
  }
  out.extracted = true;
  return out;
}

}  // namespace tessera::tok

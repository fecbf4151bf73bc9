// tessera server: Gemma 4 tool calls (see gemma4_tool_parser.h): a recursive-descent reader of the
// call's argument syntax that builds JSON, and the tagged streaming parser over it.
#include "server/gemma4_tool_parser.h"

#include "server/openai_protocol.h"

namespace tessera {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<|tool_call>";
constexpr std::string_view kClose = "<tool_call|>";
constexpr std::string_view kQuote = "<|\"|>";  // Gemma 4's string delimiter (one token)
constexpr std::string_view kCall = "call:";

bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsWs(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsWs(s.back())) s.remove_suffix(1);
  return s;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size() || !IsDigit(s[i])) return false;
  if (s[i] == '0') {
    ++i;
  } else {
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || !IsDigit(s[i])) return false;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= s.size() || !IsDigit(s[i])) return false;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  return i == s.size();
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// A bare value (no delimiters): true / false, null (vLLM also takes None and nil, in any case), a JSON
// number, else the word itself as a string.
ojson BareValue(std::string_view raw) {
  if (raw == "true") return true;
  if (raw == "false") return false;
  if (EqualsNoCase(raw, "null") || EqualsNoCase(raw, "none") || EqualsNoCase(raw, "nil")) return nullptr;
  if (IsJsonNumber(raw)) {
    ojson n = ojson::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (!n.is_discarded()) return n;
  }
  return std::string(raw);
}

// Reads the argument syntax from a position; every method returns false on malformed input.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  size_t pos() const { return pos_; }
  void SkipWs() {
    while (pos_ < s_.size() && IsWs(s_[pos_])) ++pos_;
  }
  bool At(std::string_view t) const { return s_.substr(pos_, t.size()) == t; }
  bool AtEnd() const { return pos_ >= s_.size(); }

  // key:value pairs until `close` ('}'), which is consumed; `depth` counts the enclosing objects
  // and arrays, this one included.
  bool Object(ojson& out, int depth) {
    if (depth > kMaxJsonDepth) return false;
    out = ojson::object();
    for (;;) {
      SkipWs();
      if (At("}")) {
        ++pos_;
        return true;
      }
      std::string key;
      if (!Key(key)) return false;
      SkipWs();
      if (!At(":")) return false;
      ++pos_;
      ojson v;
      if (!Value(v, depth)) return false;
      out[key] = std::move(v);
      SkipWs();
      if (At(",")) {
        ++pos_;
      } else if (!At("}")) {
        return false;
      }
    }
  }

 private:
  // A key: <|"|>text<|"|>, or bare text up to ':' (trimmed, without structure characters).
  bool Key(std::string& key) {
    if (At(kQuote)) return String(key);
    size_t end = s_.find(':', pos_);
    if (end == std::string_view::npos) return false;
    std::string_view k = Trim(s_.substr(pos_, end - pos_));
    if (k.empty() || k.find_first_of(",{}[]<>") != std::string_view::npos) return false;
    key.assign(k);
    pos_ = end;
    return true;
  }

  // <|"|>raw text<|"|>
  bool String(std::string& out) {
    pos_ += kQuote.size();
    size_t end = s_.find(kQuote, pos_);
    if (end == std::string_view::npos) return false;
    out.assign(s_.substr(pos_, end - pos_));
    pos_ = end + kQuote.size();
    return true;
  }

  bool Value(ojson& out, int depth) {
    SkipWs();
    if (AtEnd()) return false;
    if (At(kQuote)) {
      std::string str;
      if (!String(str)) return false;
      out = std::move(str);
      return true;
    }
    if (At("{")) {
      ++pos_;
      return Object(out, depth + 1);
    }
    if (At("[")) {
      ++pos_;
      return Array(out, depth + 1);
    }
    // A bare value runs to the next ',', '}' or ']' and is one word: a space or a ':' inside means
    // a missing comma or delimiter, '<' a broken delimiter.
    size_t end = s_.find_first_of(",}]", pos_);
    if (end == std::string_view::npos) return false;
    std::string_view raw = Trim(s_.substr(pos_, end - pos_));
    if (raw.empty() || raw.find_first_of("{[<>: \t\n\r") != std::string_view::npos) return false;
    out = BareValue(raw);
    pos_ = end;
    return true;
  }

  bool Array(ojson& out, int depth) {
    if (depth > kMaxJsonDepth) return false;
    out = ojson::array();
    for (;;) {
      SkipWs();
      if (At("]")) {
        ++pos_;
        return true;
      }
      ojson v;
      if (!Value(v, depth)) return false;
      out.push_back(std::move(v));
      SkipWs();
      if (At(",")) {
        ++pos_;
      } else if (!At("]")) {
        return false;
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

bool IsNameChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || IsDigit(c) || c == '_' || c == '-' || c == '.' ||
         u >= 0x80;  // letters of other scripts (vLLM's \w)
}

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

}  // namespace

std::optional<ojson> ParseGemma4Arguments(std::string_view args) {
  // Read as an object whose closing brace is appended: the same rules as a nested object.
  std::string text(args);
  text += '}';
  Reader r(text);
  ojson out;
  if (!r.Object(out, 1) || r.pos() != text.size()) return std::nullopt;
  return out;
}

std::optional<ToolCall> ParseGemma4CallBody(std::string_view body) {
  std::string_view b = Trim(body);
  if (b.substr(0, kCall.size()) != kCall) return std::nullopt;
  b.remove_prefix(kCall.size());
  size_t brace = b.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  std::string_view name = Trim(b.substr(0, brace));
  if (name.empty()) return std::nullopt;
  for (char c : name)
    if (!IsNameChar(c)) return std::nullopt;
  Reader r(b.substr(brace + 1));
  ojson args;
  if (!r.Object(args, 1)) return std::nullopt;
  r.SkipWs();
  if (!r.AtEnd()) return std::nullopt;  // text after the arguments' closing brace
  ToolCall call;
  call.name = std::string(name);
  call.arguments = Dump(args);
  return call;
}

Gemma4ToolCallParser::Gemma4ToolCallParser(std::function<std::string()> make_id)
    : TaggedToolCallParser(std::string(kOpen), std::string(kClose), std::move(make_id)) {}

std::optional<ToolCall> Gemma4ToolCallParser::ParseBody(std::string_view body) const {
  return ParseGemma4CallBody(body);
}

ToolParseResult ParseGemma4ToolCalls(std::string_view text, std::function<std::string()> make_id) {
  Gemma4ToolCallParser parser(std::move(make_id));
  return RunToolParser(parser, text);
}

}  // namespace tessera

// tessera grammar: JSON string bodies and JSON Schema's string keywords (see json_strings.h).
#include "grammar/json_strings.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "grammar/regex.h"
#include "grammar/unicode_sets.h"

namespace tessera::grammar {
namespace {

using nlohmann::ordered_json;

// Formats as regexes over the decoded value (ASCII only, so the JSON encoding is the text itself).
// Each keeps to a subset every validator accepts: February has 28 days, no leap seconds.
const char* FormatRegex(const std::string& format) {
  static const std::string kDate =
      "(000[1-9]|00[1-9][0-9]|0[1-9][0-9][0-9]|[1-9][0-9][0-9][0-9])-"
      "((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)";
  static const std::string kTime =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kDateTime = kDate + "T" + kTime;
  static const std::string kLabel = "[A-Za-z0-9]+(-[A-Za-z0-9]+)*";
  static const std::string kEmail =
      "[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@" + kLabel + "(\\." + kLabel + ")*\\.[A-Za-z][A-Za-z]+";
  // RFC 3986: a '%' only as a percent-encoded octet (two hex digits).
  static const std::string kPct = "%[0-9A-Fa-f][0-9A-Fa-f]";
  static const std::string kUri = "https?://" + kLabel + "(\\." + kLabel + ")*(:[0-9]{1,5})?(/([A-Za-z0-9._~!$&'()*+,;=:@-]|" +
                                  kPct + ")*)*(\\?([A-Za-z0-9._~!$&'()*+,;=:@/?-]|" + kPct + ")*)?";
  if (format == "date") return kDate.c_str();
  if (format == "time") return kTime.c_str();
  if (format == "date-time") return kDateTime.c_str();
  if (format == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (format == "email") return kEmail.c_str();
  if (format == "ipv4")
    return "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  if (format == "uri") return kUri.c_str();
  return nullptr;
}

int32_t LengthKeyword(const ordered_json& s, const char* key, const std::string& path) {
  const ordered_json& v = s[key];
  if (!v.is_number_integer() || v.get<long long>() < 0)
    Fail(ErrorKind::kInvalidArgument, "{}: '{}' must be a non-negative integer", path, key);
  long long n = v.get<long long>();
  if (n > 100000) Fail(ErrorKind::kInvalidArgument, "{}: '{}' of {} is too large to enforce", path, key, n);
  return static_cast<int32_t>(n);
}

}  // namespace

ExprId JsonAnyCharExpr(Grammar* g) {
  ExprId canonical = JsonCharExpr(g, CodepointSet::Range(0, kMaxCodepoint));
  ExprId hex = g->Bytes(ByteSet::Range('0', '9') | ByteSet::Range('a', 'f') | ByteSet::Range('A', 'F'));
  ExprId hex2 = g->Repeat(hex, 2, 2);
  ExprId u = g->Literal("\\u");
  // \uXXXX outside D800-DFFF: a first hex digit other than d/D, or d/D followed by 0-7.
  ExprId not_d = g->Bytes(ByteSet::Range('0', '9') | ByteSet::Range('a', 'c') | ByteSet::Range('A', 'C') |
                          ByteSet::Range('e', 'f') | ByteSet::Range('E', 'F'));
  ExprId d = g->Bytes(ByteSet::Single('d') | ByteSet::Single('D'));
  ExprId bmp = g->Seq({u, g->Alt({g->Seq({not_d, hex, hex2}), g->Seq({d, g->Bytes(ByteSet::Range('0', '7')), hex2})})});
  ExprId high =
      g->Seq({u, d, g->Bytes(ByteSet::Range('8', '9') | ByteSet::Range('a', 'b') | ByteSet::Range('A', 'B')), hex2});
  ExprId low = g->Seq({u, d, g->Bytes(ByteSet::Range('c', 'f') | ByteSet::Range('C', 'F')), hex2});
  return g->Alt({canonical, g->Literal("\\/"), bmp, g->Seq({high, low})});
}

ExprId JsonStringBodyExpr(Grammar* g, const ordered_json& s, const std::string& path, const AutomatonLimits& limits) {
  std::vector<ExprId> parts;
  if (s.contains("format")) {
    if (!s["format"].is_string()) Fail(ErrorKind::kInvalidArgument, "{}: 'format' must be a string", path);
    std::string f = s["format"].get<std::string>();
    const char* re = FormatRegex(f);
    if (!re)
      Fail(ErrorKind::kInvalidArgument,
           "{}: unsupported string format '{}' (supported: date-time, date, time, uuid, email, ipv4, uri)", path, f);
    parts.push_back(CompileRegex(g, re, {RegexOptions::Target::kJsonString, false}, path + "/format"));
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) Fail(ErrorKind::kInvalidArgument, "{}: 'pattern' must be a string", path);
    parts.push_back(
        CompileRegex(g, s["pattern"].get<std::string>(), {RegexOptions::Target::kJsonString, true}, path + "/pattern"));
  }
  bool has_min = s.contains("minLength"), has_max = s.contains("maxLength");
  if (has_min || has_max) {
    int32_t lo = has_min ? LengthKeyword(s, "minLength", path) : 0;
    int32_t hi = has_max ? LengthKeyword(s, "maxLength", path) : Grammar::kUnbounded;
    if (hi != Grammar::kUnbounded && hi < lo)
      Fail(ErrorKind::kInvalidArgument, "{}: maxLength {} is below minLength {}", path, hi, lo);
    // A counted character is one canonical encoding (raw UTF-8 or a required escape): the optional
    // \uXXXX and \/ forms would add states to every one of the up to maxLength positions (and
    // with a pattern or format only canonical encodings are generated anyway).
    parts.push_back(g->Repeat(JsonCharExpr(g, CodepointSet::Range(0, kMaxCodepoint)), lo, hi));
  }
  if (parts.empty()) return g->Star(JsonAnyCharExpr(g));
  ExprId acc = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) acc = IntersectExprs(g, acc, parts[i], limits, path);
  if (g->expr(acc).kind == ExprKind::kNothing)
    Fail(ErrorKind::kInvalidArgument, "{}: no string satisfies pattern, format and length together", path);
  return acc;
}

std::string JsonQuote(const std::string& value) {
  std::string out = "\"";
  for (unsigned char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace tessera::grammar

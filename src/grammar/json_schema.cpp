// tessera grammar: JSON Schema to grammar (see json_schema.h). One rule per distinct object, array,
// constrained string or number schema (deduplicated by content) and per $ref target (which is what
// makes recursive schemas work); enums, consts, booleans and null are inlined.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/json_numbers.h"
#include "grammar/json_strings.h"
#include "grammar/regex.h"
#include "grammar/unicode_sets.h"

namespace tessera::grammar {
namespace {

using nlohmann::ordered_json;

const std::set<std::string>& Annotations() {
  static const std::set<std::string> s = {
      "title",   "description",     "default",          "examples",  "$comment",
      "$schema", "deprecated",      "readOnly",         "writeOnly", "discriminator",
      "$id",     "contentEncoding", "contentMediaType", "$defs",     "definitions"};
  return s;
}

const std::set<std::string>& Handled() {
  static const std::set<std::string> s = {
      "type",          "enum",         "const",    "properties",       "required",         "additionalProperties",
      "items",         "prefixItems",  "minItems", "maxItems",         "uniqueItems",      "anyOf",
      "oneOf",         "allOf",        "$ref",     "pattern",          "minLength",        "maxLength",
      "format",        "minimum",      "maximum",  "exclusiveMinimum", "exclusiveMaximum", "nullable",
      "minProperties", "maxProperties"};
  return s;
}

std::string PointerEscape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

constexpr uint32_t kNull = 1, kBool = 2, kNum = 4, kStr = 8, kObj = 16, kArr = 32, kAll = 63;

uint32_t TypeBit(const std::string& t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBool;
  if (t == "integer" || t == "number") return kNum;
  if (t == "string") return kStr;
  if (t == "object") return kObj;
  if (t == "array") return kArr;
  return 0;
}

uint32_t ValueBit(const ordered_json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_number()) return kNum;
  if (v.is_string()) return kStr;
  if (v.is_object()) return kObj;
  return kArr;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const ordered_json& root, const JsonGrammarOptions& o, const AutomatonLimits& l)
      : root_(root), options_(o), limits_(l) {}

  Grammar Schema() {
    int32_t r = g_.AddRule("root");
    g_.set_root(r);
    g_.SetBody(r, Value(root_, "", 0));
    return std::move(g_);
  }
  Grammar AnyObject() {
    int32_t r = g_.AddRule("root");
    g_.set_root(r);
    g_.SetBody(r, AnyObjectCall());
    return std::move(g_);
  }

 private:
  [[noreturn]] void Error(const std::string& path, const std::string& msg) const {
    Fail(ErrorKind::kInvalidArgument, "json schema: {}: {}", path.empty() ? "(root)" : path, msg);
  }

  ExprId Cached(const std::string& key, const std::string& name, const std::function<ExprId()>& body) {
    auto it = rules_.find(key);
    if (it != rules_.end()) return g_.Call(it->second);
    int32_t r = g_.AddRule(name);
    rules_.emplace(key, r);
    g_.SetBody(r, body());
    return g_.Call(r);
  }

  ExprId Ws() {
    if (options_.max_whitespace <= 0) return g_.Empty();
    return Cached("ws", "ws", [&] {
      return g_.Repeat(
          g_.Bytes(ByteSet::Single(' ') | ByteSet::Single('\t') | ByteSet::Single('\n') | ByteSet::Single('\r')), 0,
          options_.max_whitespace);
    });
  }
  ExprId Comma() { return g_.Seq({Ws(), g_.Literal(","), Ws()}); }
  ExprId AnyStringCall() {
    return Cached("string", "string", [&] {
      return g_.Seq({g_.Literal("\""), g_.Star(JsonAnyCharExpr(&g_)), g_.Literal("\"")});
    });
  }
  ExprId AnyValueCall() {
    return Cached("any", "value", [&] {
      return g_.Alt({AnyObjectCall(), AnyArrayCall(), AnyStringCall(),
                     Cached("number", "number", [&] { return JsonNumberExpr(&g_); }), g_.Literal("true"),
                     g_.Literal("false"), g_.Literal("null")});
    });
  }
  ExprId AnyObjectCall() {
    return Cached("any-object", "object", [&] {
      ExprId member = g_.Seq({AnyStringCall(), Ws(), g_.Literal(":"), Ws(), AnyValueCall()});
      ExprId members = g_.Seq({member, g_.Star(g_.Seq({Comma(), member})), Ws(), g_.Literal("}")});
      return g_.Seq({g_.Literal("{"), Ws(), g_.Alt({g_.Literal("}"), members})});
    });
  }
  ExprId AnyArrayCall() {
    return Cached("any-array", "array", [&] {
      ExprId v = AnyValueCall();
      ExprId items = g_.Seq({v, g_.Star(g_.Seq({Comma(), v})), Ws(), g_.Literal("]")});
      return g_.Seq({g_.Literal("["), Ws(), g_.Alt({g_.Literal("]"), items})});
    });
  }

  void CheckKeywords(const ordered_json& s, const std::string& path) const {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (!Annotations().count(k) && !Handled().count(k)) Error(path, fmt::format("unsupported keyword '{}'", k));
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] != false)
      Error(path, "unsupported keyword 'uniqueItems' (true cannot be enforced while generating)");
    if (s.contains("nullable") && s["nullable"] != false)
      Error(path, "unsupported keyword 'nullable' (write a type list such as [\"string\", \"null\"])");
    if (s.contains("$id") && &s != &root_) Error(path, "unsupported keyword '$id' below the root");
  }

  // Fails unless every keyword of s beside `keyword` is an annotation or in `also`.
  void OnlyWith(const ordered_json& s, const std::string& path, const std::string& keyword,
                const std::set<std::string>& also = {}) const {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (k == keyword || Annotations().count(k) || also.count(k) || (k == "nullable" && it.value() == false)) continue;
      Error(path, fmt::format("keyword '{}' beside '{}' is not supported", k, keyword));
    }
  }

  const ordered_json& Resolve(const std::string& ref, const std::string& path) const {
    if (ref.empty() || ref[0] != '#')
      Error(path, fmt::format("$ref '{}' is not supported: only local references (\"#...\") are", ref));
    const ordered_json* cur = &root_;
    std::string p = ref.substr(1);
    if (p.empty()) return *cur;
    if (p[0] != '/') Error(path, fmt::format("$ref '{}' is not supported: anchors are not, JSON pointers are", ref));
    size_t i = 1;
    while (true) {
      size_t j = p.find('/', i);
      std::string raw = p.substr(i, j == std::string::npos ? std::string::npos : j - i), tok;
      for (size_t k = 0; k < raw.size(); ++k) {
        if (raw[k] == '~' && k + 1 < raw.size()) {
          tok += raw[k + 1] == '1' ? '/' : '~';
          ++k;
        } else if (raw[k] == '%' && k + 2 < raw.size()) {
          tok += static_cast<char>(std::stoi(raw.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          tok += raw[k];
        }
      }
      if (cur->is_object() && cur->contains(tok)) {
        cur = &(*cur)[tok];
      } else if (cur->is_array() && !tok.empty() && tok.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(tok) < cur->size()) {
        cur = &(*cur)[std::stoul(tok)];
      } else {
        Error(path, fmt::format("$ref '{}' does not resolve", ref));
      }
      if (j == std::string::npos) break;
      i = j + 1;
    }
    return *cur;
  }

  ExprId Value(const ordered_json& s, const std::string& path, int depth) {
    if (depth > 128) Error(path, "schema nested too deeply");
    if (s.is_boolean()) return s.get<bool>() ? AnyValueCall() : g_.Nothing();
    if (!s.is_object()) Error(path, "a schema must be an object or a boolean");
    CheckKeywords(s, path);
    if (s.contains("$ref")) {
      OnlyWith(s, path, "$ref");
      if (!s["$ref"].is_string()) Error(path, "'$ref' must be a string");
      std::string ref = s["$ref"].get<std::string>();
      return Cached("ref:" + ref, "ref " + ref,
                    [&, ref] { return Value(Resolve(ref, path), ref.size() > 1 ? ref.substr(1) : "", depth + 1); });
    }
    if (s.contains("allOf")) {
      OnlyWith(s, path, "allOf");
      if (!s["allOf"].is_array() || s["allOf"].empty()) Error(path, "'allOf' must be a non-empty array");
      // Trivial only: every member but one allows anything (true, {}, or annotations alone).
      int kept = -1;
      for (size_t i = 0; i < s["allOf"].size(); ++i) {
        const ordered_json& m = s["allOf"][i];
        bool anything = m.is_boolean() ? m.get<bool>() : m.is_object();
        if (m.is_object())
          for (auto it = m.begin(); it != m.end(); ++it) anything = anything && Annotations().count(it.key());
        if (anything) continue;
        if (kept >= 0) Error(path, "unsupported keyword 'allOf' with more than one constraining schema (merge them)");
        kept = static_cast<int>(i);
      }
      if (kept < 0) return AnyValueCall();
      return Value(s["allOf"][static_cast<size_t>(kept)], fmt::format("{}/allOf/{}", path, kept), depth + 1);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      OnlyWith(s, path, kw);
      const ordered_json& branches = s[kw];
      if (!branches.is_array() || branches.empty()) Error(path, fmt::format("'{}' must be a non-empty array", kw));
      if (std::string(kw) == "oneOf") CheckOneOfDisjoint(branches, path);
      std::vector<ExprId> alts;
      for (size_t i = 0; i < branches.size(); ++i)
        alts.push_back(Value(branches[i], fmt::format("{}/{}/{}", path, kw, i), depth + 1));
      return g_.Alt(std::move(alts));
    }
    if (s.contains("enum") || s.contains("const")) return EnumValue(s, path);
    std::vector<std::string> types = TypesOf(s, path);
    if (types.empty()) return AnyValueCall();
    std::vector<ExprId> alts;
    for (const std::string& t : types) alts.push_back(TypedValue(t, s, path, depth));
    return g_.Alt(std::move(alts));
  }

  std::vector<std::string> TypesOf(const ordered_json& s, const std::string& path) const {
    if (s.contains("type")) {
      std::vector<std::string> out;
      const ordered_json& t = s["type"];
      if (t.is_string()) {
        out.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) Error(path, "'type' entries must be strings");
          out.push_back(x.get<std::string>());
        }
      } else {
        Error(path, "'type' must be a string or a non-empty array of strings");
      }
      for (const auto& x : out)
        if (!TypeBit(x)) Error(path, fmt::format("unknown type '{}'", x));
      return out;
    }
    for (const char* k : {"properties", "required", "additionalProperties", "minProperties", "maxProperties"})
      if (s.contains(k)) return {"object"};
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return {"array"};
    for (const char* k : {"pattern", "minLength", "maxLength", "format"})
      if (s.contains(k)) return {"string"};
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return {"number"};
    return {};
  }

  ExprId EnumValue(const ordered_json& s, const std::string& path) {
    OnlyWith(s, path, s.contains("enum") ? "enum" : "const", {"type", "enum", "const"});
    std::vector<ordered_json> values;
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) Error(path, "'enum' must be a non-empty array");
      for (const auto& v : s["enum"]) values.push_back(v);
    }
    if (s.contains("const")) {
      if (s.contains("enum") && std::find(values.begin(), values.end(), s["const"]) == values.end())
        Error(path, "'const' is not one of the 'enum' values");
      values = {s["const"]};
    }
    uint32_t allowed = kAll;
    bool integer_only = false;
    if (s.contains("type")) {
      allowed = 0;
      for (const std::string& t : TypesOf(s, path)) allowed |= TypeBit(t);
      std::vector<std::string> ts = TypesOf(s, path);
      integer_only = std::find(ts.begin(), ts.end(), "integer") != ts.end() &&
                     std::find(ts.begin(), ts.end(), "number") == ts.end();
    }
    std::vector<ExprId> alts;
    for (const auto& v : values) {
      if (!(ValueBit(v) & allowed)) continue;
      if (integer_only && v.is_number_float() && std::floor(v.get<double>()) != v.get<double>()) continue;
      alts.push_back(g_.Literal(v.is_string() ? JsonQuote(v.get<std::string>()) : v.dump()));
    }
    if (alts.empty()) Error(path, "no 'enum' / 'const' value has the schema's type");
    return g_.Alt(std::move(alts));
  }

  std::optional<NumberBound> Bound(const ordered_json& s, const std::string& path, const char* inclusive,
                                   const char* exclusive, bool lower) const {
    std::optional<NumberBound> out;
    auto read = [&](const char* key, bool excl) {
      if (!s.contains(key)) return;
      const ordered_json& v = s[key];
      if (v.is_boolean())
        Error(path, fmt::format("boolean '{}' (draft 4) is not supported: give the bound itself", key));
      if (!v.is_number()) Error(path, fmt::format("'{}' must be a number", key));
      NumberBound b;
      b.exclusive = excl;
      b.value = v.is_number_unsigned()  ? Decimal::FromUint(v.get<unsigned long long>())
                : v.is_number_integer() ? Decimal::FromInt(v.get<long long>())
                                        : Decimal::FromDouble(v.get<double>());
      if (!out) {
        out = b;
        return;
      }
      int c = CompareDecimals(b.value, out->value);
      bool tighter = lower ? (c > 0 || (c == 0 && excl)) : (c < 0 || (c == 0 && excl));
      if (tighter) out = b;
    };
    read(inclusive, false);
    read(exclusive, true);
    return out;
  }

  ExprId TypedValue(const std::string& t, const ordered_json& s, const std::string& path, int depth) {
    if (t == "null") return g_.Literal("null");
    if (t == "boolean") return g_.Alt({g_.Literal("true"), g_.Literal("false")});
    if (t == "integer" || t == "number") {
      auto lo = Bound(s, path, "minimum", "exclusiveMinimum", true);
      auto hi = Bound(s, path, "maximum", "exclusiveMaximum", false);
      bool integer = t == "integer";
      if (!lo && !hi) return Cached(t, t, [&] { return integer ? JsonIntegerExpr(&g_) : JsonNumberExpr(&g_); });
      std::string key =
          fmt::format("{}:{}{}:{}{}", t, lo ? (lo->exclusive ? "(" : "[") : "", lo ? lo->value.ToString() : "",
                      hi ? hi->value.ToString() : "", hi ? (hi->exclusive ? ")" : "]") : "");
      return Cached(key, key, [&] {
        return integer ? IntegerRangeExpr(&g_, lo, hi, limits_, "json schema: " + (path.empty() ? "(root)" : path))
                       : NumberRangeExpr(&g_, lo, hi, limits_, "json schema: " + (path.empty() ? "(root)" : path));
      });
    }
    if (t == "string") {
      ordered_json keys = ordered_json::object();
      for (const char* k : {"pattern", "minLength", "maxLength", "format"})
        if (s.contains(k)) keys[k] = s[k];
      if (keys.empty()) return AnyStringCall();
      return Cached("string:" + keys.dump(), "string " + keys.dump(), [&] {
        return g_.Seq(
            {g_.Literal("\""), JsonStringBodyExpr(&g_, s, path.empty() ? "(root)" : path, limits_), g_.Literal("\"")});
      });
    }
    if (t == "object")
      return Cached("object:" + s.dump(), "object " + path, [&] { return ObjectBody(s, path, depth); });
    return Cached("array:" + s.dump(), "array " + path, [&] { return ArrayBody(s, path, depth); });
  }

  ExprId ObjectBody(const ordered_json& s, const std::string& path, int depth) {
    const ordered_json empty = ordered_json::object();
    const ordered_json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) Error(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) Error(path, "'required' must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) Error(path, "'required' entries must be strings");
        if (!props.contains(r.get<std::string>()))
          Error(path, fmt::format("required property '{}' is not declared in 'properties'", r.get<std::string>()));
        required.insert(r.get<std::string>());
      }
    }
    struct Prop {
      ExprId member;
      bool required;
    };
    std::vector<Prop> list;
    std::vector<ExprId> names;
    for (auto it = props.begin(); it != props.end(); ++it) {
      std::string sub = path + "/properties/" + PointerEscape(it.key());
      ExprId v = Value(it.value(), sub, depth + 1);
      bool req = required.count(it.key()) != 0;
      names.push_back(g_.Literal(JsonQuote(it.key())));
      if (g_.expr(v).kind == ExprKind::kNothing) {
        if (req) Error(sub, "a required property whose schema allows no value");
        continue;
      }
      list.push_back({g_.Seq({g_.Literal(JsonQuote(it.key())), Ws(), g_.Literal(":"), Ws(), v}), req});
    }
    // Additional properties: absent means none when properties are declared, any otherwise.
    ExprId add = -1;
    const bool has_add = s.contains("additionalProperties");
    const ordered_json add_schema = has_add ? s["additionalProperties"] : ordered_json(!s.contains("properties"));
    if (!(add_schema.is_boolean() && !add_schema.get<bool>())) {
      ExprId v = Value(add_schema, path + "/additionalProperties", depth + 1);
      if (g_.expr(v).kind != ExprKind::kNothing) {
        std::string key_id = "key-except:" + ordered_json(props.is_object() ? props : empty).dump();
        ExprId key = Cached(key_id, "additional key", [&] {
          ExprId body = g_.Star(JsonCharExpr(&g_, CodepointSet::Range(0, kMaxCodepoint)));
          ExprId quoted = g_.Seq({g_.Literal("\""), body, g_.Literal("\"")});
          return names.empty() ? quoted : SubtractExprs(&g_, quoted, g_.Alt(names), limits_, "json schema: " + path);
        });
        add = g_.Seq({key, Ws(), g_.Literal(":"), Ws(), v});
      }
    }
    CheckPropertyCounts(s, path, required.size(), add >= 0 ? SIZE_MAX : list.size());
    const ExprId comma = Comma();
    auto rest = [&](size_t from) {
      std::vector<ExprId> seq;
      for (size_t j = from; j < list.size(); ++j) {
        ExprId m = g_.Seq({comma, list[j].member});
        seq.push_back(list[j].required ? m : g_.Optional(m));
      }
      if (add >= 0) seq.push_back(g_.Star(g_.Seq({comma, add})));
      return g_.Seq(std::move(seq));
    };
    // The first member present: any optional one up to the first required one.
    std::vector<ExprId> first;
    bool any_required = false;
    for (size_t k = 0; k < list.size(); ++k) {
      first.push_back(g_.Seq({list[k].member, rest(k + 1)}));
      if (list[k].required) {
        any_required = true;
        break;
      }
    }
    if (!any_required && add >= 0) first.push_back(g_.Seq({add, g_.Star(g_.Seq({comma, add}))}));
    ExprId close = g_.Literal("}");
    ExprId members = g_.Seq({g_.Alt(std::move(first)), Ws(), close});
    return g_.Seq({g_.Literal("{"), Ws(), any_required ? members : g_.Alt({close, members})});
  }

  void CheckPropertyCounts(const ordered_json& s, const std::string& path, size_t n_required, size_t max_possible) {
    if (s.contains("minProperties")) {
      const auto& v = s["minProperties"];
      if (!v.is_number_integer() || v.get<long long>() > static_cast<long long>(n_required))
        Error(path, "unsupported keyword 'minProperties' (only when the required properties already satisfy it)");
    }
    if (s.contains("maxProperties")) {
      const auto& v = s["maxProperties"];
      if (!v.is_number_integer() || max_possible == SIZE_MAX ||
          v.get<long long>() < static_cast<long long>(max_possible))
        Error(path, "unsupported keyword 'maxProperties' (only when the declared properties cannot exceed it)");
    }
  }

  int32_t Count(const ordered_json& s, const char* key, const std::string& path) const {
    const auto& v = s[key];
    if (!v.is_number_integer() || v.get<long long>() < 0)
      Error(path, fmt::format("'{}' must be a non-negative integer", key));
    if (v.get<long long>() > 100000) Error(path, fmt::format("'{}' is too large to enforce", key));
    return static_cast<int32_t>(v.get<long long>());
  }

  ExprId ArrayBody(const ordered_json& s, const std::string& path, int depth) {
    int32_t lo = s.contains("minItems") ? Count(s, "minItems", path) : 0;
    int32_t hi = s.contains("maxItems") ? Count(s, "maxItems", path) : Grammar::kUnbounded;
    if (hi != Grammar::kUnbounded && hi < lo) Error(path, "maxItems is below minItems");
    if (s.contains("items") && s["items"].is_array())
      Error(path, "'items' as an array (tuple form) is not supported: use 'prefixItems'");
    const ExprId open = g_.Literal("["), close = g_.Literal("]"), comma = Comma();
    if (s.contains("prefixItems")) {
      const auto& pre = s["prefixItems"];
      if (!pre.is_array()) Error(path, "'prefixItems' must be an array");
      int32_t k = static_cast<int32_t>(pre.size());
      if (lo > k) Error(path, "minItems beyond 'prefixItems' is not supported");
      int32_t top = hi == Grammar::kUnbounded ? k : std::min(hi, k);
      // Arrays of the first j prefix items, lo <= j <= top (further items are never generated).
      std::vector<ExprId> alts, seq;
      for (int32_t j = 1; j <= top; ++j) {
        ExprId v = Value(pre[static_cast<size_t>(j - 1)], fmt::format("{}/prefixItems/{}", path, j - 1), depth + 1);
        if (g_.expr(v).kind == ExprKind::kNothing) break;
        if (j > 1) seq.push_back(comma);
        seq.push_back(v);
        if (j >= lo) alts.push_back(g_.Seq({g_.Seq(seq), Ws(), close}));
      }
      if (lo == 0) alts.push_back(close);
      if (alts.empty()) Error(path, "no array satisfies prefixItems and minItems");
      return g_.Seq({open, Ws(), g_.Alt(std::move(alts))});
    }
    ExprId v = s.contains("items") ? Value(s["items"], path + "/items", depth + 1) : AnyValueCall();
    if (hi == 0 || g_.expr(v).kind == ExprKind::kNothing) {
      if (lo > 0) Error(path, "no array satisfies items and minItems");
      return g_.Seq({open, Ws(), close});
    }
    ExprId more = g_.Repeat(g_.Seq({comma, v}), std::max(lo, 1) - 1, hi == Grammar::kUnbounded ? hi : hi - 1);
    ExprId items = g_.Seq({v, more, Ws(), close});
    return g_.Seq({open, Ws(), lo == 0 ? g_.Alt({close, items}) : items});
  }

  // The JSON types a schema's values can have (kAll when unknown).
  uint32_t BranchTypes(const ordered_json& s, int depth) const {
    if (depth > 32) return kAll;
    if (s.is_boolean()) return s.get<bool>() ? kAll : 0;
    if (!s.is_object()) return kAll;
    if (s.contains("$ref") && s["$ref"].is_string())
      return BranchTypes(Resolve(s["$ref"].get<std::string>(), ""), depth + 1);
    if (s.contains("const")) return ValueBit(s["const"]);
    if (s.contains("enum") && s["enum"].is_array()) {
      uint32_t m = 0;
      for (const auto& v : s["enum"]) m |= ValueBit(v);
      return m;
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k) && s[k].is_array()) {
        uint32_t m = 0;
        for (const auto& b : s[k]) m |= BranchTypes(b, depth + 1);
        return m;
      }
    if (s.contains("allOf") && s["allOf"].is_array() && s["allOf"].size() == 1)
      return BranchTypes(s["allOf"][0], depth + 1);
    uint32_t m = 0;
    for (const auto& t : TypesOf(s, "")) m |= TypeBit(t);
    return m ? m : kAll;
  }

  const ordered_json& Deref(const ordered_json& s) const {
    const ordered_json* cur = &s;
    for (int i = 0; i < 32 && cur->is_object() && cur->contains("$ref") && (*cur)["$ref"].is_string(); ++i)
      cur = &Resolve((*cur)["$ref"].get<std::string>(), "");
    return *cur;
  }

  // oneOf means "exactly one": treated as anyOf only when no value can match two branches.
  void CheckOneOfDisjoint(const ordered_json& branches, const std::string& path) const {
    std::vector<uint32_t> types;
    for (const auto& b : branches) types.push_back(BranchTypes(b, 0));
    bool disjoint = true;
    for (size_t i = 0; i < types.size() && disjoint; ++i)
      for (size_t j = i + 1; j < types.size() && disjoint; ++j) disjoint = (types[i] & types[j]) == 0;
    if (disjoint) return;
    // A discriminating property: required in every branch, with pairwise distinct const / enum values.
    const ordered_json& first = Deref(branches[0]);
    if (first.is_object() && first.contains("required") && first["required"].is_array()) {
      for (const auto& cand : first["required"]) {
        if (!cand.is_string()) continue;
        std::string p = cand.get<std::string>();
        std::set<std::string> seen;
        bool ok = true;
        for (const auto& b0 : branches) {
          const ordered_json& b = Deref(b0);
          if (!b.is_object() || !b.contains("required") || !b.contains("properties") ||
              std::find(b["required"].begin(), b["required"].end(), cand) == b["required"].end() ||
              !b["properties"].contains(p)) {
            ok = false;
            break;
          }
          const ordered_json& ps = Deref(b["properties"][p]);
          std::vector<ordered_json> vals;
          if (ps.is_object() && ps.contains("const")) vals.push_back(ps["const"]);
          if (ps.is_object() && ps.contains("enum") && ps["enum"].is_array() && !ps.contains("const"))
            for (const auto& v : ps["enum"]) vals.push_back(v);
          if (vals.empty()) {
            ok = false;
            break;
          }
          for (const auto& v : vals)
            if (!seen.insert(v.dump()).second) ok = false;
          if (!ok) break;
        }
        if (ok) return;
      }
    }
    Error(path,
          "unsupported keyword 'oneOf' whose branches may overlap (allowed when they have different types or a "
          "required property with distinct const/enum values; otherwise use anyOf)");
  }

  const ordered_json& root_;
  JsonGrammarOptions options_;
  AutomatonLimits limits_;
  Grammar g_;
  std::map<std::string, int32_t> rules_;
};

}  // namespace

Grammar JsonSchemaGrammar(std::string_view schema_text, const JsonGrammarOptions& options,
                          const AutomatonLimits& limits) {
  ordered_json schema;
  try {
    schema = ordered_json::parse(schema_text);
  } catch (const ordered_json::exception& e) {
    Fail(ErrorKind::kInvalidArgument, "json schema: not valid JSON: {}", e.what());
  }
  return SchemaCompiler(schema, options, limits).Schema();
}

Grammar AnyJsonObjectGrammar(const JsonGrammarOptions& options) {
  ordered_json root = ordered_json::object();
  return SchemaCompiler(root, options, AutomatonLimits{}).AnyObject();
}

}  // namespace tessera::grammar

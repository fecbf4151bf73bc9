// tessera jinja: Value construction, Python-style printing (str/repr), json.dumps, equality.
#include "tokenizer/template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace tessera::jinja {

Value Value::Undefined(std::string hint) {
  Value v;
  v.undefined_hint_ = std::move(hint);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::Dict(ValueDict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}
Value Value::Namespace(ValueDict items) {
  Value v = Dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(Value(k), FromJson(e));
      return Dict(std::move(items));
    }
    default: Fail(ErrorKind::kInvalidArgument, "template context: unsupported JSON value (binary)");
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0.0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    default: return true;
  }
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exp = std::stoi(sci.substr(e + 1));
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {  // piece by piece: GCC 12 warns (-Wrestrict) on "." + substr
      out += '.';
      out += digits.substr(1);
    }
    out += exp < 0 ? "e-" : "e+";
    std::string es = std::to_string(std::abs(exp));
    if (es.size() < 2) es = "0" + es;
    out += es;
  }
  return neg ? "-" + out : out;
}

namespace {

// Decodes one UTF-8 code point at s[i]; advances i. Invalid bytes decode as themselves.
uint32_t DecodeUtf8(const std::string& s, size_t& i) {
  unsigned char c = s[i];
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  i += n;
  return cp;
}

void JsonEscape(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void DumpJson(const Value& v, const std::optional<std::string>& indent, const std::string& item_sep,
              const std::string& key_sep, bool sort_keys, int level, std::string& out) {
  if (level > 512) Fail(ErrorKind::kInvalidArgument, "tojson: value nested too deeply");
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.AsBool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.AsInt()); return;
    case Value::Kind::kFloat: {
      double d = v.AsFloat();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FormatFloat(d);
      return;
    }
    case Value::Kind::kString: JsonEscape(v.AsString(), out); return;
    case Value::Kind::kList: {
      const auto& l = v.AsList();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += item_sep;
        if (indent) newline(level + 1);
        DumpJson(l[i], indent, item_sep, key_sep, sort_keys, level + 1, out);
      }
      if (indent) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.AsDict()) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
          if (a->first.IsString() && b->first.IsString()) return a->first.AsString() < b->first.AsString();
          if (a->first.IsNumber() && b->first.IsNumber()) return a->first.AsFloat() < b->first.AsFloat();
          Fail(ErrorKind::kInvalidArgument, "tojson: cannot sort keys of mixed types");
        });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (indent) newline(level + 1);
        const Value& k = items[i]->first;
        if (k.IsString()) {
          JsonEscape(k.AsString(), out);
        } else if (k.IsBool() || k.IsInt() || k.IsFloat() || k.IsNone()) {
          std::string ks;
          DumpJson(k, indent, item_sep, key_sep, sort_keys, level + 1, ks);
          out += '"' + ks + '"';
        } else {
          Fail(ErrorKind::kInvalidArgument, "tojson: keys must be str, int, float, bool or None, not {}",
               k.TypeName());
        }
        out += key_sep;
        DumpJson(items[i]->second, indent, item_sep, key_sep, sort_keys, level + 1, out);
      }
      if (indent) newline(level);
      out += '}';
      return;
    }
    default:
      Fail(ErrorKind::kInvalidArgument, "tojson: Object of type {} is not JSON serializable", v.TypeName());
  }
}

}  // namespace

std::vector<std::string> Utf8Chars(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    DecodeUtf8(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

size_t Utf8Length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string ReprString(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    uint32_t cp = DecodeUtf8(s, i);
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
      out += fmt::format("\\x{:02x}", cp);
    } else if (cp == 0x2028 || cp == 0x2029) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out += s.substr(start, i - start);
    }
  }
  out += q;
  return out;
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kString: return ReprString(*s_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        if (i) out += ", ";
        out += (*dict_)[i].first.Repr() + ": " + (*dict_)[i].second.Repr();
      }
      return out + "}";
    }
    case Kind::kUndefined: return "Undefined";
    default: return Str();
  }
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return FormatFloat(d_);
    case Kind::kString: return *s_;
    case Kind::kNamespace: return "<Namespace " + Dict(*dict_).Repr() + ">";
    case Kind::kCallable: return "<function " + fn_->name + ">";
    default: return Repr();
  }
}

std::string Value::ToJson(std::optional<std::string> indent, std::optional<std::string> item_sep,
                          std::optional<std::string> key_sep, bool sort_keys) const {
  std::string out;
  DumpJson(*this, indent, item_sep.value_or(indent ? "," : ", "), key_sep.value_or(": "), sort_keys, 0, out);
  return out;
}

nlohmann::ordered_json Value::ToJsonValue() const {
  return nlohmann::ordered_json::parse(ToJson(std::nullopt, std::nullopt, std::nullopt, false));
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return tuple_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

Value* Value::Find(const Value& key) const {
  if (!dict_) return nullptr;
  for (auto& kv : *dict_)
    if (kv.first.Equals(key)) return &kv.second;
  return nullptr;
}

Value* Value::FindStr(const std::string& key) const {
  if (!dict_) return nullptr;
  for (auto& kv : *dict_)
    if (kv.first.IsString() && kv.first.AsString() == key) return &kv.second;
  return nullptr;
}

void Value::Set(const Value& key, Value v) const {
  if (Value* slot = Find(key)) {
    *slot = std::move(v);
  } else {
    dict_->emplace_back(key, std::move(v));
  }
}

bool Value::Equals(const Value& o) const {
  if (IsNumber() && o.IsNumber()) {
    if (IsFloat() || o.IsFloat()) return AsFloat() == o.AsFloat();
    return AsInt() == o.AsInt();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return *s_ == *o.s_;
    case Kind::kList: {
      if (tuple_ != o.tuple_ || list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i)
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& kv : *dict_) {
        Value* other = o.Find(kv.first);
        if (!other || !other->Equals(kv.second)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return dict_ == o.dict_;
    case Kind::kCallable: return fn_ == o.fn_;
    default: return false;
  }
}

const Value* CallArgs::Get(size_t i, const std::string& name) const {
  if (i < args.size()) return &args[i];
  for (const auto& kv : kwargs)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

void CallArgs::Expect(const std::string& fn, const std::vector<std::string>& allowed) const {
  if (args.size() > allowed.size())
    Fail(ErrorKind::kInvalidArgument, "{}() takes at most {} arguments ({} given)", fn, allowed.size(),
         args.size());
  for (const auto& kv : kwargs)
    if (std::find(allowed.begin(), allowed.end(), kv.first) == allowed.end())
      Fail(ErrorKind::kInvalidArgument, "{}() got an unexpected keyword argument '{}'", fn, kv.first);
}

}  // namespace tessera::jinja

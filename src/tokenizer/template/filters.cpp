// tessera jinja: the built-in filters and tests, with Jinja2's semantics (and transformers'
// tojson: json.dumps with ensure_ascii=False).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/template/interpreter.h"

namespace tessera::jinja {

// Defined in methods.cpp: Python str methods reused by filters.
Value CallStrMethod(const std::string& s, const std::string& name, CallArgs& args);
std::string Lower(const std::string& s) {
  CallArgs none;
  return CallStrMethod(s, "lower", none).AsString();
}

namespace {

const Value kNone = Value::None();

// By value: defaults are often temporaries.
Value Arg(const CallArgs& a, size_t i, const std::string& name, const Value& dflt) {
  const Value* v = a.Get(i, name);
  return v ? *v : dflt;
}

// Attribute paths like "a.b" or "0" as in Jinja's make_attrgetter.
Value GetPath(const Value& v, const Value& attr) {
  if (!attr.IsString()) return GetItem(v, attr);
  Value cur = v;
  std::string path = attr.AsString();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    cur = digits ? GetItem(cur, Value(static_cast<int64_t>(std::stoll(part)))) : GetItem(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort key: case-insensitive comparisons lower-case strings (Jinja's ignore_case).
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.IsString()) return Value(Lower(v.AsString()));
  return v;
}

// Indentation of `n` spaces (tojson's indent, the indent filter). A width past 64 MiB (the
// default output limit, as for 'x' * n) is an error before anything is allocated: indent(99999999999)
// asked for 100 GB, which ends the process under ASan and is a bad_alloc (a 500) without it.
std::string Spaces(int64_t n, const char* what) {
  if (n > (int64_t{64} << 20)) Fail(ErrorKind::kInvalidArgument, "{}: width {} is too large", what, n);
  return std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
}

std::string Strip(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\v\f"), e = s.find_last_not_of(" \t\n\r\v\f");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

Value Interpreter::CallFilter(const std::string& name, const Value& v, CallArgs& a) {
  auto str_method = [&](const char* m) {
    CallArgs none;
    return CallStrMethod(v.Str(), m, none);
  };
  if (name == "default" || name == "d") {
    a.Expect(name, {"default_value", "boolean"});
    bool boolean = Arg(a, 1, "boolean", Value(false)).Truthy();
    if (v.IsUndefined() || (boolean && !v.Truthy())) return Arg(a, 0, "default_value", Value(""));
    return v;
  }
  if (name == "tojson") {
    a.Expect(name, {"ensure_ascii", "indent", "separators", "sort_keys"});
    if (Arg(a, 0, "ensure_ascii", Value(false)).Truthy())
      Fail(ErrorKind::kUnsupported, "tojson(ensure_ascii=True) is not supported");
    Value ind = Arg(a, 1, "indent", kNone);
    std::optional<std::string> indent;
    if (ind.IsString()) indent = ind.AsString();
    if (ind.IsInt()) indent = Spaces(ind.AsInt(), "tojson indent");
    std::optional<std::string> item_sep, key_sep;
    Value sep = Arg(a, 2, "separators", kNone);
    if (!sep.IsNone()) {
      if (!sep.IsList() || sep.AsList().size() != 2 || !sep.AsList()[0].IsString() || !sep.AsList()[1].IsString())
        ThrowType("tojson separators must be a pair of strings");
      item_sep = sep.AsList()[0].AsString();
      key_sep = sep.AsList()[1].AsString();
    }
    return Value(v.ToJson(indent, item_sep, key_sep, Arg(a, 3, "sort_keys", Value(false)).Truthy()));
  }
  if (name == "length" || name == "count") {
    if (v.IsString()) return Value(static_cast<int64_t>(Utf8Length(v.AsString())));
    if (v.IsList()) return Value(static_cast<int64_t>(v.AsList().size()));
    if (v.IsDict() || v.IsNamespace()) return Value(static_cast<int64_t>(v.AsDict().size()));
    if (v.IsUndefined()) return Value(int64_t{0});
    ThrowType(fmt::format("object of type '{}' has no len()", v.TypeName()));
  }
  if (name == "trim") {
    if (const Value* chars = a.Get(0, "chars"); chars && !chars->IsNone()) {
      CallArgs sa;
      sa.args.push_back(*chars);
      return CallStrMethod(v.Str(), "strip", sa);
    }
    return Value(Strip(v.Str()));
  }
  if (name == "upper" || name == "lower" || name == "capitalize") return str_method(name.c_str());
  if (name == "title") {
    // Jinja's title upper-cases the first letter after '-', whitespace or an opening bracket.
    std::string s = v.Str(), out;
    auto chars = Utf8Chars(s);
    bool start = true;
    for (auto& c : chars) {
      bool sep = c.size() == 1 && std::strchr("- \t\n\r\v\f({[<", c[0]);
      CallArgs none;
      out += sep ? c : CallStrMethod(c, start ? "upper" : "lower", none).AsString();
      start = sep;
    }
    return Value(out);
  }
  if (name == "replace") {
    CallArgs sa;
    sa.args = {Arg(a, 0, "old", Value("")), Arg(a, 1, "new", Value(""))};
    if (const Value* c = a.Get(2, "count"); c && !c->IsNone()) sa.args.push_back(*c);
    return CallStrMethod(v.Str(), "replace", sa);
  }
  if (name == "string") return Value(v.Str());
  if (name == "safe" || name == "forceescape" || name == "escape" || name == "e") {
    if (name == "safe") return v;
    std::string out;
    for (char c : v.Str()) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value(out);
  }
  if (name == "int") {
    Value dflt = Arg(a, 0, "default", Value(int64_t{0}));
    if (v.IsInt() || v.IsBool()) return Value(v.AsInt());
    if (v.IsFloat()) return std::isfinite(v.AsFloat()) ? Value(static_cast<int64_t>(v.AsFloat())) : dflt;
    if (v.IsString()) {
      std::string s = Strip(v.AsString());
      int base = static_cast<int>(Arg(a, 1, "base", Value(int64_t{10})).AsInt());
      try {
        size_t used = 0;
        int64_t r = std::stoll(s, &used, base);
        if (used == s.size()) return Value(r);
        double d = std::stod(s, &used);
        if (used == s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
      } catch (const std::exception&) {
      }
    }
    return dflt;
  }
  if (name == "float") {
    Value dflt = Arg(a, 0, "default", Value(0.0));
    if (v.IsNumber()) return Value(v.AsFloat());
    if (v.IsString()) {
      try {
        size_t used = 0;
        std::string s = Strip(v.AsString());
        double d = std::stod(s, &used);
        if (used == s.size()) return Value(d);
      } catch (const std::exception&) {
      }
    }
    return dflt;
  }
  if (name == "abs") {
    if (v.IsFloat()) return Value(std::fabs(v.AsFloat()));
    if (v.IsNumber()) return Value(v.AsInt() < 0 ? -v.AsInt() : v.AsInt());
    if (v.IsUndefined()) ThrowUndefined(v);
    ThrowType(fmt::format("bad operand type for abs(): '{}'", v.TypeName()));
  }
  if (name == "round") {
    int64_t prec = Arg(a, 0, "precision", Value(int64_t{0})).AsInt();
    std::string method = Arg(a, 1, "method", Value("common")).Str();
    if (!v.IsNumber()) ThrowType("round() requires a number");
    if (method == "common" && (v.IsInt() || v.IsBool()) && prec >= 0) return Value(v.AsInt());  // round(int) stays int
    double x = v.AsFloat(), scale = std::pow(10.0, static_cast<double>(prec));
    double r = method == "ceil" ? std::ceil(x * scale) / scale
               : method == "floor" ? std::floor(x * scale) / scale
                                   : std::nearbyint(x * scale) / scale;  // Python rounds half to even
    return Value(r);
  }
  if (name == "list") return Value::List(Iterate(v));
  if (name == "first" || name == "last") {
    ValueList items = Iterate(v);
    if (items.empty()) return Value::Undefined(fmt::format("No {} item, sequence was empty.", name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.IsString()) return SliceValue(v, kNone, kNone, Value(int64_t{-1}));
    ValueList items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "join") {
    std::string sep = Arg(a, 0, "d", Value("")).Str(), out;
    const Value* attr = a.Get(1, "attribute");
    ValueList items = Iterate(v);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      out += (attr && !attr->IsNone() ? GetPath(items[i], *attr) : items[i]).Str();
    }
    return Value(out);
  }
  if (name == "items") {
    if (v.IsUndefined()) return Value::List();
    if (!v.IsDict()) ThrowType(fmt::format("can only get item pairs from a mapping, not {}", v.TypeName()));
    ValueList out;
    for (const auto& kv : v.AsDict()) out.push_back(Value::Tuple({kv.first, kv.second}));
    return Value::List(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.IsDict()) ThrowType("dictsort requires a mapping");
    bool cs = Arg(a, 0, "case_sensitive", Value(false)).Truthy();
    std::string by = Arg(a, 1, "by", Value("key")).Str();
    bool rev = Arg(a, 2, "reverse", Value(false)).Truthy();
    ValueList out;
    for (const auto& kv : v.AsDict()) out.push_back(Value::Tuple({kv.first, kv.second}));
    size_t idx = by == "value" ? 1 : 0;
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      int c = Compare(SortKey(x.AsList()[idx], cs), SortKey(y.AsList()[idx], cs), "<");
      return rev ? c > 0 : c < 0;
    });
    return Value::List(std::move(out));
  }
  if (name == "sort") {
    bool rev = Arg(a, 0, "reverse", Value(false)).Truthy();
    bool cs = Arg(a, 1, "case_sensitive", Value(false)).Truthy();
    Value attr = Arg(a, 2, "attribute", kNone);
    ValueList items = Iterate(v);
    auto key = [&](const Value& x) { return SortKey(attr.IsNone() ? x : GetPath(x, attr), cs); };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      int c = Compare(key(x), key(y), "<");
      return rev ? c > 0 : c < 0;
    });
    return Value::List(std::move(items));
  }
  if (name == "unique") {
    bool cs = Arg(a, 0, "case_sensitive", Value(false)).Truthy();
    Value attr = Arg(a, 1, "attribute", kNone);
    ValueList out, seen;
    for (auto& x : Iterate(v)) {
      Value k = SortKey(attr.IsNone() ? x : GetPath(x, attr), cs);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(k); })) continue;
      seen.push_back(k);
      out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "min" || name == "max") {
    bool cs = Arg(a, 0, "case_sensitive", Value(false)).Truthy();
    Value attr = Arg(a, 1, "attribute", kNone);
    ValueList items = Iterate(v);
    if (items.empty()) return Value::Undefined(fmt::format("No aggregated item, sequence was empty."));
    size_t best = 0;
    auto key = [&](const Value& x) { return SortKey(attr.IsNone() ? x : GetPath(x, attr), cs); };
    for (size_t i = 1; i < items.size(); ++i) {
      int c = Compare(key(items[i]), key(items[best]), "<");
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    Value attr = Arg(a, 0, "attribute", kNone);
    Value total = Arg(a, 1, "start", Value(int64_t{0}));
    for (auto& x : Iterate(v)) total = BinaryOp("+", total, attr.IsNone() ? x : GetPath(x, attr));
    return total;
  }
  if (name == "map") {
    ValueList out;
    if (const Value* attr = a.Get(99, "attribute")) {
      const Value* dflt = a.Get(99, "default");
      for (auto& x : Iterate(v)) {
        Value r = GetPath(x, *attr);
        out.push_back(r.IsUndefined() && dflt ? *dflt : r);
      }
      return Value::List(std::move(out));
    }
    if (a.args.empty()) ThrowType("map requires a filter argument");
    std::string filter = a.args[0].Str();
    CallArgs rest;
    rest.args.assign(a.args.begin() + 1, a.args.end());
    rest.kwargs = a.kwargs;
    for (auto& x : Iterate(v)) {
      CallArgs copy = rest;
      out.push_back(CallFilter(filter, x, copy));
    }
    return Value::List(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    bool attr_mode = name.size() > 6;
    bool want = name[0] == 's';
    size_t next = 0;
    Value attr;
    if (attr_mode) {
      if (a.args.empty()) ThrowType(name + " requires an attribute name");
      attr = a.args[next++];
    }
    std::string test = next < a.args.size() ? a.args[next++].Str() : "";
    CallArgs rest;
    rest.args.assign(a.args.begin() + std::min(next, a.args.size()), a.args.end());
    rest.kwargs = a.kwargs;
    ValueList out;
    for (auto& x : Iterate(v)) {
      Value subject = attr_mode ? GetPath(x, attr) : x;
      CallArgs copy = rest;
      bool ok = test.empty() ? subject.Truthy() : CallTest(test, subject, copy);
      if (ok == want) out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "attr") {  // attributes only: dict keys are not attributes here
    std::string attr = Arg(a, 0, "name", Value("")).Str();
    if (v.IsDict()) {
      Value m = GetMethod(v, attr);
      return m.IsUndefined() ? Value::Undefined(fmt::format("'dict object' has no attribute '{}'", attr)) : m;
    }
    return GetAttr(v, attr);
  }
  if (name == "indent") {
    Value w = Arg(a, 0, "width", Value(int64_t{4}));
    std::string ind = w.IsString() ? w.AsString() : Spaces(w.AsInt(), "indent");
    bool first = Arg(a, 1, "first", Value(false)).Truthy(), blank = Arg(a, 2, "blank", Value(false)).Truthy();
    std::string s = v.Str() + "\n";
    CallArgs none;
    ValueList lines = CallStrMethod(s, "splitlines", none).AsList();
    std::string rv;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i].AsString();
      if (i == 0) {
        rv = line;
      } else {
        rv += "\n" + ((blank || !line.empty()) ? ind : "") + line;
      }
    }
    return Value(first ? ind + rv : rv);
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (unsigned char c : v.Str()) {
      bool w = std::isalnum(c) || c == '_' || c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "batch") {
    int64_t size = Arg(a, 0, "linecount", Value(int64_t{1})).AsInt();
    if (size <= 0) Fail(ErrorKind::kInvalidArgument, "batch size must be positive");
    const Value* fill = a.Get(1, "fill_with");
    ValueList out, cur;
    for (auto& x : Iterate(v)) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == size) out.push_back(Value::List(std::exchange(cur, {})));
    }
    if (!cur.empty()) {
      if (fill && !fill->IsNone())
        while (static_cast<int64_t>(cur.size()) < size) cur.push_back(*fill);
      out.push_back(Value::List(std::move(cur)));
    }
    return Value::List(std::move(out));
  }
  if (name == "format") {
    ValueList args = a.args;
    return Value(PercentFormat(v.Str(), Value::Tuple(std::move(args))));
  }
  Fail(ErrorKind::kInvalidArgument, "no filter named '{}'", name);
}

bool Interpreter::CallTest(const std::string& name, const Value& v, CallArgs& a) {
  auto other = [&]() -> const Value& {
    const Value* o = a.Get(0, "other");
    if (!o) ThrowType(fmt::format("test '{}' requires an argument", name));
    return *o;
  };
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.IsNone();
  if (name == "string") return v.IsString();
  if (name == "number") return v.IsNumber();
  if (name == "integer") return v.IsInt();
  if (name == "float") return v.IsFloat();
  if (name == "boolean") return v.IsBool();
  if (name == "true") return v.IsBool() && v.AsBool();
  if (name == "false") return v.IsBool() && !v.AsBool();
  if (name == "mapping") return v.IsDict();
  if (name == "iterable") return v.IsList() || v.IsDict() || v.IsString() || v.IsUndefined();
  if (name == "sequence") return v.IsList() || v.IsDict() || v.IsString() || v.IsUndefined();
  if (name == "callable") return v.IsCallable();
  if (name == "escaped") return false;
  if (name == "odd" || name == "even") {
    if (!v.IsNumber()) ThrowType(fmt::format("test '{}' requires an integer", name));
    int64_t r = v.IsFloat() ? static_cast<int64_t>(std::fmod(v.AsFloat(), 2.0)) : v.AsInt() % 2;
    return (r != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    Value r = BinaryOp("%", v, a.Get(0, "num") ? *a.Get(0, "num") : other());
    return r.AsFloat() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(other());
  if (name == "ne" || name == "!=") return !v.Equals(other());
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind() != o.kind()) return false;
    if (v.IsList()) return &v.AsList() == &o.AsList();
    if (v.IsDict() || v.IsNamespace()) return &v.AsDict() == &o.AsDict();
    return v.Equals(o);
  }
  if (name == "lt" || name == "lessthan" || name == "<") return Compare(v, other(), "<") < 0;
  if (name == "le" || name == "<=") return Compare(v, other(), "<=") <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return Compare(v, other(), ">") > 0;
  if (name == "ge" || name == ">=") return Compare(v, other(), ">=") >= 0;
  if (name == "in") return Contains(a.Get(0, "seq") ? *a.Get(0, "seq") : other(), v);
  if (name == "lower" || name == "upper") {
    std::string s = v.Str();
    CallArgs none;
    return CallStrMethod(s, name == "lower" ? "islower" : "isupper", none).Truthy();
  }
  if (name == "filter" || name == "test") return false;
  Fail(ErrorKind::kInvalidArgument, "no test named '{}'", name);
}

}  // namespace tessera::jinja

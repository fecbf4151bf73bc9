// tessera jinja: Python methods of str, dict and list values (`s.strip()`, `d.items()`, ...)
// and the template globals (range, namespace, dict, raise_exception, strftime_now).
#include <utf8proc.h>

#include <algorithm>
#include <ctime>

#include "core/error.h"
#include "tokenizer/template/errors.h"
#include "tokenizer/template/interpreter.h"

namespace tessera::jinja {
namespace {

using Cps = std::vector<int32_t>;

Cps Decode(const std::string& s) {
  Cps out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t n = static_cast<utf8proc_ssize_t>(s.size()), i = 0;
  while (i < n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &cp);
    if (len <= 0) {  // invalid byte: keep it as a Latin-1 code point rather than fail
      cp = p[i];
      len = 1;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string Encode(const Cps& cps, size_t b = 0, size_t e = std::string::npos) {
  std::string out;
  e = std::min(e, cps.size());
  for (size_t i = b; i < e; ++i) {
    utf8proc_uint8_t buf[4];
    utf8proc_ssize_t n = utf8proc_encode_char(cps[i], buf);
    out.append(reinterpret_cast<char*>(buf), n);
  }
  return out;
}

bool IsSpaceCp(int32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85) return true;
  if (c < 0x80) return false;
  auto cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}
bool IsCased(int32_t c) { return utf8proc_toupper(c) != c || utf8proc_tolower(c) != c; }

std::string StrArg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.Get(i, name);
  if (!v || !v->IsString()) ThrowType(fmt::format("str.{}() argument '{}' must be str", method, name));
  return v->AsString();
}

Value StripImpl(const std::string& s, const CallArgs& a, bool left, bool right) {
  Cps cps = Decode(s);
  const Value* chars = a.Get(0, "chars");
  Cps set = chars && !chars->IsNone() ? Decode(chars->Str()) : Cps{};
  bool ws = !chars || chars->IsNone();
  auto strip_it = [&](int32_t c) { return ws ? IsSpaceCp(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return Value(Encode(cps, b, e));
}

Value SplitImpl(const std::string& s, const CallArgs& a, bool from_right) {
  const Value* sepv = a.Get(0, "sep");
  int64_t maxsplit = a.Get(1, "maxsplit") ? a.Get(1, "maxsplit")->AsInt() : -1;
  ValueList out;
  if (!sepv || sepv->IsNone()) {
    Cps cps = Decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsSpaceCp(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t b = i;
      while (i < cps.size() && !IsSpaceCp(cps[i])) ++i;
      words.emplace_back(b, i);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (!from_right) {
        size_t rest = words[maxsplit].first, end = cps.size();
        while (end > rest && IsSpaceCp(cps[end - 1])) --end;
        words.resize(maxsplit);
        words.emplace_back(rest, end);
      } else {
        size_t cut = words.size() - maxsplit;
        size_t b = 0;
        while (b < cps.size() && IsSpaceCp(cps[b])) ++b;
        std::vector<std::pair<size_t, size_t>> w2{{b, words[cut - 1].second}};
        w2.insert(w2.end(), words.begin() + cut, words.end());
        words = w2;
      }
    }
    for (auto [b, e] : words) out.emplace_back(Encode(cps, b, e));
    return Value::List(std::move(out));
  }
  std::string sep = sepv->Str();
  if (sep.empty()) Fail(ErrorKind::kInvalidArgument, "ValueError: empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    while (true) {
      size_t f = (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) ? s.find(sep, pos) : std::string::npos;
      if (f == std::string::npos) {
        parts.push_back(s.substr(pos));
        break;
      }
      parts.push_back(s.substr(pos, f - pos));
      pos = f + sep.size();
    }
  } else {
    size_t end = s.size();
    while (true) {
      size_t f = (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) && end >= sep.size()
                     ? s.rfind(sep, end - sep.size())
                     : std::string::npos;
      if (f == std::string::npos) {
        parts.push_back(s.substr(0, end));
        break;
      }
      parts.push_back(s.substr(f + sep.size(), end - f - sep.size()));
      end = f;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::List(std::move(out));
}

std::string MapCase(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 swap
  Cps cps = Decode(s);
  for (auto& c : cps) {
    int32_t l = utf8proc_tolower(c), u = utf8proc_toupper(c);
    c = mode == 0 ? l : mode == 1 ? u : (c == l ? u : l);
  }
  return Encode(cps);
}

// Python's str.format for {} / {0} / {name} fields without format specs.
std::string FormatImpl(const std::string& f, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '{') {
      size_t e = f.find('}', i);
      if (e == std::string::npos) Fail(ErrorKind::kInvalidArgument, "ValueError: unmatched '{{' in format string");
      std::string field = f.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!") != std::string::npos)
        Fail(ErrorKind::kUnsupported, "str.format: format specs are not supported ('{}')", field);
      const Value* v;
      if (field.empty()) {
        v = auto_idx < a.args.size() ? &a.args[auto_idx++] : nullptr;
      } else if (field.find_first_not_of("0123456789") == std::string::npos) {
        // More digits than any argument list has: std::stoul would throw std::out_of_range, which
        // no caller maps (a 500); past 9 digits it is simply no argument.
        size_t k = field.size() > 9 ? SIZE_MAX : std::stoul(field);
        v = k < a.args.size() ? &a.args[k] : nullptr;
      } else {
        v = a.Get(SIZE_MAX, field);
      }
      if (!v) Fail(ErrorKind::kInvalidArgument, "str.format: no argument for field '{{{}}}'", field);
      out += v->Str();
      i = e;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Value CallStrMethod(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip") return StripImpl(s, a, true, true);
  if (name == "lstrip") return StripImpl(s, a, true, false);
  if (name == "rstrip") return StripImpl(s, a, false, true);
  if (name == "split") return SplitImpl(s, a, false);
  if (name == "rsplit") return SplitImpl(s, a, true);
  if (name == "lower" || name == "casefold") return Value(MapCase(s, 0));
  if (name == "upper") return Value(MapCase(s, 1));
  if (name == "swapcase") return Value(MapCase(s, 2));
  if (name == "capitalize") {
    Cps cps = Decode(s);
    for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? utf8proc_toupper(cps[i]) : utf8proc_tolower(cps[i]);
    return Value(Encode(cps));
  }
  if (name == "title") {
    Cps cps = Decode(s);
    bool prev_cased = false;
    for (auto& c : cps) {
      c = prev_cased ? utf8proc_tolower(c) : utf8proc_toupper(c);
      prev_cased = IsCased(c);
    }
    return Value(Encode(cps));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.Get(0, "prefix");
    if (!p) ThrowType(name + "() takes at least 1 argument");
    ValueList opts = p->IsTuple() ? p->AsList() : ValueList{*p};
    for (const auto& o : opts) {
      if (!o.IsString()) ThrowType(fmt::format("{} first arg must be str or a tuple of str", name));
      const std::string& x = o.AsString();
      if (x.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(true);
    }
    return Value(false);
  }
  if (name == "replace") {
    std::string from = StrArg(a, 0, "old", "replace"), to = StrArg(a, 1, "new", "replace");
    int64_t count = a.Get(2, "count") ? a.Get(2, "count")->AsInt() : -1;
    std::string out;
    if (from.empty()) {
      auto chars = Utf8Chars(s);
      int64_t done = 0;
      for (size_t i = 0; i <= chars.size(); ++i) {
        if (count < 0 || done < count) {
          out += to;
          ++done;
        }
        if (i < chars.size()) out += chars[i];
      }
      return Value(out);
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
      size_t f = s.find(from, pos);
      if (f == std::string::npos) break;
      out += s.substr(pos, f - pos) + to;
      pos = f + from.size();
      ++done;
    }
    return Value(out + s.substr(pos));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    std::string sub = StrArg(a, 0, "sub", name.c_str());
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(Utf8Length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    size_t f = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (f == std::string::npos) {
      if (name.find("index") != std::string::npos) Fail(ErrorKind::kInvalidArgument, "ValueError: substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(Utf8Length(s.substr(0, f))));
  }
  if (name == "join") {
    const Value* it = a.Get(0, "iterable");
    if (!it) ThrowType("join() takes exactly one argument");
    std::string out;
    ValueList items = Iterate(*it);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].IsString()) ThrowType(fmt::format("sequence item {}: expected str instance, {} found", i, items[i].TypeName()));
      if (i) out += s;
      out += items[i].AsString();
    }
    return Value(out);
  }
  if (name == "splitlines") {
    bool keep = a.Get(0, "keepends") && a.Get(0, "keepends")->Truthy();
    ValueList out;
    size_t b = 0, i = 0;
    while (i < s.size()) {
      size_t eol = 0;
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') {
        eol = 2;
      } else if (s[i] == '\n' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f' || (s[i] >= 0x1c && s[i] <= 0x1e)) {
        eol = 1;
      }
      if (!eol) {
        ++i;
        continue;
      }
      out.emplace_back(s.substr(b, (keep ? i + eol : i) - b));
      i += eol;
      b = i;
    }
    if (b < s.size()) out.emplace_back(s.substr(b));
    return Value::List(std::move(out));
  }
  if (name == "format") return Value(FormatImpl(s, a));
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "isupper" || name == "islower") {
    Cps cps = Decode(s);
    if (name == "isupper" || name == "islower") {
      bool any = false;
      for (auto c : cps) {
        if (!IsCased(c)) continue;
        any = true;
        if (name == "isupper" ? utf8proc_toupper(c) != c : utf8proc_tolower(c) != c) return Value(false);
      }
      return Value(any);
    }
    if (cps.empty()) return Value(false);
    for (auto c : cps) {
      auto cat = utf8proc_category(c);
      bool digit = cat == UTF8PROC_CATEGORY_ND;
      bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
      bool ok = name == "isspace" ? IsSpaceCp(c) : name == "isalpha" ? alpha : name == "isalnum" ? alpha || digit : digit;
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  Fail(ErrorKind::kInvalidArgument, "str has no method '{}'", name);
}

Value GetMethod(const Value& obj, const std::string& name) {
  static const char* kStr[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "lower", "casefold", "upper",
                               "swapcase", "capitalize", "title", "startswith", "endswith", "replace", "find",
                               "rfind", "index", "rindex", "count", "join", "splitlines", "format", "isdigit",
                               "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "isupper", "islower"};
  if (obj.IsString()) {
    if (std::find(std::begin(kStr), std::end(kStr), name) == std::end(kStr)) return Value();
    std::string s = obj.AsString();
    return Value::Function("str." + name, [s, name](Interpreter&, CallArgs& a) { return CallStrMethod(s, name, a); });
  }
  if (obj.IsDict()) {
    if (name == "items" || name == "keys" || name == "values") {
      return Value::Function("dict." + name, [obj, name](Interpreter&, CallArgs&) {
        ValueList out;
        for (const auto& kv : obj.AsDict())
          out.push_back(name == "items" ? Value::Tuple({kv.first, kv.second}) : name == "keys" ? kv.first : kv.second);
        return Value::List(std::move(out));
      });
    }
    if (name == "get") {
      return Value::Function("dict.get", [obj](Interpreter&, CallArgs& a) {
        const Value* k = a.Get(0, "key");
        if (!k) ThrowType("get expected at least 1 argument, got 0");
        if (Value* v = obj.Find(*k)) return *v;
        const Value* d = a.Get(1, "default");
        return d ? *d : Value::None();
      });
    }
    if (name == "copy") return Value::Function("dict.copy", [obj](Interpreter&, CallArgs&) { return Value::Dict(obj.AsDict()); });
    return Value();
  }
  if (obj.IsList()) {
    if (name == "append" || name == "extend") {
      if (obj.IsTuple()) return Value();
      return Value::Function("list." + name, [obj, name](Interpreter&, CallArgs& a) {
        if (a.args.size() != 1) ThrowType(name + "() takes exactly one argument");
        if (name == "append") {
          obj.AsList().push_back(a.args[0]);
        } else {
          ValueList items = Iterate(a.args[0]);
          obj.AsList().insert(obj.AsList().end(), items.begin(), items.end());
        }
        return Value::None();
      });
    }
    if (name == "index" || name == "count") {
      return Value::Function("list." + name, [obj, name](Interpreter&, CallArgs& a) {
        if (a.args.size() != 1) ThrowType(name + "() takes exactly one argument");
        int64_t n = 0;
        const auto& l = obj.AsList();
        for (size_t i = 0; i < l.size(); ++i) {
          if (!l[i].Equals(a.args[0])) continue;
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
        if (name == "index") Fail(ErrorKind::kInvalidArgument, "ValueError: {} is not in list", a.args[0].Repr());
        return Value(n);
      });
    }
    return Value();
  }
  return Value();
}

void InstallGlobals(Frame& frame) {
  frame.Set("range", Value::Function("range", [](Interpreter&, CallArgs& a) {
    if (a.args.empty() || a.args.size() > 3 || !a.kwargs.empty()) ThrowType("range expected 1 to 3 integer arguments");
    for (const auto& v : a.args)
      if (!v.IsInt() && !v.IsBool()) ThrowType(fmt::format("'{}' object cannot be interpreted as an integer", v.TypeName()));
    int64_t start = a.args.size() > 1 ? a.args[0].AsInt() : 0;
    int64_t stop = a.args.size() > 1 ? a.args[1].AsInt() : a.args[0].AsInt();
    int64_t step = a.args.size() > 2 ? a.args[2].AsInt() : 1;
    if (step == 0) Fail(ErrorKind::kInvalidArgument, "ValueError: range() arg 3 must not be zero");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) Fail(ErrorKind::kInvalidArgument, "Range too big. The sandbox blocks ranges larger than 100000");
      out.emplace_back(i);
    }
    return Value::List(std::move(out));
  }));
  auto make_dict = [](CallArgs& a, bool ns) {
    ValueDict d;
    if (!a.args.empty()) {
      if (a.args.size() > 1 || !a.args[0].IsDict()) ThrowType("expected a single mapping argument");
      d = a.args[0].AsDict();
    }
    Value v = ns ? Value::Namespace(std::move(d)) : Value::Dict(std::move(d));
    for (auto& [k, x] : a.kwargs) v.Set(Value(k), x);
    return v;
  };
  frame.Set("namespace", Value::Function("namespace", [make_dict](Interpreter&, CallArgs& a) { return make_dict(a, true); }));
  frame.Set("dict", Value::Function("dict", [make_dict](Interpreter&, CallArgs& a) { return make_dict(a, false); }));
  frame.Set("raise_exception", Value::Function("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
    std::string msg = a.args.empty() ? std::string("raise_exception() called") : a.args[0].Str();
    throw RaisedError(ErrorKind::kInvalidArgument, msg);
  }));
  frame.Set("strftime_now", Value::Function("strftime_now", [](Interpreter&, CallArgs& a) {
    std::string f = a.args.empty() ? std::string() : a.args[0].Str();
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[512];
    size_t n = f.empty() ? 0 : std::strftime(buf, sizeof(buf), f.c_str(), &tm);
    return Value(std::string(buf, n));
  }));
}

}  // namespace tessera::jinja

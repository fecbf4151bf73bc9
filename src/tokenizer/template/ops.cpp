// tessera jinja: value operations with Python/Jinja2 semantics: lookup, slicing, iteration,
// ordering, membership, arithmetic, and printf-style `%` formatting.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "tokenizer/template/interpreter.h"

namespace tessera::jinja {

void ThrowUndefined(const Value& v) {
  Fail(ErrorKind::kInvalidArgument, "{}",
       v.UndefinedHint().empty() ? std::string("value is undefined") : v.UndefinedHint());
}

void ThrowType(const std::string& what) { Fail(ErrorKind::kInvalidArgument, "TypeError: {}", what); }

Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.IsUndefined()) ThrowUndefined(obj);
  if (obj.IsDict()) {
    Value m = GetMethod(obj, name);
    if (!m.IsUndefined()) return m;
    if (Value* v = obj.FindStr(name)) return *v;
    return Value::Undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  if (obj.IsNamespace()) {
    if (Value* v = obj.FindStr(name)) return *v;
    return Value::Undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  Value m = GetMethod(obj, name);
  if (!m.IsUndefined()) return m;
  return Value::Undefined(fmt::format("'{}' has no attribute '{}'", obj.TypeName(), name));
}

static int64_t NormIndex(int64_t i, size_t n) { return i < 0 ? i + static_cast<int64_t>(n) : i; }

Value GetItem(const Value& obj, const Value& key) {
  if (obj.IsUndefined()) ThrowUndefined(obj);
  if (obj.IsDict() || obj.IsNamespace()) {
    if (Value* v = obj.Find(key)) return *v;
    if (key.IsString()) return GetAttr(obj, key.AsString());
    return Value::Undefined(fmt::format("'dict object' has no attribute {}", key.Repr()));
  }
  if ((obj.IsList() || obj.IsString()) && (key.IsInt() || key.IsBool())) {
    if (obj.IsList()) {
      int64_t i = NormIndex(key.AsInt(), obj.AsList().size());
      if (i >= 0 && i < static_cast<int64_t>(obj.AsList().size())) return obj.AsList()[i];
    } else {
      auto chars = Utf8Chars(obj.AsString());
      int64_t i = NormIndex(key.AsInt(), chars.size());
      if (i >= 0 && i < static_cast<int64_t>(chars.size())) return Value(chars[i]);
    }
    return Value::Undefined(fmt::format("{} object has no element {}", obj.TypeName(), key.AsInt()));
  }
  if (key.IsString()) return GetAttr(obj, key.AsString());
  return Value::Undefined(fmt::format("{} object has no element {}", obj.TypeName(), key.Repr()));
}

Value SliceValue(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.IsUndefined()) ThrowUndefined(obj);
  auto as_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.IsNone() || v.IsUndefined()) return std::nullopt;
    if (!v.IsInt() && !v.IsBool()) ThrowType(fmt::format("slice {} must be an integer or None", what));
    return v.AsInt();
  };
  int64_t st = as_int(step, "step").value_or(1);
  if (st == 0) Fail(ErrorKind::kInvalidArgument, "ValueError: slice step cannot be zero");
  std::vector<std::string> chars;
  size_t n;
  if (obj.IsString()) {
    chars = Utf8Chars(obj.AsString());
    n = chars.size();
  } else if (obj.IsList()) {
    n = obj.AsList().size();
  } else {
    ThrowType(fmt::format("'{}' object is not subscriptable", obj.TypeName()));
  }
  int64_t len = static_cast<int64_t>(n);
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v < 0 ? *v + len : *v;
    if (st > 0) return std::clamp<int64_t>(i, 0, len);
    return std::clamp<int64_t>(i, -1, len - 1);
  };
  int64_t b = clamp(as_int(start, "start"), st > 0 ? 0 : len - 1);
  int64_t e = clamp(as_int(stop, "stop"), st > 0 ? len : -1);
  std::vector<size_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(static_cast<size_t>(i));
  if (obj.IsString()) {
    std::string s;
    for (size_t i : idx) s += chars[i];
    return Value(std::move(s));
  }
  ValueList items;
  for (size_t i : idx) items.push_back(obj.AsList()[i]);
  return obj.IsTuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
}

ValueList Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.AsList();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& kv : v.AsDict()) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList out;
      for (auto& c : Utf8Chars(v.AsString())) out.emplace_back(std::move(c));
      return out;
    }
    default: ThrowType(fmt::format("'{}' object is not iterable", v.TypeName()));
  }
}

int Compare(const Value& a, const Value& b, const char* op) {
  if (a.IsUndefined()) ThrowUndefined(a);
  if (b.IsUndefined()) ThrowUndefined(b);
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) {
      double x = a.AsFloat(), y = b.AsFloat();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.AsInt() < b.AsInt() ? -1 : a.AsInt() > b.AsInt() ? 1 : 0;
  }
  if (a.IsString() && b.IsString()) return a.AsString().compare(b.AsString()) < 0 ? -1 : a.AsString() == b.AsString() ? 0 : 1;
  if (a.IsList() && b.IsList() && a.IsTuple() == b.IsTuple()) {
    const auto &x = a.AsList(), &y = b.AsList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return Compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  ThrowType(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, a.TypeName(), b.TypeName()));
}

bool Contains(const Value& c, const Value& item) {
  if (c.IsString()) {
    if (!item.IsString())
      ThrowType(fmt::format("'in <string>' requires string as left operand, not {}", item.TypeName()));
    return c.AsString().find(item.AsString()) != std::string::npos;
  }
  if (c.IsDict()) return c.Find(item) != nullptr;
  if (c.IsList()) {
    for (const auto& v : c.AsList())
      if (v.Equals(item)) return true;
    return false;
  }
  if (c.IsUndefined()) return false;
  ThrowType(fmt::format("argument of type '{}' is not iterable", c.TypeName()));
}

namespace {

Value IntResult(int64_t a, int64_t b, char op) {
  int64_t r;
  bool overflow = op == '+' ? __builtin_add_overflow(a, b, &r)
                  : op == '-' ? __builtin_sub_overflow(a, b, &r)
                              : __builtin_mul_overflow(a, b, &r);
  if (overflow) Fail(ErrorKind::kInvalidArgument, "integer overflow in template arithmetic");
  return Value(r);
}

Value Repeat(const Value& seq, int64_t n) {
  if (n > 0 && n > static_cast<int64_t>((64u << 20) / std::max<size_t>(1, seq.IsString() ? seq.AsString().size() : seq.AsList().size())))
    Fail(ErrorKind::kInvalidArgument, "sequence repetition too large");
  if (seq.IsString()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.AsString();
    return Value(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.AsList().begin(), seq.AsList().end());
  return seq.IsTuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

}  // namespace

Value BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.Str() + b.Str());
  if (op == "%" && a.IsString()) return Value(PercentFormat(a.AsString(), b));
  if (a.IsUndefined()) ThrowUndefined(a);
  if (b.IsUndefined()) ThrowUndefined(b);
  auto bad = [&]() -> Value {
    ThrowType(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.TypeName(), b.TypeName()));
  };
  bool nums = a.IsNumber() && b.IsNumber();
  bool floats = nums && (a.IsFloat() || b.IsFloat());
  if (op == "+") {
    if (floats) return Value(a.AsFloat() + b.AsFloat());
    if (nums) return IntResult(a.AsInt(), b.AsInt(), '+');
    if (a.IsString() && b.IsString()) return Value(a.AsString() + b.AsString());
    if (a.IsList() && b.IsList() && a.IsTuple() == b.IsTuple()) {
      ValueList out = a.AsList();
      out.insert(out.end(), b.AsList().begin(), b.AsList().end());
      return a.IsTuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
    }
    return bad();
  }
  if (op == "-") {
    if (floats) return Value(a.AsFloat() - b.AsFloat());
    if (nums) return IntResult(a.AsInt(), b.AsInt(), '-');
    return bad();
  }
  if (op == "*") {
    if (floats) return Value(a.AsFloat() * b.AsFloat());
    if (nums) return IntResult(a.AsInt(), b.AsInt(), '*');
    if ((a.IsString() || a.IsList()) && (b.IsInt() || b.IsBool())) return Repeat(a, b.AsInt());
    if ((b.IsString() || b.IsList()) && (a.IsInt() || a.IsBool())) return Repeat(b, a.AsInt());
    return bad();
  }
  if (!nums) return bad();
  if (op == "/") {
    if (b.AsFloat() == 0) Fail(ErrorKind::kInvalidArgument, "ZeroDivisionError: division by zero");
    return Value(a.AsFloat() / b.AsFloat());
  }
  if (op == "//" || op == "%") {
    if (b.AsFloat() == 0)
      Fail(ErrorKind::kInvalidArgument, "ZeroDivisionError: integer division or modulo by zero");
    if (floats) {
      double x = a.AsFloat(), y = b.AsFloat();
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      if (op == "%") return Value(m);
      return Value(std::floor((x - m) / y + 0.5));
    }
    int64_t x = a.AsInt(), y = b.AsInt();
    if (x == INT64_MIN && y == -1) Fail(ErrorKind::kInvalidArgument, "integer overflow in template arithmetic");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return op == "%" ? Value(m) : Value(q);
  }
  if (op == "**") {
    if (!floats && b.AsInt() >= 0) {
      int64_t r = 1, base = a.AsInt();
      for (int64_t e = b.AsInt(); e > 0; --e)
        if (__builtin_mul_overflow(r, base, &r)) Fail(ErrorKind::kInvalidArgument, "integer overflow in template arithmetic");
      return Value(r);
    }
    return Value(std::pow(a.AsFloat(), b.AsFloat()));
  }
  return bad();
}

std::string PercentFormat(const std::string& f, const Value& args) {
  ValueList list = args.IsTuple() ? args.AsList() : ValueList{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) Fail(ErrorKind::kInvalidArgument, "ValueError: incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    std::string flags;
    while (i < f.size() && std::strchr("-+ 0#.0123456789", f[i])) flags += f[i++];
    if (i >= f.size()) Fail(ErrorKind::kInvalidArgument, "ValueError: incomplete format");
    char conv = f[i];
    if (next >= list.size()) ThrowType("not enough arguments for format string");
    const Value& v = list[next++];
    std::string spec = "%" + flags;
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        // Width and precision count code points, as Python's do.
        std::string text = conv == 's' ? v.Str() : v.Repr();
        size_t dot = flags.find('.');
        std::string width_s = flags.substr(0, dot), prec_s = dot == std::string::npos ? "" : flags.substr(dot + 1);
        width_s.erase(0, width_s.find_first_of("123456789") == std::string::npos ? width_s.size()
                                                                                 : width_s.find_first_of("123456789"));
        if (dot != std::string::npos) {
          auto chars = Utf8Chars(text);
          size_t prec = prec_s.empty() ? 0 : std::stoul(prec_s.substr(0, 6));
          if (chars.size() > prec) {
            text.clear();
            for (size_t k = 0; k < prec; ++k) text += chars[k];
          }
        }
        size_t width = width_s.empty() ? 0 : std::stoul(width_s.substr(0, 6));
        size_t len = Utf8Length(text);
        std::string pad = width > len ? std::string(width - len, ' ') : "";
        out += flags.find('-') != std::string::npos ? text + pad : pad + text;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.IsNumber()) ThrowType(fmt::format("%{} format: a number is required, not {}", conv, v.TypeName()));
        std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(),
                      static_cast<long long>(v.IsFloat() ? static_cast<int64_t>(v.AsFloat()) : v.AsInt()));
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!v.IsNumber()) ThrowType(fmt::format("must be real number, not {}", v.TypeName()));
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.AsFloat());
        out += buf;
        break;
      default: Fail(ErrorKind::kInvalidArgument, "ValueError: unsupported format character '{}'", conv);
    }
  }
  if (next < list.size()) ThrowType("not all arguments converted during string formatting");
  return out;
}

}  // namespace tessera::jinja

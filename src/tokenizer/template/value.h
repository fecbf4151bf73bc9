// tessera jinja: the dynamic value type templates compute with (Python semantics: truthiness,
// int/float arithmetic, str()/repr() printing, json.dumps), converted from/to nlohmann::ordered_json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::jinja {

class Value;
struct CallArgs;
class Interpreter;

using ValueList = std::vector<Value>;
// Dicts keep insertion order (as Python's do); keys are Values so ints work as keys too.
using ValueDict = std::vector<std::pair<Value, Value>>;
using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  Value(bool b);
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(int64_t i);
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value List(ValueList items = {});
  static Value Tuple(ValueList items);
  static Value Dict(ValueDict items = {});
  static Value Namespace(ValueDict items = {});
  static Value Function(std::string name, NativeFn fn);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsBool() const { return kind_ == Kind::kBool; }
  bool IsInt() const { return kind_ == Kind::kInt; }
  bool IsFloat() const { return kind_ == Kind::kFloat; }
  bool IsNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsTuple() const { return kind_ == Kind::kList && tuple_; }
  bool IsDict() const { return kind_ == Kind::kDict; }
  bool IsNamespace() const { return kind_ == Kind::kNamespace; }
  bool IsCallable() const { return kind_ == Kind::kCallable; }

  bool AsBool() const { return b_; }
  int64_t AsInt() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double AsFloat() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(AsInt()); }
  const std::string& AsString() const { return *s_; }
  ValueList& AsList() const { return *list_; }
  ValueDict& AsDict() const { return *dict_; }
  const Callable& AsCallable() const { return *fn_; }
  const std::string& UndefinedHint() const { return undefined_hint_; }

  // Python truthiness.
  bool Truthy() const;
  // Jinja's str(): undefined -> "", None -> "None", True -> "True", lists/dicts as Python repr.
  std::string Str() const;
  // Python repr(): strings quoted.
  std::string Repr() const;
  // json.dumps(x, ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson does.
  std::string ToJson(std::optional<std::string> indent, std::optional<std::string> item_sep,
                     std::optional<std::string> key_sep, bool sort_keys) const;
  nlohmann::ordered_json ToJsonValue() const;
  std::string TypeName() const;

  // Dict/namespace lookup by key; nullptr when missing.
  Value* Find(const Value& key) const;
  Value* FindStr(const std::string& key) const;
  void Set(const Value& key, Value v) const;

  bool Equals(const Value& o) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;  // dicts and namespaces
  std::shared_ptr<Callable> fn_;
  std::string undefined_hint_;
};

struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;
  // Positional i or keyword `name`; nullptr if neither was given.
  const Value* Get(size_t i, const std::string& name) const;
  // Fails if a keyword not in `allowed` was passed or more than allowed.size() positionals.
  void Expect(const std::string& fn, const std::vector<std::string>& allowed) const;
};

// Python float repr (shortest round-trip; "1.0", "1e+16", "1e-05", "inf", "nan").
std::string FormatFloat(double d);
// Python repr of a str.
std::string ReprString(const std::string& s);
// UTF-8 helpers: split into code points (each as its byte string).
std::vector<std::string> Utf8Chars(const std::string& s);
size_t Utf8Length(const std::string& s);

}  // namespace tessera::jinja

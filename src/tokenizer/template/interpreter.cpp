// tessera jinja: the tree-walking interpreter: statements, scopes, loops, macros, expressions.
#include "tokenizer/template/interpreter.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/template/errors.h"

namespace tessera::jinja {

using K = Node::Kind;

Value* Frame::Find(const std::string& name) {
  for (Frame* f = this; f; f = f->parent.get())
    for (auto& kv : f->vars)
      if (kv.first == name) return &kv.second;
  return nullptr;
}

void Frame::Set(const std::string& name, Value v) {
  for (auto& kv : vars)
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

Interpreter::Interpreter(RenderLimits limits, std::shared_ptr<Frame> root)
    : limits_(limits), root_(std::move(root)) {}

std::string Interpreter::Render(const Body& body) {
  std::string out;
  Exec(body, root_, out);
  return out;
}

void Interpreter::Append(std::string& out, const std::string& s) {
  if (out.size() + s.size() > limits_.max_output_bytes)
    Fail(ErrorKind::kInvalidArgument, "template output exceeds the limit of {} bytes", limits_.max_output_bytes);
  out += s;
}

Interpreter::Flow Interpreter::Exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out) {
  for (const auto& n : body) {
    Flow f;
    try {
      f = ExecNode(*n, frame, out);
    } catch (const LocatedError&) {
      throw;
    } catch (const Error& e) {
      throw LocatedError(e.kind(), fmt::format("template error at line {}: {}", n->line, e.what()));
    }
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecNode(const Node& n, const std::shared_ptr<Frame>& frame, std::string& out) {
  switch (n.kind) {
    case K::kText: Append(out, n.name); return Flow::kNormal;
    case K::kOutput: Append(out, Eval(*n.a, frame).Str()); return Flow::kNormal;
    case K::kIf:
      return Exec(Eval(*n.a, frame).Truthy() ? n.body : n.else_body, frame, out);
    case K::kFor: ExecFor(n, frame, out); return Flow::kNormal;
    case K::kSet: Assign(*n.a, Eval(*n.b, frame), frame); return Flow::kNormal;
    case K::kSetBlock: {
      std::string captured;
      Exec(n.body, frame, captured);
      Value v(std::move(captured));
      if (n.c) v = EvalFilterChain(*n.c, v, frame);
      Assign(*n.a, v, frame);
      return Flow::kNormal;
    }
    case K::kFilterBlock: {
      std::string captured;
      Exec(n.body, frame, captured);
      Append(out, EvalFilterChain(*n.c, Value(std::move(captured)), frame).Str());
      return Flow::kNormal;
    }
    case K::kMacro: frame->Set(n.name, MakeMacro(n, frame)); return Flow::kNormal;
    case K::kCallBlock: {
      const Node& call = *n.a;
      CallArgs args;
      EvalArgs(call, frame, args);
      args.kwargs.emplace_back("caller", MakeMacro(n, frame));
      Value fn = Eval(*call.a, frame);
      Append(out, CallValue(fn, args).Str());
      return Flow::kNormal;
    }
    case K::kGeneration: return Exec(n.body, frame, out);
    case K::kBreak: return Flow::kBreak;
    case K::kContinue: return Flow::kContinue;
    default: Fail(ErrorKind::kInternal, "template: expression node used as a statement");
  }
}

void Interpreter::Assign(const Node& target, const Value& v, const std::shared_ptr<Frame>& frame) {
  if (target.kind == K::kName) {
    frame->Set(target.name, v);
  } else if (target.kind == K::kGetAttr) {
    Value* ns = frame->Find(target.a->name);
    if (!ns || !ns->IsNamespace())
      Fail(ErrorKind::kInvalidArgument, "cannot assign attribute on non-namespace object '{}'", target.a->name);
    ns->Set(Value(target.name), v);
  } else {
    ValueList items = Iterate(v);
    if (items.size() != target.kids.size())
      Fail(ErrorKind::kInvalidArgument, "ValueError: cannot unpack {} values into {} targets", items.size(),
           target.kids.size());
    for (size_t i = 0; i < items.size(); ++i) Assign(*target.kids[i], items[i], frame);
  }
}

void Interpreter::ExecFor(const Node& n, const std::shared_ptr<Frame>& frame, std::string& out) {
  Value seq = Eval(*n.b, frame);
  ValueList items = Iterate(seq);
  if (n.c) {  // `for x in y if cond`: filtered before loop.length is known
    ValueList kept;
    for (auto& item : items) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      Assign(*n.a, item, f);
      if (Eval(*n.c, f).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    Exec(n.else_body, f, out);
    return;
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    if (++iterations_ > limits_.max_loop_iterations)
      Fail(ErrorKind::kInvalidArgument, "template exceeds {} loop iterations", limits_.max_loop_iterations);
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    ValueList cycle_items;
    Value loop = Value::Dict({
        {Value("index"), Value(i + 1)},
        {Value("index0"), Value(i)},
        {Value("revindex"), Value(len - i)},
        {Value("revindex0"), Value(len - i - 1)},
        {Value("first"), Value(i == 0)},
        {Value("last"), Value(i == len - 1)},
        {Value("length"), Value(len)},
        {Value("depth"), Value(int64_t{1})},
        {Value("depth0"), Value(int64_t{0})},
        {Value("previtem"), i > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
        {Value("nextitem"), i + 1 < len ? items[i + 1] : Value::Undefined("there is no next item")},
        {Value("cycle"), Value::Function("cycle", [i](Interpreter&, CallArgs& a) -> Value {
           if (a.args.empty()) Fail(ErrorKind::kInvalidArgument, "no items for cycling given");
           return a.args[i % a.args.size()];
         })},
    });
    f->Set("loop", loop);
    Assign(*n.a, items[i], f);
    if (Exec(n.body, f, out) == Flow::kBreak) break;
  }
}

Value Interpreter::MakeMacro(const Node& n, const std::shared_ptr<Frame>& frame) {
  const Node* node = &n;
  // Weak: the macro usually lives in the frame it captures; a strong pointer would be a cycle.
  std::weak_ptr<Frame> def_frame = frame;
  std::string name = n.kind == K::kMacro ? n.name : "caller";
  return Value::Function(name, [node, def_frame, name](Interpreter& in, CallArgs& args) -> Value {
    auto f = std::make_shared<Frame>();
    f->parent = def_frame.lock();
    if (!f->parent) Fail(ErrorKind::kInvalidArgument, "macro '{}' called outside the scope it was defined in", name);
    ValueList varargs;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i < node->names.size()) {
        f->Set(node->names[i], args.args[i]);
      } else {
        varargs.push_back(args.args[i]);
      }
    }
    ValueDict extra;
    Value caller = Value::Undefined("'caller' is undefined");
    for (auto& [k, v] : args.kwargs) {
      auto it = std::find(node->names.begin(), node->names.end(), k);
      if (it != node->names.end()) {
        if (static_cast<size_t>(it - node->names.begin()) < args.args.size())
          Fail(ErrorKind::kInvalidArgument, "macro '{}' got multiple values for argument '{}'", name, k);
        f->Set(k, v);
      } else if (k == "caller") {
        caller = v;
      } else {
        extra.emplace_back(Value(k), v);
      }
    }
    for (size_t i = args.args.size(); i < node->names.size(); ++i) {
      bool given = false;
      for (auto& kv : args.kwargs) given = given || kv.first == node->names[i];
      if (given) continue;
      f->Set(node->names[i], node->kids[i] ? in.Eval(*node->kids[i], f)
                                           : Value::Undefined(fmt::format("'{}' is undefined", node->names[i])));
    }
    f->Set("varargs", Value::Tuple(std::move(varargs)));
    f->Set("kwargs", Value::Dict(std::move(extra)));
    if (!caller.IsUndefined()) f->Set("caller", caller);
    std::string out;
    in.Exec(node->body, f, out);
    return Value(std::move(out));
  });
}

Value Interpreter::CallValue(const Value& fn, CallArgs& args) {
  if (fn.IsUndefined()) ThrowUndefined(fn);
  if (!fn.IsCallable()) ThrowType(fmt::format("'{}' object is not callable", fn.TypeName()));
  if (++call_depth_ > limits_.max_call_depth) {
    call_depth_ = 0;
    Fail(ErrorKind::kInvalidArgument, "template recursion too deep (more than {} nested calls)",
         limits_.max_call_depth);
  }
  struct Guard {
    int& d;
    ~Guard() {
      if (d > 0) --d;
    }
  } guard{call_depth_};
  return fn.AsCallable().fn(*this, args);
}

void Interpreter::EvalArgs(const Node& n, const std::shared_ptr<Frame>& frame, CallArgs& args) {
  for (const auto& k : n.kids) args.args.push_back(Eval(*k, frame));
  for (const auto& [k, v] : n.kwargs) args.kwargs.emplace_back(k, Eval(*v, frame));
}

Value Interpreter::EvalFilterChain(const Node& n, const Value& input, const std::shared_ptr<Frame>& frame) {
  Value v = n.a ? EvalFilterChain(*n.a, input, frame) : input;
  CallArgs args;
  EvalArgs(n, frame, args);
  return CallFilter(n.name, v, args);
}

Value Interpreter::Eval(const Node& n, const std::shared_ptr<Frame>& frame) {
  switch (n.kind) {
    case K::kLiteral: return n.literal;
    case K::kName: {
      if (Value* v = frame->Find(n.name)) return *v;
      return Value::Undefined(fmt::format("'{}' is undefined", n.name));
    }
    case K::kList:
    case K::kTuple: {
      ValueList items;
      for (const auto& k : n.kids) items.push_back(Eval(*k, frame));
      return n.kind == K::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
    }
    case K::kDict: {
      Value d = Value::Dict();
      for (size_t i = 0; i + 1 < n.kids.size(); i += 2) d.Set(Eval(*n.kids[i], frame), Eval(*n.kids[i + 1], frame));
      return d;
    }
    case K::kGetAttr: return GetAttr(Eval(*n.a, frame), n.name);
    case K::kGetItem: return GetItem(Eval(*n.a, frame), Eval(*n.b, frame));
    case K::kSlice: {
      Value obj = Eval(*n.a, frame);
      auto opt = [&](const NodePtr& p) { return p ? Eval(*p, frame) : Value::None(); };
      return SliceValue(obj, opt(n.b), opt(n.c), opt(n.d));
    }
    case K::kCall: {
      Value fn = Eval(*n.a, frame);
      CallArgs args;
      EvalArgs(n, frame, args);
      return CallValue(fn, args);
    }
    case K::kFilter: {
      Value v = Eval(*n.a, frame);
      CallArgs args;
      EvalArgs(n, frame, args);
      return CallFilter(n.name, v, args);
    }
    case K::kTest: {
      Value v = Eval(*n.a, frame);
      CallArgs args;
      EvalArgs(n, frame, args);
      return Value(CallTest(n.name, v, args) != n.flag);
    }
    case K::kUnary: {
      Value v = Eval(*n.a, frame);
      if (n.name == "not") return Value(!v.Truthy());
      if (v.IsUndefined()) ThrowUndefined(v);
      if (!v.IsNumber()) ThrowType(fmt::format("bad operand type for unary {}: '{}'", n.name, v.TypeName()));
      if (n.name == "+") return v.IsBool() ? Value(v.AsInt()) : v;
      if (v.IsFloat()) return Value(-v.AsFloat());
      if (v.AsInt() == INT64_MIN) Fail(ErrorKind::kInvalidArgument, "integer overflow in template arithmetic");
      return Value(-v.AsInt());
    }
    case K::kBinary: return EvalBinary(n, frame);
    case K::kCompare: {
      Value left = Eval(*n.a, frame);
      for (size_t i = 0; i < n.names.size(); ++i) {
        Value right = Eval(*n.kids[i], frame);
        const std::string& op = n.names[i];
        bool ok;
        if (op == "==") {
          ok = left.Equals(right);
        } else if (op == "!=") {
          ok = !left.Equals(right);
        } else if (op == "in") {
          ok = Contains(right, left);
        } else if (op == "notin") {
          ok = !Contains(right, left);
        } else {
          int c = Compare(left, right, op.c_str());
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case K::kCondExpr: {
      if (Eval(*n.a, frame).Truthy()) return Eval(*n.b, frame);
      if (n.c) return Eval(*n.c, frame);
      return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    default: Fail(ErrorKind::kInternal, "template: statement node used as an expression");
  }
}

Value Interpreter::EvalBinary(const Node& n, const std::shared_ptr<Frame>& frame) {
  Value a = Eval(*n.a, frame);
  if (n.name == "and") return a.Truthy() ? Eval(*n.b, frame) : a;
  if (n.name == "or") return a.Truthy() ? a : Eval(*n.b, frame);
  return BinaryOp(n.name, a, Eval(*n.b, frame));
}

}  // namespace tessera::jinja

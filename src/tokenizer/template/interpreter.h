// tessera jinja: the tree-walking interpreter and the value operations filters, tests and
// methods share (attribute/item lookup, iteration, ordering, Python-style errors).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/template/ast.h"
#include "tokenizer/template/value.h"

namespace tessera::jinja {

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;  // a runaway loop stops with an error, not an OOM
  int max_call_depth = 128;             // macro / caller recursion
  int64_t max_loop_iterations = 10'000'000;
};

// A variable scope; for-loop iterations and macro calls get their own, like Jinja's.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;
  Value* Find(const std::string& name);
  void Set(const std::string& name, Value v);
};

class Interpreter {
 public:
  Interpreter(RenderLimits limits, std::shared_ptr<Frame> root);
  std::string Render(const Body& body);

  Value CallFilter(const std::string& name, const Value& v, CallArgs& args);
  bool CallTest(const std::string& name, const Value& v, CallArgs& args);
  Value CallValue(const Value& fn, CallArgs& args);

  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Value Eval(const Node& n, const std::shared_ptr<Frame>& frame);

 private:
  Flow ExecNode(const Node& n, const std::shared_ptr<Frame>& frame, std::string& out);
  void ExecFor(const Node& n, const std::shared_ptr<Frame>& frame, std::string& out);
  void Assign(const Node& target, const Value& v, const std::shared_ptr<Frame>& frame);
  Value EvalBinary(const Node& n, const std::shared_ptr<Frame>& frame);
  Value EvalFilterChain(const Node& n, const Value& input, const std::shared_ptr<Frame>& frame);
  void EvalArgs(const Node& n, const std::shared_ptr<Frame>& frame, CallArgs& args);
  Value MakeMacro(const Node& n, const std::shared_ptr<Frame>& frame);
  void Append(std::string& out, const std::string& s);

  RenderLimits limits_;
  std::shared_ptr<Frame> root_;
  int call_depth_ = 0;
  int64_t iterations_ = 0;
};

// --- shared value operations (ops.cpp) ---
[[noreturn]] void ThrowUndefined(const Value& v);
[[noreturn]] void ThrowType(const std::string& what);
Value GetAttr(const Value& obj, const std::string& name);
Value GetItem(const Value& obj, const Value& key);
Value SliceValue(const Value& obj, const Value& start, const Value& stop, const Value& step);
ValueList Iterate(const Value& v);
int Compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0; throws if unorderable
bool Contains(const Value& container, const Value& item);
Value BinaryOp(const std::string& op, const Value& a, const Value& b);
std::string PercentFormat(const std::string& fmt, const Value& args);
// Methods of str/dict/list, bound to `obj`; Undefined if `obj` has no such method.
Value GetMethod(const Value& obj, const std::string& name);
// range, namespace, dict, raise_exception, strftime_now.
void InstallGlobals(Frame& frame);

}  // namespace tessera::jinja

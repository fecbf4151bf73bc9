// tessera grammar: the expression arena and rule table of grammar.h, with the small algebraic
// simplifications (flattening, dropping empty parts) that keep front-end output compact.
#include "grammar/grammar.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::grammar {

int32_t Grammar::AddRule(std::string name) {
  rules_.push_back(Rule{std::move(name), -1});
  return static_cast<int32_t>(rules_.size()) - 1;
}

void Grammar::SetBody(int32_t rule, ExprId body) {
  TESSERA_CHECK(rule >= 0 && rule < num_rules());
  rules_[static_cast<size_t>(rule)].body = body;
}

int32_t Grammar::FindRule(std::string_view name) const {
  for (int32_t i = 0; i < num_rules(); ++i)
    if (rules_[static_cast<size_t>(i)].name == name) return i;
  return -1;
}

ExprId Grammar::Add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size()) - 1;
}

ExprId Grammar::Empty() { return Add(Expr{}); }

ExprId Grammar::Nothing() {
  Expr e;
  e.kind = ExprKind::kNothing;
  return Add(std::move(e));
}

ExprId Grammar::Literal(std::string_view bytes) {
  if (bytes.empty()) return Empty();
  Expr e;
  e.kind = ExprKind::kLiteral;
  e.text = std::string(bytes);
  return Add(std::move(e));
}

ExprId Grammar::Bytes(const ByteSet& set) {
  if (set.Empty()) return Nothing();
  Expr e;
  e.kind = ExprKind::kBytes;
  e.bytes = set;
  return Add(std::move(e));
}

ExprId Grammar::Seq(std::vector<ExprId> children) {
  std::vector<ExprId> flat;
  for (ExprId c : children) {
    const Expr& x = expr(c);
    if (x.kind == ExprKind::kEmpty) continue;
    if (x.kind == ExprKind::kNothing) return Nothing();
    if (x.kind == ExprKind::kSeq) {
      flat.insert(flat.end(), x.children.begin(), x.children.end());
    } else {
      flat.push_back(c);
    }
  }
  if (flat.empty()) return Empty();
  if (flat.size() == 1) return flat[0];
  Expr e;
  e.kind = ExprKind::kSeq;
  e.children = std::move(flat);
  return Add(std::move(e));
}

ExprId Grammar::Alt(std::vector<ExprId> children) {
  std::vector<ExprId> flat;
  for (ExprId c : children) {
    const Expr& x = expr(c);
    if (x.kind == ExprKind::kNothing) continue;
    if (x.kind == ExprKind::kAlt) {
      flat.insert(flat.end(), x.children.begin(), x.children.end());
    } else {
      flat.push_back(c);
    }
  }
  if (flat.empty()) return Nothing();
  if (flat.size() == 1) return flat[0];
  Expr e;
  e.kind = ExprKind::kAlt;
  e.children = std::move(flat);
  return Add(std::move(e));
}

ExprId Grammar::Repeat(ExprId child, int32_t min, int32_t max) {
  if (min < 0 || (max != kUnbounded && max < min))
    Fail(ErrorKind::kInvalidArgument, "grammar: bad repetition bounds {{{},{}}}", min, max);
  if (max == 0) return Empty();
  const Expr& x = expr(child);
  if (x.kind == ExprKind::kEmpty) return child;
  if (x.kind == ExprKind::kNothing) return min == 0 ? Empty() : child;
  if (min == 1 && max == 1) return child;
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.min = min;
  e.max = max;
  e.children = {child};
  return Add(std::move(e));
}

ExprId Grammar::Call(int32_t rule) {
  TESSERA_CHECK(rule >= 0 && rule < num_rules());
  Expr e;
  e.kind = ExprKind::kCall;
  e.index = rule;
  return Add(std::move(e));
}

ExprId Grammar::Dfa(ByteDfa dfa) {
  automata_.push_back(std::move(dfa));
  Expr e;
  e.kind = ExprKind::kDfa;
  e.index = static_cast<int32_t>(automata_.size()) - 1;
  return Add(std::move(e));
}

bool Grammar::IsCallFree(ExprId id) const {
  std::vector<ExprId> todo{id};
  while (!todo.empty()) {
    const Expr& x = expr(todo.back());
    todo.pop_back();
    if (x.kind == ExprKind::kCall) return false;
    todo.insert(todo.end(), x.children.begin(), x.children.end());
  }
  return true;
}

namespace {

std::string ByteText(int b) {
  if (b == '\\' || b == '"' || b == ']' || b == '-' || b == '^') return fmt::format("\\{}", static_cast<char>(b));
  if (b >= 0x20 && b < 0x7F) return std::string(1, static_cast<char>(b));
  return fmt::format("\\x{:02x}", b);
}

std::string SetText(const ByteSet& s) {
  if (s.Count() == 256) return "[\\x00-\\xff]";
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.Has(b)) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.Has(e + 1)) ++e;
    out += ByteText(b);
    if (e > b) {
      out += '-';
      out += ByteText(e);
    }
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::ExprToString(ExprId id) const {
  const Expr& x = expr(id);
  switch (x.kind) {
    case ExprKind::kEmpty:
      return "\"\"";
    case ExprKind::kNothing:
      return "<nothing>";
    case ExprKind::kLiteral: {
      std::string out = "\"";
      for (unsigned char c : x.text) out += ByteText(c);
      return out + "\"";
    }
    case ExprKind::kBytes:
      return SetText(x.bytes);
    case ExprKind::kSeq:
    case ExprKind::kAlt: {
      std::string out = "(";
      for (size_t i = 0; i < x.children.size(); ++i) {
        if (i) out += x.kind == ExprKind::kSeq ? " " : " | ";
        out += ExprToString(x.children[i]);
      }
      return out + ")";
    }
    case ExprKind::kRepeat:
      return ExprToString(x.children[0]) +
             (x.max == kUnbounded ? fmt::format("{{{},}}", x.min) : fmt::format("{{{},{}}}", x.min, x.max));
    case ExprKind::kCall:
      return rule(x.index).name;
    case ExprKind::kDfa:
      return fmt::format("<automaton {} states>", automaton(x.index).size());
  }
  return "?";
}

std::string Grammar::ToString() const {
  std::string out;
  for (int32_t r = 0; r < num_rules(); ++r) {
    const Rule& ru = rule(r);
    out += fmt::format("{}{} ::= {}\n", r == root_ ? "*" : "", ru.name,
                       ru.body < 0 ? std::string("<undefined>") : ExprToString(ru.body));
  }
  return out;
}

}  // namespace tessera::grammar

// tessera grammar: Thompson NFA, subset construction and DFA products (see automaton.h).
#include "grammar/automaton.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"

namespace tessera::grammar {
namespace {

struct VectorHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

class Nfa {
 public:
  struct Node {
    std::vector<int32_t> eps;
    std::vector<std::pair<int32_t, int32_t>> bytes;  // (index into sets, target)
    std::vector<std::pair<int32_t, int32_t>> calls;  // (rule, target)
  };

  Nfa(const Grammar& g, const AutomatonLimits& limits, std::string_view what) : g_(g), limits_(limits), what_(what) {}

  int32_t NewNode() {
    if (static_cast<int32_t>(nodes.size()) >= limits_.max_nfa_states)
      Fail(ErrorKind::kInvalidArgument,
           "grammar too large: {} needs more than {} automaton states (a repetition count or the schema is too big)",
           what_, limits_.max_nfa_states);
    nodes.emplace_back();
    return static_cast<int32_t>(nodes.size()) - 1;
  }

  // Adds paths from `from` to `to` that spell the expression. Only edges out of `from`, into `to`
  // and among fresh nodes are added, so alternatives can share their two ends safely.
  void Build(ExprId id, int32_t from, int32_t to) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        Eps(from, to);
        return;
      case ExprKind::kNothing:
        return;
      case ExprKind::kLiteral: {
        int32_t cur = from;
        for (size_t i = 0; i < e.text.size(); ++i) {
          int32_t next = i + 1 == e.text.size() ? to : NewNode();
          ByteEdge(cur, ByteSet::Single(static_cast<unsigned char>(e.text[i])), next);
          cur = next;
        }
        return;
      }
      case ExprKind::kBytes:
        ByteEdge(from, e.bytes, to);
        return;
      case ExprKind::kSeq: {
        int32_t cur = from;
        for (size_t i = 0; i < e.children.size(); ++i) {
          int32_t next = i + 1 == e.children.size() ? to : NewNode();
          Build(e.children[i], cur, next);
          cur = next;
        }
        return;
      }
      case ExprKind::kAlt:
        for (ExprId c : e.children) {
          // A fresh entry node per alternative keeps a looping child from leaking into its siblings.
          int32_t a = NewNode();
          Eps(from, a);
          Build(c, a, to);
        }
        return;
      case ExprKind::kRepeat: {
        ExprId c = e.children[0];
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) {
          int32_t next = (i + 1 == e.min && e.max == e.min) ? to : NewNode();
          Build(c, cur, next);
          cur = next;
        }
        if (e.max == Grammar::kUnbounded) {
          int32_t a = NewNode(), b = NewNode();
          Eps(cur, a);
          Build(c, a, b);
          Eps(b, a);
          Eps(a, to);
        } else if (e.max > e.min) {
          for (int32_t j = e.min; j < e.max; ++j) {
            Eps(cur, to);
            int32_t next = j + 1 == e.max ? to : NewNode();
            Build(c, cur, next);
            cur = next;
          }
        }
        return;
      }
      case ExprKind::kCall:
        nodes[static_cast<size_t>(from)].calls.emplace_back(e.index, to);
        return;
      case ExprKind::kDfa: {
        const ByteDfa& d = g_.automaton(e.index);
        std::vector<int32_t> map(static_cast<size_t>(d.size()));
        for (auto& m : map) m = NewNode();
        Eps(from, map[static_cast<size_t>(d.start)]);
        for (int32_t s = 0; s < d.size(); ++s) {
          for (const auto& edge : d.edges[static_cast<size_t>(s)])
            ByteEdge(map[static_cast<size_t>(s)], edge.bytes, map[static_cast<size_t>(edge.target)]);
          if (d.final[static_cast<size_t>(s)]) Eps(map[static_cast<size_t>(s)], to);
        }
        return;
      }
    }
  }

  std::vector<Node> nodes;
  std::vector<ByteSet> sets;

 private:
  void Eps(int32_t a, int32_t b) { nodes[static_cast<size_t>(a)].eps.push_back(b); }
  void ByteEdge(int32_t a, const ByteSet& s, int32_t b) {
    auto it = set_index_.find(s);
    int32_t idx;
    if (it == set_index_.end()) {
      idx = static_cast<int32_t>(sets.size());
      sets.push_back(s);
      set_index_.emplace(s, idx);
    } else {
      idx = it->second;
    }
    nodes[static_cast<size_t>(a)].bytes.emplace_back(idx, b);
  }

  struct SetLess {
    bool operator()(const ByteSet& a, const ByteSet& b) const {
      return std::lexicographical_compare(a.w, a.w + 4, b.w, b.w + 4);
    }
  };
  const Grammar& g_;
  const AutomatonLimits& limits_;
  std::string_view what_;
  std::map<ByteSet, int32_t, SetLess> set_index_;
};

// Subset construction over an NFA whose accepting node is `end`.
RuleAutomaton Determinize(const Nfa& nfa, int32_t start, int32_t end, const AutomatonLimits& limits,
                          std::string_view what) {
  // Byte classes local to this NFA: bytes no edge set tells apart share a class.
  ByteClasses classes;
  for (const ByteSet& s : nfa.sets) classes.Refine(s);
  const int32_t num_classes = classes.count;
  std::vector<ByteSet> class_bytes(static_cast<size_t>(num_classes));
  for (int b = 0; b < 256; ++b) class_bytes[static_cast<size_t>(classes.of[b])].Add(b);
  // Classes each edge set covers.
  std::vector<std::vector<int32_t>> set_classes(nfa.sets.size());
  for (size_t i = 0; i < nfa.sets.size(); ++i)
    for (int32_t c = 0; c < num_classes; ++c)
      if (!(nfa.sets[i] & class_bytes[static_cast<size_t>(c)]).Empty()) set_classes[i].push_back(c);

  std::vector<uint32_t> stamp(nfa.nodes.size(), 0);
  uint32_t cur_stamp = 0;
  std::vector<int32_t> stack;
  auto closure = [&](std::vector<int32_t>* set) {
    ++cur_stamp;
    stack.assign(set->begin(), set->end());
    set->clear();
    while (!stack.empty()) {
      int32_t n = stack.back();
      stack.pop_back();
      if (stamp[static_cast<size_t>(n)] == cur_stamp) continue;
      stamp[static_cast<size_t>(n)] = cur_stamp;
      set->push_back(n);
      for (int32_t m : nfa.nodes[static_cast<size_t>(n)].eps) stack.push_back(m);
    }
    std::sort(set->begin(), set->end());
  };

  RuleAutomaton out;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> index;
  std::vector<std::vector<int32_t>> members;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    closure(&set);
    auto it = index.find(set);
    if (it != index.end()) return it->second;
    if (static_cast<int32_t>(members.size()) >= limits.max_dfa_states)
      Fail(ErrorKind::kInvalidArgument,
           "grammar too large: {} needs more than {} deterministic states (simplify the pattern or bounds)", what,
           limits.max_dfa_states);
    int32_t id = static_cast<int32_t>(members.size());
    index.emplace(set, id);
    members.push_back(std::move(set));
    out.states.emplace_back();
    return id;
  };
  intern({start});
  std::vector<std::vector<int32_t>> per_class(static_cast<size_t>(num_classes));
  for (size_t d = 0; d < members.size(); ++d) {
    for (auto& v : per_class) v.clear();
    std::map<int32_t, std::vector<int32_t>> per_callee;
    bool final = false;
    for (int32_t n : members[d]) {
      if (n == end) final = true;
      const Nfa::Node& node = nfa.nodes[static_cast<size_t>(n)];
      for (const auto& [set, target] : node.bytes)
        for (int32_t c : set_classes[static_cast<size_t>(set)]) per_class[static_cast<size_t>(c)].push_back(target);
      for (const auto& [rule, target] : node.calls) per_callee[rule].push_back(target);
    }
    std::vector<int32_t> class_target(static_cast<size_t>(num_classes), -1);
    for (int32_t c = 0; c < num_classes; ++c) {
      auto& t = per_class[static_cast<size_t>(c)];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      class_target[static_cast<size_t>(c)] = intern(t);
    }
    std::vector<std::pair<ByteSet, int32_t>> edges;
    for (int32_t c = 0; c < num_classes; ++c) {
      int32_t t = class_target[static_cast<size_t>(c)];
      if (t < 0) continue;
      auto it = std::find_if(edges.begin(), edges.end(), [t](const auto& e) { return e.second == t; });
      if (it == edges.end()) {
        edges.emplace_back(class_bytes[static_cast<size_t>(c)], t);
      } else {
        it->first |= class_bytes[static_cast<size_t>(c)];
      }
    }
    std::vector<std::pair<int32_t, int32_t>> calls;
    for (auto& [rule, targets] : per_callee) calls.emplace_back(rule, intern(targets));
    out.states[d].byte_edges = std::move(edges);
    out.states[d].calls = std::move(calls);
    out.states[d].final = final;
  }
  return out;
}

}  // namespace

RuleAutomaton BuildRuleAutomaton(const Grammar& g, ExprId body, const AutomatonLimits& limits, std::string_view what) {
  Nfa nfa(g, limits, what);
  int32_t start = nfa.NewNode(), end = nfa.NewNode();
  nfa.Build(body, start, end);
  return Determinize(nfa, start, end, limits, what);
}

ByteDfa BuildByteDfa(const Grammar& g, ExprId expr, const AutomatonLimits& limits, std::string_view what) {
  TESSERA_CHECK(g.IsCallFree(expr));
  RuleAutomaton a = BuildRuleAutomaton(g, expr, limits, what);
  ByteDfa d;
  d.start = 0;
  for (auto& s : a.states) {
    std::vector<ByteDfa::Edge> edges;
    for (auto& [set, t] : s.byte_edges) edges.push_back({set, t});
    d.edges.push_back(std::move(edges));
    d.final.push_back(s.final);
  }
  return d;
}

namespace {

// Keeps only the states reachable from the start that can reach an accepting state.
ByteDfa Trim(const ByteDfa& d) {
  size_t n = static_cast<size_t>(d.size());
  std::vector<std::vector<int32_t>> rev(n);
  for (size_t s = 0; s < n; ++s)
    for (const auto& e : d.edges[s]) rev[static_cast<size_t>(e.target)].push_back(static_cast<int32_t>(s));
  std::vector<bool> live(n, false);
  std::vector<int32_t> todo;
  for (size_t s = 0; s < n; ++s)
    if (d.final[s]) live[s] = true, todo.push_back(static_cast<int32_t>(s));
  while (!todo.empty()) {
    int32_t s = todo.back();
    todo.pop_back();
    for (int32_t p : rev[static_cast<size_t>(s)])
      if (!live[static_cast<size_t>(p)]) live[static_cast<size_t>(p)] = true, todo.push_back(p);
  }
  ByteDfa out;
  std::vector<int32_t> map(n, -1);
  auto add = [&](int32_t s) {
    map[static_cast<size_t>(s)] = out.size();
    out.final.push_back(d.final[static_cast<size_t>(s)]);
    out.edges.emplace_back();
  };
  add(d.start);
  todo.push_back(d.start);
  std::vector<int32_t> order;
  while (!todo.empty()) {
    int32_t s = todo.back();
    todo.pop_back();
    order.push_back(s);
    for (const auto& e : d.edges[static_cast<size_t>(s)]) {
      if (!live[static_cast<size_t>(e.target)] || map[static_cast<size_t>(e.target)] >= 0) continue;
      add(e.target);
      todo.push_back(e.target);
    }
  }
  for (int32_t s : order)
    for (const auto& e : d.edges[static_cast<size_t>(s)])
      if (live[static_cast<size_t>(e.target)])
        out.edges[static_cast<size_t>(map[static_cast<size_t>(s)])].push_back(
            {e.bytes, map[static_cast<size_t>(e.target)]});
  out.start = 0;
  return out;
}

}  // namespace

ByteDfa ProductDfa(const ByteDfa& a, const ByteDfa& b, bool subtract, const AutomatonLimits& limits,
                   std::string_view what) {
  ByteDfa out;
  std::map<std::pair<int32_t, int32_t>, int32_t> index;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  auto intern = [&](int32_t x, int32_t y) {
    auto it = index.find({x, y});
    if (it != index.end()) return it->second;
    if (out.size() >= limits.max_dfa_states)
      Fail(ErrorKind::kInvalidArgument, "grammar too large: {} needs more than {} deterministic states", what,
           limits.max_dfa_states);
    int32_t id = out.size();
    index.emplace(std::make_pair(x, y), id);
    pairs.emplace_back(x, y);
    bool bf = y >= 0 && b.final[static_cast<size_t>(y)];
    out.final.push_back(a.final[static_cast<size_t>(x)] && (subtract ? !bf : bf));
    out.edges.emplace_back();
    return id;
  };
  out.start = intern(a.start, b.start);
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto [x, y] = pairs[i];
    std::vector<ByteDfa::Edge> edges;
    for (const auto& ea : a.edges[static_cast<size_t>(x)]) {
      ByteSet rest = ea.bytes;
      if (y >= 0) {
        for (const auto& eb : b.edges[static_cast<size_t>(y)]) {
          ByteSet both = ea.bytes & eb.bytes;
          if (both.Empty()) continue;
          rest = rest & ~eb.bytes;
          edges.push_back({both, intern(ea.target, eb.target)});
        }
      }
      if (subtract && !rest.Empty()) edges.push_back({rest, intern(ea.target, -1)});
    }
    out.edges[i] = std::move(edges);
  }
  return Trim(out);
}

bool DfaIsEmpty(const ByteDfa& d) {
  ByteDfa t = Trim(d);
  for (bool f : t.final)
    if (f) return false;
  return true;
}

ExprId IntersectExprs(Grammar* g, ExprId a, ExprId b, const AutomatonLimits& limits, std::string_view what) {
  ByteDfa p = ProductDfa(BuildByteDfa(*g, a, limits, what), BuildByteDfa(*g, b, limits, what), false, limits, what);
  if (DfaIsEmpty(p)) return g->Nothing();
  return g->Dfa(std::move(p));
}

ExprId SubtractExprs(Grammar* g, ExprId a, ExprId b, const AutomatonLimits& limits, std::string_view what) {
  ByteDfa p = ProductDfa(BuildByteDfa(*g, a, limits, what), BuildByteDfa(*g, b, limits, what), true, limits, what);
  if (DfaIsEmpty(p)) return g->Nothing();
  return g->Dfa(std::move(p));
}

}  // namespace tessera::grammar

// tessera grammar: building the pushdown automaton from a Grammar, and its analyses (see pda.h).
#include "grammar/pda.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"

namespace tessera::grammar {
namespace {

// Rules reachable from the root through calls; fails on a reachable rule without a body.
std::vector<int32_t> ReachableRules(const Grammar& g) {
  std::vector<bool> seen(static_cast<size_t>(g.num_rules()), false);
  std::vector<int32_t> order, todo{g.root()};
  seen[static_cast<size_t>(g.root())] = true;
  while (!todo.empty()) {
    int32_t r = todo.back();
    todo.pop_back();
    order.push_back(r);
    if (g.rule(r).body < 0)
      Fail(ErrorKind::kInvalidArgument, "grammar: rule '{}' is used but not defined", g.rule(r).name);
    std::vector<ExprId> exprs{g.rule(r).body};
    while (!exprs.empty()) {
      const Expr& e = g.expr(exprs.back());
      exprs.pop_back();
      if (e.kind == ExprKind::kCall && !seen[static_cast<size_t>(e.index)]) {
        seen[static_cast<size_t>(e.index)] = true;
        todo.push_back(e.index);
      }
      exprs.insert(exprs.end(), e.children.begin(), e.children.end());
    }
  }
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

std::shared_ptr<const Pda> Pda::Build(const Grammar& g, const AutomatonLimits& limits) {
  if (g.root() < 0) Fail(ErrorKind::kInvalidArgument, "grammar: no start rule");
  auto pda = std::make_shared<Pda>();
  Pda& p = *pda;
  std::vector<int32_t> reachable = ReachableRules(g);
  p.rules_.resize(static_cast<size_t>(g.num_rules()));
  p.root_ = g.root();
  std::vector<RuleAutomaton> autos(static_cast<size_t>(g.num_rules()));
  std::vector<int32_t> offset(static_cast<size_t>(g.num_rules()), -1);
  int32_t total = 0;
  for (int32_t r : reachable) {
    autos[static_cast<size_t>(r)] =
        BuildRuleAutomaton(g, g.rule(r).body, limits, fmt::format("rule '{}'", g.rule(r).name));
    offset[static_cast<size_t>(r)] = total;
    total += static_cast<int32_t>(autos[static_cast<size_t>(r)].states.size());
    if (total > limits.max_dfa_states * 4)
      Fail(ErrorKind::kInvalidArgument, "grammar too large: more than {} automaton states in all",
           limits.max_dfa_states * 4);
  }
  for (int32_t r = 0; r < g.num_rules(); ++r) {
    p.rules_[static_cast<size_t>(r)].name = g.rule(r).name;
    p.rules_[static_cast<size_t>(r)].start = offset[static_cast<size_t>(r)];
  }

  // Global byte classes: bytes no transition tells apart share a column of the table.
  ByteClasses classes;
  {
    std::vector<ByteSet> distinct;
    for (int32_t r : reachable)
      for (const auto& st : autos[static_cast<size_t>(r)].states)
        for (const auto& [set, t] : st.byte_edges)
          if (std::find(distinct.begin(), distinct.end(), set) == distinct.end()) distinct.push_back(set);
    for (const auto& s : distinct) classes.Refine(s);
  }
  const int32_t num_classes = classes.count;
  p.num_classes_ = num_classes;
  for (int b = 0; b < 256; ++b) p.byte_class_[b] = static_cast<uint8_t>(classes.of[b]);

  p.states_.resize(static_cast<size_t>(total));
  p.trans_.assign(static_cast<size_t>(total) * static_cast<size_t>(num_classes), -1);
  std::vector<std::vector<PdaCall>> calls(static_cast<size_t>(total));
  for (int32_t r : reachable) {
    int32_t off = offset[static_cast<size_t>(r)];
    const auto& states = autos[static_cast<size_t>(r)].states;
    for (size_t i = 0; i < states.size(); ++i) {
      int32_t s = off + static_cast<int32_t>(i);
      PdaState& ps = p.states_[static_cast<size_t>(s)];
      ps.rule = r;
      ps.final = states[i].final;
      for (const auto& [set, t] : states[i].byte_edges)
        for (int b = 0; b < 256; ++b)
          if (set.Has(b))
            p.trans_[static_cast<size_t>(s) * static_cast<size_t>(num_classes) + p.byte_class_[b]] = off + t;
      for (const auto& [callee, ret] : states[i].calls) calls[static_cast<size_t>(s)].push_back({callee, off + ret});
    }
  }

  // Fewest bytes to the end of the rule, by worklist relaxation: dist(s) = 0 when final, else the
  // least of 1 + dist(next) over bytes and minlen(callee) + dist(ret) over calls.
  std::vector<int64_t>& dist = p.min_to_final_;
  dist.assign(static_cast<size_t>(total), kInfinite);
  std::vector<std::vector<int32_t>> preds(static_cast<size_t>(total)), callers(static_cast<size_t>(g.num_rules()));
  for (int32_t s = 0; s < total; ++s) {
    for (int32_t c = 0; c < num_classes; ++c) {
      int32_t t = p.trans_[static_cast<size_t>(s) * static_cast<size_t>(num_classes) + static_cast<size_t>(c)];
      if (t >= 0) preds[static_cast<size_t>(t)].push_back(s);
    }
    for (const PdaCall& c : calls[static_cast<size_t>(s)]) {
      preds[static_cast<size_t>(c.ret)].push_back(s);
      callers[static_cast<size_t>(c.rule)].push_back(s);
    }
  }
  auto evaluate = [&](int32_t s) {
    int64_t best = p.states_[static_cast<size_t>(s)].final ? 0 : kInfinite;
    for (int32_t c = 0; c < num_classes; ++c) {
      int32_t t = p.trans_[static_cast<size_t>(s) * static_cast<size_t>(num_classes) + static_cast<size_t>(c)];
      if (t >= 0) best = std::min(best, 1 + dist[static_cast<size_t>(t)]);
    }
    for (const PdaCall& c : calls[static_cast<size_t>(s)])
      best = std::min(best, dist[static_cast<size_t>(p.rules_[static_cast<size_t>(c.rule)].start)] +
                                dist[static_cast<size_t>(c.ret)]);
    return std::min(best, kInfinite);
  };
  std::vector<int32_t> work;
  for (int32_t s = 0; s < total; ++s)
    if (p.states_[static_cast<size_t>(s)].final) dist[static_cast<size_t>(s)] = 0, work.push_back(s);
  while (!work.empty()) {
    int32_t t = work.back();
    work.pop_back();
    auto relax = [&](int32_t s) {
      int64_t d = evaluate(s);
      if (d < dist[static_cast<size_t>(s)]) dist[static_cast<size_t>(s)] = d, work.push_back(s);
    };
    for (int32_t s : preds[static_cast<size_t>(t)]) relax(s);
    int32_t r = p.states_[static_cast<size_t>(t)].rule;
    if (p.rules_[static_cast<size_t>(r)].start == t)
      for (int32_t s : callers[static_cast<size_t>(r)]) relax(s);
  }
  if (dist[static_cast<size_t>(p.root_start())] >= kInfinite)
    Fail(ErrorKind::kInvalidArgument, "grammar accepts no string at all (its start rule '{}' can never complete)",
         g.rule(g.root()).name);

  // Drop what can never complete: transitions into dead states, calls of unproductive rules.
  for (int32_t s = 0; s < total; ++s) {
    PdaState& ps = p.states_[static_cast<size_t>(s)];
    for (int b = 0; b < 256; ++b) {
      int32_t& t = p.trans_[static_cast<size_t>(s) * static_cast<size_t>(num_classes) + p.byte_class_[b]];
      if (t >= 0 && dist[static_cast<size_t>(t)] >= kInfinite) t = -1;
      if (t >= 0) ps.bytes.Add(b);
    }
    ps.has_bytes = !ps.bytes.Empty();
    ps.call_begin = static_cast<int32_t>(p.calls_.size());
    for (const PdaCall& c : calls[static_cast<size_t>(s)])
      if (dist[static_cast<size_t>(p.rules_[static_cast<size_t>(c.rule)].start)] < kInfinite &&
          dist[static_cast<size_t>(c.ret)] < kInfinite)
        p.calls_.push_back(c);
    ps.call_end = static_cast<int32_t>(p.calls_.size());
    ps.has_calls = ps.call_end > ps.call_begin;
  }
  for (int32_t r : reachable) {
    PdaRule& pr = p.rules_[static_cast<size_t>(r)];
    pr.nullable = dist[static_cast<size_t>(pr.start)] == 0;
    pr.num_states = static_cast<int32_t>(autos[static_cast<size_t>(r)].states.size());
    for (int32_t s = pr.start; s < pr.start + pr.num_states; ++s)
      if (p.states_[static_cast<size_t>(s)].has_calls) pr.call_free = false;
  }
  p.Analyse();
  return pda;
}

void Pda::Analyse() {
  const size_t n = states_.size();
  // Left recursion: a rule reaching a call of itself without consuming a byte would push forever.
  // Edges R -> S when R can call S after only nullable calls from its start.
  std::vector<std::vector<int32_t>> left_calls(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    if (rules_[r].start < 0) continue;
    std::vector<int32_t> todo{rules_[r].start};
    std::vector<bool> seen(n, false);
    seen[static_cast<size_t>(rules_[r].start)] = true;
    while (!todo.empty()) {
      int32_t s = todo.back();
      todo.pop_back();
      for (const PdaCall* c = calls_begin(s); c != calls_end(s); ++c) {
        left_calls[r].push_back(c->rule);
        if (rules_[static_cast<size_t>(c->rule)].nullable && !seen[static_cast<size_t>(c->ret)]) {
          seen[static_cast<size_t>(c->ret)] = true;
          todo.push_back(c->ret);
        }
      }
    }
  }
  std::vector<int> color(rules_.size(), 0);
  std::vector<int32_t> path;
  std::function<void(int32_t)> visit = [&](int32_t r) {
    color[static_cast<size_t>(r)] = 1;
    path.push_back(r);
    for (int32_t s : left_calls[static_cast<size_t>(r)]) {
      if (color[static_cast<size_t>(s)] == 1) {
        std::string cycle;
        auto it = std::find(path.begin(), path.end(), s);
        for (; it != path.end(); ++it) cycle += "'" + rules_[static_cast<size_t>(*it)].name + "' -> ";
        Fail(ErrorKind::kInvalidArgument,
             "grammar is left-recursive ({}'{}'): a rule must consume a byte before calling itself again; "
             "rewrite the recursion as a repetition",
             cycle, rules_[static_cast<size_t>(s)].name);
      }
      if (color[static_cast<size_t>(s)] == 0) visit(s);
    }
    path.pop_back();
    color[static_cast<size_t>(r)] = 2;
  };
  for (size_t r = 0; r < rules_.size(); ++r)
    if (rules_[r].start >= 0 && color[r] == 0) visit(static_cast<int32_t>(r));

  // FIRST of each state (bytes readable now, through calls), then FOLLOW of each rule.
  std::vector<ByteSet> first(n);
  for (size_t s = 0; s < n; ++s) first[s] = states_[s].bytes;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < n; ++s) {
      ByteSet f = first[s];
      for (const PdaCall* c = calls_begin(static_cast<int32_t>(s)); c != calls_end(static_cast<int32_t>(s)); ++c) {
        const PdaRule& callee = rules_[static_cast<size_t>(c->rule)];
        f |= first[static_cast<size_t>(callee.start)];
        if (callee.nullable) f |= first[static_cast<size_t>(c->ret)];
      }
      if (!(f == first[s])) first[s] = f, changed = true;
    }
  }
  rules_[static_cast<size_t>(root_)].follow_end = true;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < n; ++s) {
      for (const PdaCall* c = calls_begin(static_cast<int32_t>(s)); c != calls_end(static_cast<int32_t>(s)); ++c) {
        PdaRule& callee = rules_[static_cast<size_t>(c->rule)];
        ByteSet f = callee.follow;
        f |= first[static_cast<size_t>(c->ret)];
        bool end = callee.follow_end;
        if (min_to_final_[static_cast<size_t>(c->ret)] == 0) {
          const PdaRule& caller = rules_[static_cast<size_t>(states_[s].rule)];
          f |= caller.follow;
          end = end || caller.follow_end;
        }
        if (!(f == callee.follow) || end != callee.follow_end) {
          callee.follow = f;
          callee.follow_end = end;
          changed = true;
        }
      }
    }
  }
}

std::string Pda::ToString() const {
  std::string out;
  for (int32_t s = 0; s < num_states(); ++s) {
    const PdaState& ps = state(s);
    out += fmt::format("{}{}: rule {}{}", s == rule(ps.rule).start ? "*" : " ", s, rule(ps.rule).name,
                       ps.final ? " final" : "");
    std::map<int32_t, std::string> by_target;
    for (int b = 0; b < 256; ++b) {
      int32_t t = Next(s, static_cast<uint8_t>(b));
      if (t < 0) continue;
      std::string& txt = by_target[t];
      if (b > 0x20 && b < 0x7F) {
        txt += static_cast<char>(b);
      } else {
        txt += fmt::format("\\x{:02x}", b);
      }
    }
    for (const auto& [t, txt] : by_target) out += fmt::format(" [{}]->{}", txt, t);
    for (const PdaCall* c = calls_begin(s); c != calls_end(s); ++c)
      out += fmt::format(" call {}->{}", rule(c->rule).name, c->ret);
    out += "\n";
  }
  return out;
}

}  // namespace tessera::grammar

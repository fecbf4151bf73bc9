// tessera grammar: the representation every structured-output front-end (JSON Schema, regex, choice,
// EBNF) compiles to: a context-free grammar over bytes. A Grammar is a list of rules; a rule's body
// is a regular expression over bytes (literals, byte sets, sequence, alternation, bounded or
// unbounded repetition) whose atoms may also call other rules, which is what gives recursion
// (nested JSON). compiled_grammar.h turns it into one automaton per rule for the matcher.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::grammar {

// A set of byte values (256 bits).
struct ByteSet {
  uint64_t w[4] = {0, 0, 0, 0};

  static ByteSet Range(int lo, int hi) {
    ByteSet s;
    s.AddRange(lo, hi);
    return s;
  }
  static ByteSet Single(int b) { return Range(b, b); }
  static ByteSet All() { return Range(0, 255); }
  void Add(int b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(int lo, int hi) {
    for (int b = lo; b <= hi; ++b) Add(b);
  }
  bool Has(int b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  bool Empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  int Count() const {
    return __builtin_popcountll(w[0]) + __builtin_popcountll(w[1]) + __builtin_popcountll(w[2]) +
           __builtin_popcountll(w[3]);
  }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
    return *this;
  }
  ByteSet operator|(const ByteSet& o) const {
    ByteSet r = *this;
    return r |= o;
  }
  ByteSet operator&(const ByteSet& o) const {
    ByteSet r;
    for (int i = 0; i < 4; ++i) r.w[i] = w[i] & o.w[i];
    return r;
  }
  ByteSet operator~() const {
    ByteSet r;
    for (int i = 0; i < 4; ++i) r.w[i] = ~w[i];
    return r;
  }
  bool operator==(const ByteSet& o) const {
    return w[0] == o.w[0] && w[1] == o.w[1] && w[2] == o.w[2] && w[3] == o.w[3];
  }
};

// Byte classes: bytes that no set refined so far tells apart share a class (classes numbered in the
// order of their smallest byte), so a transition table needs a column per class, not per byte.
struct ByteClasses {
  int32_t of[256] = {};  // the class of each byte
  int32_t count = 1;
  void Refine(const ByteSet& s) {
    std::vector<int32_t> remap(static_cast<size_t>(2 * count), -1);
    int32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const int32_t key = of[b] * 2 + (s.Has(b) ? 1 : 0);
      if (remap[static_cast<size_t>(key)] < 0) remap[static_cast<size_t>(key)] = n++;
      of[b] = remap[static_cast<size_t>(key)];
    }
    count = n;
  }
};

// A deterministic automaton over bytes without rule calls: the result of intersecting or
// subtracting two call-free expressions (automaton.h), embedded back into a grammar as one atom.
struct ByteDfa {
  struct Edge {
    ByteSet bytes;
    int32_t target;
  };
  std::vector<std::vector<Edge>> edges;  // per state; byte sets of one state are disjoint
  std::vector<bool> final;
  int32_t start = 0;
  int32_t size() const { return static_cast<int32_t>(final.size()); }
};

using ExprId = int32_t;

enum class ExprKind : uint8_t {
  kEmpty,    // matches "" only
  kNothing,  // matches no string at all (an alternation of nothing)
  kLiteral,  // the bytes of `text`
  kBytes,    // one byte from `bytes`
  kSeq,      // children one after another
  kAlt,      // any one child
  kRepeat,   // child repeated min..max times (max = kUnbounded for no limit)
  kCall,     // the language of rule `index`
  kDfa,      // the language of automata[index]
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  int32_t min = 0, max = 0;  // kRepeat
  int32_t index = -1;        // kCall: rule id; kDfa: automaton id
  ByteSet bytes;             // kBytes
  std::string text;          // kLiteral
  std::vector<ExprId> children;
};

struct Rule {
  std::string name;  // for error messages and dumps
  ExprId body = -1;  // -1 until SetBody
};

// A grammar under construction and the finished product front-ends hand to CompileGrammar.
// Expressions are immutable nodes in one arena and may be shared by several parents.
class Grammar {
 public:
  static constexpr int32_t kUnbounded = -1;

  // Rules: declare first (so bodies can refer to each other), then set the body.
  int32_t AddRule(std::string name);
  void SetBody(int32_t rule, ExprId body);
  int32_t FindRule(std::string_view name) const;  // -1 when absent
  void set_root(int32_t rule) { root_ = rule; }
  int32_t root() const { return root_; }

  ExprId Empty();
  ExprId Nothing();
  ExprId Literal(std::string_view bytes);
  ExprId Bytes(const ByteSet& set);  // an empty set gives Nothing()
  ExprId Seq(std::vector<ExprId> children);
  ExprId Alt(std::vector<ExprId> children);
  ExprId Repeat(ExprId child, int32_t min, int32_t max);
  ExprId Optional(ExprId child) { return Repeat(child, 0, 1); }
  ExprId Star(ExprId child) { return Repeat(child, 0, kUnbounded); }
  ExprId Plus(ExprId child) { return Repeat(child, 1, kUnbounded); }
  ExprId Call(int32_t rule);
  ExprId Dfa(ByteDfa dfa);

  const Expr& expr(ExprId id) const { return exprs_[static_cast<size_t>(id)]; }
  const Rule& rule(int32_t id) const { return rules_[static_cast<size_t>(id)]; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  int32_t num_exprs() const { return static_cast<int32_t>(exprs_.size()); }
  const ByteDfa& automaton(int32_t id) const { return automata_[static_cast<size_t>(id)]; }

  // True when the expression (and what it contains) calls no rule: only those can be intersected.
  bool IsCallFree(ExprId id) const;
  // A readable dump of every rule, for debugging and error messages.
  std::string ToString() const;
  std::string ExprToString(ExprId id) const;

 private:
  ExprId Add(Expr e);

  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  std::vector<ByteDfa> automata_;
  int32_t root_ = -1;
};

}  // namespace tessera::grammar

// tessera grammar: parse stacks of the pushdown automaton and the two moves of the parser.
// A stack is a node of a StackArena: (return state, parent node), hash-consed so that equal stacks
// are the same node. Stacks are persistent (a push never changes an existing node), so a parse
// position is just a list of Configs {state, node} and keeping old positions for rollback costs
// nothing. The set of configs is how the matcher follows several parses at once (an ambiguous
// grammar, or anyOf branches that start alike) without backtracking.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/pda.h"

namespace tessera::grammar {

struct Config {
  int32_t state;
  int32_t node;  // StackArena node; StackArena::kBottom is the empty stack
  bool operator==(const Config& o) const { return state == o.state && node == o.node; }
  bool operator<(const Config& o) const { return state != o.state ? state < o.state : node < o.node; }
};

class StackArena {
 public:
  static constexpr int32_t kBottom = 0;

  explicit StackArena(int32_t max_depth);
  // The stack `parent` with `ret` pushed; -1 when that would exceed the depth limit.
  int32_t Push(int32_t parent, int32_t ret);
  int32_t ret(int32_t node) const { return nodes_[static_cast<size_t>(node)].ret; }
  int32_t parent(int32_t node) const { return nodes_[static_cast<size_t>(node)].parent; }
  int32_t depth(int32_t node) const { return nodes_[static_cast<size_t>(node)].depth; }
  int32_t max_depth() const { return max_depth_; }
  int32_t max_depth_seen() const { return max_depth_seen_; }  // deepest node created since Clear
  size_t size() const { return nodes_.size(); }
  void Clear();
  // Keeps the nodes reachable from the configs of `lists` (and renumbers those configs), dropping
  // the rest: the garbage collection of a long-running matcher.
  void Compact(const std::vector<std::vector<Config>*>& lists);

 private:
  struct Node {
    int32_t ret, parent, depth;
  };
  size_t Slot(int32_t parent, int32_t ret) const;
  void Rehash(size_t capacity);

  std::vector<Node> nodes_;
  std::vector<int32_t> table_;  // open addressing over node ids, -1 = empty
  int32_t max_depth_;
  int32_t max_depth_seen_ = 0;
};

// A set of configs with O(1) membership test and O(size) clearing.
class ConfigSet {
 public:
  bool Insert(Config c);  // false when already present
  void Clear();
  size_t size() const { return items_.size(); }

 private:
  size_t Slot(Config c) const;
  std::vector<Config> items_;
  std::vector<int32_t> table_;  // index into items_, -1 = empty
};

// The parser's moves over one grammar, with scratch space reused between calls (not thread-safe;
// one per matcher or per precomputation).
class PdaStepper {
 public:
  PdaStepper(const Pda& pda, int32_t max_configs) : pda_(pda), max_configs_(max_configs) {}

  // Expands `kernels` (positions right after a byte, or the start) through calls and rule ends
  // into `scan`: the configs that can read a byte next. `roots`, when given, receives the kernels
  // and every config reached from them by ending a rule below their own stack level (the configs
  // whose precomputed token classes cover the position; see token_masks.h). Returns true when
  // the bottom of the stack can end (the text so far is complete). Throws Error(kInvalidArgument)
  // when more than max_configs parses are alive at once (a grammar too ambiguous to follow).
  bool Closure(StackArena* arena, const Config* kernels, size_t n, std::vector<Config>* scan,
               std::vector<Config>* roots);
  // The configs after reading byte b from `scan` (not yet expanded).
  void Advance(const std::vector<Config>& scan, uint8_t b, std::vector<Config>* kernels) const {
    kernels->clear();
    for (const Config& c : scan) {
      int32_t t = pda_.Next(c.state, b);
      if (t >= 0) kernels->push_back({t, c.node});
    }
  }
  const Pda& pda() const { return pda_; }

 private:
  struct Work {
    Config c;
    int32_t floor;  // stack node of the root this config descends from
    bool root;
  };
  const Pda& pda_;
  int32_t max_configs_;
  ConfigSet seen_, scan_set_;
  std::vector<Work> work_;
};

}  // namespace tessera::grammar

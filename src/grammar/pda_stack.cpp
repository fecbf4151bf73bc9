// tessera grammar: hash-consed parse stacks and the parser's closure (see pda_stack.h).
#include "grammar/pda_stack.h"

#include "core/error.h"

namespace tessera::grammar {
namespace {

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

StackArena::StackArena(int32_t max_depth) : max_depth_(max_depth) { Clear(); }

void StackArena::Clear() {
  nodes_.assign(1, Node{-1, -1, 0});
  table_.assign(64, -1);
  max_depth_seen_ = 0;
}

size_t StackArena::Slot(int32_t parent, int32_t ret) const {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(ret);
  size_t mask = table_.size() - 1;
  size_t i = static_cast<size_t>(Mix(key)) & mask;
  while (true) {
    int32_t id = table_[i];
    if (id < 0) return i;
    const Node& n = nodes_[static_cast<size_t>(id)];
    if (n.parent == parent && n.ret == ret) return i;
    i = (i + 1) & mask;
  }
}

void StackArena::Rehash(size_t capacity) {
  table_.assign(capacity, -1);
  for (size_t id = 1; id < nodes_.size(); ++id)
    table_[Slot(nodes_[id].parent, nodes_[id].ret)] = static_cast<int32_t>(id);
}

int32_t StackArena::Push(int32_t parent, int32_t ret) {
  int32_t d = nodes_[static_cast<size_t>(parent)].depth + 1;
  if (d > max_depth_) return -1;
  size_t slot = Slot(parent, ret);
  if (table_[slot] >= 0) return table_[slot];
  int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(Node{ret, parent, d});
  table_[slot] = id;
  if (d > max_depth_seen_) max_depth_seen_ = d;
  if (nodes_.size() * 2 > table_.size()) Rehash(table_.size() * 2);
  return id;
}

void StackArena::Compact(const std::vector<std::vector<Config>*>& lists) {
  std::vector<int32_t> map(nodes_.size(), -1);
  map[0] = 0;
  for (const auto* list : lists)
    for (const Config& c : *list)
      for (int32_t n = c.node; n >= 0 && map[static_cast<size_t>(n)] < 0; n = nodes_[static_cast<size_t>(n)].parent)
        map[static_cast<size_t>(n)] = 1;  // marked; numbered below
  // A parent is always older (smaller id) than its children, so numbering in id order keeps
  // parents before children.
  std::vector<Node> kept(1, nodes_[0]);
  for (size_t id = 1; id < nodes_.size(); ++id) {
    if (map[id] < 0) continue;
    map[id] = static_cast<int32_t>(kept.size());
    Node n = nodes_[id];
    n.parent = map[static_cast<size_t>(n.parent)];
    kept.push_back(n);
  }
  nodes_ = std::move(kept);
  size_t cap = 64;
  while (cap < nodes_.size() * 2) cap *= 2;
  Rehash(cap);
  for (auto* list : lists)
    for (Config& c : *list) c.node = map[static_cast<size_t>(c.node)];
}

size_t ConfigSet::Slot(Config c) const {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(c.node)) << 32) | static_cast<uint32_t>(c.state);
  size_t mask = table_.size() - 1;
  size_t i = static_cast<size_t>(Mix(key)) & mask;
  while (table_[i] >= 0 && !(items_[static_cast<size_t>(table_[i])] == c)) i = (i + 1) & mask;
  return i;
}

bool ConfigSet::Insert(Config c) {
  if (items_.size() < 8) {  // small sets: a linear scan beats hashing
    for (const Config& x : items_)
      if (x == c) return false;
    items_.push_back(c);
    if (items_.size() == 8) {
      table_.assign(32, -1);
      for (size_t i = 0; i < items_.size(); ++i) table_[Slot(items_[i])] = static_cast<int32_t>(i);
    }
    return true;
  }
  size_t slot = Slot(c);
  if (table_[slot] >= 0) return false;
  table_[slot] = static_cast<int32_t>(items_.size());
  items_.push_back(c);
  if (items_.size() * 2 > table_.size()) {
    table_.assign(table_.size() * 2, -1);
    for (size_t i = 0; i < items_.size(); ++i) table_[Slot(items_[i])] = static_cast<int32_t>(i);
  }
  return true;
}

void ConfigSet::Clear() {
  if (items_.size() >= 8) {
    if (table_.size() > 4096) {
      table_.clear();
    } else {
      for (const Config& c : items_) table_[Slot(c)] = -1;
    }
  }
  items_.clear();
}

bool PdaStepper::Closure(StackArena* arena, const Config* kernels, size_t n, std::vector<Config>* scan,
                         std::vector<Config>* roots) {
  scan->clear();
  if (roots) roots->clear();
  seen_.Clear();
  work_.clear();
  for (size_t i = n; i-- > 0;) work_.push_back({kernels[i], kernels[i].node, true});
  bool accepting = false;
  while (!work_.empty()) {
    Work w = work_.back();
    work_.pop_back();
    if (!seen_.Insert(w.c)) continue;
    if (static_cast<int32_t>(seen_.size()) > max_configs_)
      Fail(ErrorKind::kInvalidArgument,
           "grammar too ambiguous: more than {} parses are alive at one position (simplify alternatives that "
           "match the same text)",
           max_configs_);
    if (w.root && roots) roots->push_back(w.c);
    const PdaState& st = pda_.state(w.c.state);
    if (st.has_bytes) scan->push_back(w.c);
    for (const PdaCall* c = pda_.calls_begin(w.c.state); c != pda_.calls_end(w.c.state); ++c) {
      int32_t node = arena->Push(w.c.node, c->ret);
      if (node < 0) continue;  // deeper than the limit: this parse is dropped
      work_.push_back({{pda_.rule(c->rule).start, node}, w.floor, false});
    }
    if (st.final) {
      if (w.c.node == StackArena::kBottom) {
        accepting = true;
      } else {
        Config up{arena->ret(w.c.node), arena->parent(w.c.node)};
        if (w.c.node == w.floor) {
          work_.push_back({up, up.node, true});
        } else {
          work_.push_back({up, w.floor, false});
        }
      }
    }
  }
  return accepting;
}

}  // namespace tessera::grammar

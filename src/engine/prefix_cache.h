// tessera engine: the prefix cache: full KV pages indexed by chained hashes, so that a request
// whose prompt starts like an earlier one reuses those pages instead of recomputing them.
// Key of page i = XXH3-128(key of page i-1, the page's token ids); the chain starts from a root
// key made of the request's cache namespace (tenants never share entries) and its attention
// layout (diffusion block size: a page's K/V depends on it). Entries also keep the tokens and the
// parent key, so a hit is exact, not just a hash match. Pages themselves live in the PagePool:
// an entry's page is marked cached there, stays after its last user leaves, and is dropped here
// when the pool evicts it (OnEvict).
// Hybrid models (Gated DeltaNet layers) can only resume from a page boundary whose recurrent
// state was saved: a bounded set of state slots holds snapshots attached to entries (LRU).
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera {

class PagePool;

struct PageKey {
  uint64_t lo = 0, hi = 0;
  bool operator==(const PageKey& o) const { return lo == o.lo && hi == o.hi; }
};

struct PageKeyHash {
  size_t operator()(const PageKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)); }
};

class PrefixCache {
 public:
  // `snapshot_slots`: model state-slot ids reserved for snapshots; empty for attention-only
  // models (then no lookup needs a snapshot). Registers itself as the pool's eviction handler.
  PrefixCache(PagePool* pool, std::vector<int32_t> snapshot_slots);

  // router_temperature: a request's MoE router temperature (1: the key of a plain request).
  static PageKey RootKey(const std::string& cache_namespace, int64_t block_size, float router_temperature = 1.f);
  static PageKey ChainKey(const PageKey& parent, const int32_t* tokens, int64_t n);

  bool keeps_snapshots() const { return num_snapshot_slots_ > 0; }

  struct Match {
    std::vector<int32_t> pages;  // cached pages of the prefix, in order (not yet retained)
    int64_t tokens = 0;          // pages.size() * page_size
    int32_t snapshot_slot = -1;  // state at `tokens` (hybrid models), else -1
  };
  // The longest usable cached prefix of `tokens`: `keys[i]` is the key of page i (full pages,
  // chained from `root`); the prefix ends on a page boundary at most `max_tokens` that is a
  // multiple of `align`, and, when snapshots are kept, where a snapshot exists.
  Match Lookup(const PageKey& root, const std::vector<PageKey>& keys, const std::vector<int32_t>& tokens,
               int64_t max_tokens, int64_t align);

  // Records `page` (full, committed, holding `tokens`) under `key`. A key already present keeps
  // its page (the caller's page stays a private copy). Returns true when registered.
  bool Register(const PageKey& parent, const PageKey& key, const int32_t* tokens, int32_t page);

  // A state slot to copy the recurrent state at the end of page `key` into, or -1 when there is
  // no entry for `key`, it already has a snapshot, or snapshots are off. Reuses the least
  // recently used snapshot when all slots are taken.
  int32_t ReserveSnapshot(const PageKey& key);
  bool HasSnapshot(const PageKey& key) const;

  int64_t entries() const { return static_cast<int64_t>(map_.size()); }
  int64_t snapshots() const { return num_snapshot_slots_ - static_cast<int64_t>(free_snapshots_.size()); }

 private:
  struct Entry {
    PageKey parent;
    std::vector<int32_t> tokens;
    int32_t page = -1;
    int32_t snapshot = -1;
    std::list<PageKey>::iterator snapshot_it;  // position in snapshot_lru_ when snapshot >= 0
  };
  void OnEvict(int32_t page);
  void DropSnapshot(Entry& e);

  PagePool* pool_;
  int64_t page_size_;
  int64_t num_snapshot_slots_;
  std::unordered_map<PageKey, Entry, PageKeyHash> map_;
  std::unordered_map<int32_t, PageKey> by_page_;
  std::vector<int32_t> free_snapshots_;
  std::list<PageKey> snapshot_lru_;  // least recently used first
};

}  // namespace tessera

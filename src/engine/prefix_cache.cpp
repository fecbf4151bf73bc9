// tessera engine: PrefixCache implementation (see prefix_cache.h).
#include "engine/prefix_cache.h"

#include <algorithm>

// The state type's layout is public with this macro (a stack state, no allocation per key).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "core/error.h"
#include "engine/page_pool.h"

namespace tessera {

namespace {

PageKey FromXxh(XXH128_hash_t h) { return PageKey{h.low64, h.high64}; }

}  // namespace

PrefixCache::PrefixCache(PagePool* pool, std::vector<int32_t> snapshot_slots)
    : pool_(pool),
      page_size_(pool->page_size()),
      num_snapshot_slots_(static_cast<int64_t>(snapshot_slots.size())),
      free_snapshots_(std::move(snapshot_slots)) {
  pool_->SetEvictionHandler([this](int32_t page) { OnEvict(page); });
}

PageKey PrefixCache::RootKey(const std::string& cache_namespace, int64_t block_size, float router_temperature) {
  // A tag keeps roots apart from page keys; the namespace length keeps ("ab", 1) and ("a", ...)
  // from running together.
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_state_t* st = &state;
  XXH3_128bits_reset(st);
  const char tag[] = "tessera-prefix-root-v1";
  const uint64_t len = cache_namespace.size();
  XXH3_128bits_update(st, tag, sizeof(tag));
  XXH3_128bits_update(st, &len, sizeof(len));
  XXH3_128bits_update(st, cache_namespace.data(), cache_namespace.size());
  XXH3_128bits_update(st, &block_size, sizeof(block_size));
  // Only a temperature other than 1 is mixed in, so plain requests keep the keys they always had.
  if (router_temperature != 1.f) {
    const char rt[] = "router-temperature";
    XXH3_128bits_update(st, rt, sizeof(rt));
    XXH3_128bits_update(st, &router_temperature, sizeof(router_temperature));
  }
  return FromXxh(XXH3_128bits_digest(st));
}

PageKey PrefixCache::ChainKey(const PageKey& parent, const int32_t* tokens, int64_t n) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_state_t* st = &state;
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, &parent.lo, sizeof(parent.lo));
  XXH3_128bits_update(st, &parent.hi, sizeof(parent.hi));
  XXH3_128bits_update(st, tokens, static_cast<size_t>(n) * sizeof(int32_t));
  return FromXxh(XXH3_128bits_digest(st));
}

PrefixCache::Match PrefixCache::Lookup(const PageKey& root, const std::vector<PageKey>& keys,
                                       const std::vector<int32_t>& tokens, int64_t max_tokens, int64_t align) {
  Match m;
  align = std::max<int64_t>(align, 1);
  // Walk the chain while entries match exactly; remember the deepest usable boundary.
  std::vector<int32_t> run;
  size_t usable = 0;
  int32_t usable_snapshot = -1;
  const PageKey* parent = &root;
  for (size_t i = 0; i < keys.size(); ++i) {
    const int64_t end = static_cast<int64_t>(i + 1) * page_size_;
    if (end > max_tokens || end > static_cast<int64_t>(tokens.size())) break;
    auto it = map_.find(keys[i]);
    if (it == map_.end()) break;
    const Entry& e = it->second;
    if (!(e.parent == *parent) ||
        !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin() + end - page_size_))
      break;
    run.push_back(e.page);
    parent = &keys[i];
    if (end % align != 0) continue;
    if (keeps_snapshots() && e.snapshot < 0) continue;
    usable = run.size();
    usable_snapshot = e.snapshot;
  }
  m.pages.assign(run.begin(), run.begin() + usable);
  m.tokens = static_cast<int64_t>(usable) * page_size_;
  m.snapshot_slot = usable_snapshot;
  if (usable > 0 && usable_snapshot >= 0) {
    // A used snapshot becomes the most recently used.
    Entry& e = map_.at(keys[usable - 1]);
    snapshot_lru_.splice(snapshot_lru_.end(), snapshot_lru_, e.snapshot_it);
  }
  return m;
}

bool PrefixCache::Register(const PageKey& parent, const PageKey& key, const int32_t* tokens, int32_t page) {
  if (map_.count(key)) return false;
  if (by_page_.count(page)) return false;  // the page already holds another entry (cannot happen)
  Entry e;
  e.parent = parent;
  e.tokens.assign(tokens, tokens + page_size_);
  e.page = page;
  map_.emplace(key, std::move(e));
  by_page_.emplace(page, key);
  pool_->MarkCached(page);
  return true;
}

bool PrefixCache::HasSnapshot(const PageKey& key) const {
  auto it = map_.find(key);
  return it != map_.end() && it->second.snapshot >= 0;
}

int32_t PrefixCache::ReserveSnapshot(const PageKey& key) {
  if (!keeps_snapshots()) return -1;
  auto it = map_.find(key);
  if (it == map_.end() || it->second.snapshot >= 0) return -1;
  if (free_snapshots_.empty()) {
    // Take the least recently used snapshot over.
    TESSERA_CHECK(!snapshot_lru_.empty());
    DropSnapshot(map_.at(snapshot_lru_.front()));
  }
  Entry& e = it->second;
  e.snapshot = free_snapshots_.back();
  free_snapshots_.pop_back();
  e.snapshot_it = snapshot_lru_.insert(snapshot_lru_.end(), key);
  return e.snapshot;
}

void PrefixCache::DropSnapshot(Entry& e) {
  if (e.snapshot < 0) return;
  free_snapshots_.push_back(e.snapshot);
  snapshot_lru_.erase(e.snapshot_it);
  e.snapshot = -1;
}

void PrefixCache::OnEvict(int32_t page) {
  auto it = by_page_.find(page);
  if (it == by_page_.end()) return;
  auto e = map_.find(it->second);
  if (e != map_.end()) {
    DropSnapshot(e->second);
    map_.erase(e);
  }
  by_page_.erase(it);
}

}  // namespace tessera

// tessera engine: PagePool implementation (see page_pool.h).
#include "engine/page_pool.h"

#include "core/error.h"

namespace tessera {

PagePool::PagePool(int64_t num_pages, int64_t page_size, int64_t num_state_slots)
    : page_size_(page_size), num_state_slots_(num_state_slots), refcount_(num_pages, 0), lru_pos_(num_pages) {
  TESSERA_CHECK(page_size > 0 && num_pages >= 0 && num_state_slots >= 0);
  // Hand out low ids first (pop from the back).
  for (int64_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  for (int64_t s = num_state_slots - 1; s >= 0; --s) free_slots_.push_back(static_cast<int32_t>(s));
}

void PagePool::CheckPage(int32_t page) const { TESSERA_CHECK(page >= 0 && page < num_pages()); }

int32_t PagePool::AllocatePage() {
  int32_t p = -1;
  if (!free_pages_.empty()) {
    p = free_pages_.back();
    free_pages_.pop_back();
  } else if (!lru_.empty()) {
    p = lru_.front();
    lru_.pop_front();
    lru_pos_[p] = LruPos{};
    if (on_evict_) on_evict_(p);
  } else {
    return -1;
  }
  refcount_[p] = 1;
  return p;
}

void PagePool::Retain(int32_t page) {
  CheckPage(page);
  LruPos& pos = lru_pos_[page];
  if (refcount_[page] == 0) {
    // Only a cached page can be revived; a plain free page has no content worth sharing.
    TESSERA_CHECK(pos.in_lru);
    lru_.erase(pos.it);
    pos.in_lru = false;
  }
  ++refcount_[page];
}

void PagePool::Release(int32_t page) {
  CheckPage(page);
  TESSERA_CHECK(refcount_[page] > 0);
  if (--refcount_[page] > 0) return;
  LruPos& pos = lru_pos_[page];
  if (pos.cached) {
    pos.it = lru_.insert(lru_.end(), page);
    pos.in_lru = true;
  } else {
    free_pages_.push_back(page);
  }
}

void PagePool::MarkCached(int32_t page) {
  CheckPage(page);
  TESSERA_CHECK(refcount_[page] > 0);
  lru_pos_[page].cached = true;
}

int32_t PagePool::AllocateStateSlot() {
  if (free_slots_.empty()) return -1;
  int32_t s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

void PagePool::ReleaseStateSlot(int32_t slot) {
  TESSERA_CHECK(slot >= 0 && slot < num_state_slots_);
  free_slots_.push_back(slot);
}

}  // namespace tessera

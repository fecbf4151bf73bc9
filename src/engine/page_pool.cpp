// tessera engine: PagePool implementation (see page_pool.h).
#include "engine/page_pool.h"

#include "core/error.h"

namespace tessera {

PagePool::PagePool(int64_t num_pages, int64_t page_size, int64_t num_state_slots)
    : page_size_(page_size), num_state_slots_(num_state_slots), refcount_(num_pages, 0) {
  TESSERA_CHECK(page_size > 0 && num_pages >= 0 && num_state_slots >= 0);
  // Hand out low ids first (pop from the back).
  for (int64_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  for (int64_t s = num_state_slots - 1; s >= 0; --s) free_slots_.push_back(static_cast<int32_t>(s));
}

int32_t PagePool::AllocatePage() {
  if (free_pages_.empty()) return -1;
  int32_t p = free_pages_.back();
  free_pages_.pop_back();
  refcount_[p] = 1;
  return p;
}

void PagePool::Retain(int32_t page) {
  TESSERA_CHECK(page >= 0 && page < num_pages() && refcount_[page] > 0);
  ++refcount_[page];
}

void PagePool::Release(int32_t page) {
  TESSERA_CHECK(page >= 0 && page < num_pages() && refcount_[page] > 0);
  if (--refcount_[page] == 0) free_pages_.push_back(page);
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

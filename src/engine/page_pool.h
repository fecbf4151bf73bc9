// tessera engine: the pool of KV-cache pages and recurrent-state slots the model's caches hold.
// Pages are reference counted so that a prefix-cache entry and several sequences can share one;
// state slots belong to one sequence at a time. All calls come from the engine thread.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

class PagePool {
 public:
  PagePool(int64_t num_pages, int64_t page_size, int64_t num_state_slots);

  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return static_cast<int64_t>(refcount_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  int64_t used_pages() const { return num_pages() - free_pages(); }
  int64_t free_state_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  int64_t num_state_slots() const { return num_state_slots_; }

  int64_t PagesFor(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

  // Returns -1 when the pool is empty.
  int32_t AllocatePage();
  void Retain(int32_t page);
  void Release(int32_t page);
  int32_t refcount(int32_t page) const { return refcount_[page]; }

  int32_t AllocateStateSlot();  // -1 when none is free
  void ReleaseStateSlot(int32_t slot);

 private:
  int64_t page_size_;
  int64_t num_state_slots_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_pages_;
  std::vector<int32_t> free_slots_;
};

}  // namespace tessera

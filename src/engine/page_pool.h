// tessera engine: the pool of KV-cache pages and recurrent-state slots the model's caches hold.
// Pages are reference counted so that several sequences can share one (prefix caching). A page
// marked cached keeps its content when its last user releases it: it waits in an LRU list and
// is reused only when no plain free page is left, at which point the eviction handler hears of
// it (so the prefix cache drops its entry). Cached pages nobody uses count as free. State slots
// belong to one sequence at a time. All calls come from the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <vector>

namespace tessera {

class PagePool {
 public:
  PagePool(int64_t num_pages, int64_t page_size, int64_t num_state_slots);

  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return static_cast<int64_t>(refcount_.size()); }
  // Pages an allocation can get: plain free pages plus unused cached pages (evictable).
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size() + lru_.size()); }
  int64_t used_pages() const { return num_pages() - free_pages(); }
  // Unused pages that still hold prefix-cache content.
  int64_t cached_free_pages() const { return static_cast<int64_t>(lru_.size()); }
  int64_t free_state_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  int64_t num_state_slots() const { return num_state_slots_; }

  int64_t PagesFor(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

  // Returns -1 when the pool is empty. Takes a plain free page first, else evicts the least
  // recently released cached page (calling the eviction handler with its id first).
  int32_t AllocatePage();
  // Adds a user; a cached page nobody used comes back out of the LRU list.
  void Retain(int32_t page);
  void Release(int32_t page);
  int32_t refcount(int32_t page) const { return refcount_[page]; }

  // Marks a page in use as holding prefix-cache content (kept after its last release).
  void MarkCached(int32_t page);
  bool cached(int32_t page) const { return lru_pos_[page].cached; }
  void SetEvictionHandler(std::function<void(int32_t page)> handler) { on_evict_ = std::move(handler); }

  int32_t AllocateStateSlot();  // -1 when none is free
  void ReleaseStateSlot(int32_t slot);

 private:
  struct LruPos {
    bool cached = false;      // holds prefix-cache content
    bool in_lru = false;      // ... and unused (waiting in lru_)
    std::list<int32_t>::iterator it;
  };
  void CheckPage(int32_t page) const;

  int64_t page_size_;
  int64_t num_state_slots_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_pages_;
  std::list<int32_t> lru_;            // unused cached pages, least recently released first
  std::vector<LruPos> lru_pos_;
  std::function<void(int32_t)> on_evict_;
  std::vector<int32_t> free_slots_;
};

}  // namespace tessera

// tessera engine: the Engine's use of the prefix cache (prefix_cache.h): at admission a sequence
// shares the longest usable run of cached full pages and starts its prefill after them; after
// each forward its newly committed full pages are offered to the cache. Hybrid models resume
// only from a page boundary whose recurrent state was snapshotted: the planner ends a prompt
// chunk on the prompt's last such boundary, and the state there is copied to a snapshot slot.
// Diffusion requests only count committed (block-aligned) positions, so a page holding masks
// or a block still being denoised is never offered.
#include <numeric>

#include "engine/engine.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace tessera {

namespace {

// Cached prefixes end on multiples of this: pages, and for diffusion also whole blocks (a
// block-causal chunk must start and end on block boundaries).
int64_t PrefixAlign(const Sequence& s, int64_t page_size) {
  return s.diffusion ? std::lcm(page_size, s.diffusion->block_size()) : page_size;
}

// Positions the sequence must have committed before it produces output again: for an
// autoregressive sequence all tokens but the last (whose logits are wanted, so at least one
// token is always computed); for diffusion the committed blocks before the current one.
int64_t CommitLimit(const Sequence& s) {
  return s.diffusion ? s.diffusion->block_start() : static_cast<int64_t>(s.tokens.size()) - 1;
}

}  // namespace

bool Engine::PromptShareable(const Sequence& s) const {
  return prefix_cache_ && CommitLimit(s) >= PrefixAlign(s, pool_->page_size());
}

void Engine::ExtendPageKeys(Sequence& s, int64_t pages) {
  const int64_t ps = pool_->page_size();
  // The router temperature changes every layer's K/V after the first MoE layer: part of the root.
  if (s.page_keys.empty() && pages > 0)
    s.cache_root =
        PrefixCache::RootKey(s.req.cache_namespace, s.diffusion ? s.diffusion->block_size() : 0, s.router_temperature);
  while (static_cast<int64_t>(s.page_keys.size()) < pages) {
    const int64_t i = static_cast<int64_t>(s.page_keys.size());
    const PageKey& parent = i == 0 ? s.cache_root : s.page_keys[i - 1];
    s.page_keys.push_back(PrefixCache::ChainKey(parent, s.tokens.data() + i * ps, ps));
  }
}

PrefixCache::Match Engine::AttachCachedPrefix(Sequence& s) {
  const int64_t ps = pool_->page_size();
  const int64_t limit = CommitLimit(s);
  ExtendPageKeys(s, std::max<int64_t>(limit, 0) / ps);
  PrefixCache::Match hit = prefix_cache_->Lookup(s.cache_root, s.page_keys, s.tokens, limit, PrefixAlign(s, ps));
  for (int32_t p : hit.pages) pool_->Retain(p);
  s.cache.pages = hit.pages;
  s.num_cached = hit.tokens;
  s.pages_registered = static_cast<int64_t>(hit.pages.size());
  return hit;
}

void Engine::RollbackPrefix(Sequence& s) {
  for (auto it = s.cache.pages.rbegin(); it != s.cache.pages.rend(); ++it) pool_->Release(*it);
  s.cache.pages.clear();
  s.num_cached = 0;
  s.pages_registered = 0;
}

void Engine::PlanSnapshot(Sequence& s) {
  s.snapshot_at = -1;
  if (!prefix_cache_ || !prefix_cache_->keeps_snapshots()) return;
  // The deepest boundary a repeat of this prompt could resume from (the prompt, or the whole
  // sequence after a preemption); a follow-up request (the next chat turn) shares it too.
  const int64_t align = PrefixAlign(s, pool_->page_size());
  const int64_t at = (std::max<int64_t>(CommitLimit(s), 0) / align) * align;
  if (at > s.num_cached) s.snapshot_at = at;
}

void Engine::OnCommitted(Sequence& s) {
  const int64_t ps = pool_->page_size();
  const int64_t full = std::min<int64_t>(s.num_cached / ps, static_cast<int64_t>(s.cache.pages.size()));
  if (full > s.pages_registered) {
    ExtendPageKeys(s, full);
    for (int64_t i = s.pages_registered; i < full; ++i) {
      const PageKey& parent = i == 0 ? s.cache_root : s.page_keys[i - 1];
      prefix_cache_->Register(parent, s.page_keys[i], s.tokens.data() + i * ps, s.cache.pages[i]);
    }
    s.pages_registered = full;
  }
  if (s.snapshot_at > 0 && s.num_cached == s.snapshot_at) {
    s.snapshot_at = -1;
    const int32_t slot = prefix_cache_->ReserveSnapshot(s.page_keys[s.num_cached / ps - 1]);
    if (slot >= 0) model_->CopyStateSlot(s.cache.state_slot, slot);
  }
}

}  // namespace tessera

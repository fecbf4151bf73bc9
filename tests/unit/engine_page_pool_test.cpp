// tessera tests: the page pool's cached-page LRU and the prefix cache's bookkeeping, without a
// model: cached pages count as free and are evicted only when no plain page is left (oldest
// release first, the cache hearing of it), lookups walk exact chains and stop at alignment and
// snapshot rules, snapshots are bounded and reused least recently used first.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "engine/page_pool.h"
#include "engine/prefix_cache.h"

namespace tessera {
namespace {

std::vector<int32_t> Range(int32_t from, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

// Keys of the full pages of `tokens` under `root`.
std::vector<PageKey> Keys(const PageKey& root, const std::vector<int32_t>& tokens, int64_t page) {
  std::vector<PageKey> keys;
  for (size_t i = 0; (i + 1) * page <= tokens.size(); ++i)
    keys.push_back(PrefixCache::ChainKey(i == 0 ? root : keys.back(), tokens.data() + i * page, page));
  return keys;
}

TEST(EnginePagePool, CachedPagesAreFreeButEvictedLast) {
  PagePool pool(4, 2, 0);
  std::vector<int32_t> evicted;
  pool.SetEvictionHandler([&](int32_t p) { evicted.push_back(p); });
  int32_t a = pool.AllocatePage(), b = pool.AllocatePage(), c = pool.AllocatePage();
  pool.MarkCached(a);
  pool.MarkCached(b);
  pool.Release(b);
  pool.Release(a);
  pool.Release(c);
  EXPECT_EQ(pool.free_pages(), 4);
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_EQ(pool.cached_free_pages(), 2);
  // Plain pages go first; then the cached ones in release order (b before a).
  int32_t p1 = pool.AllocatePage(), p2 = pool.AllocatePage();
  EXPECT_NE(p1, a);
  EXPECT_NE(p1, b);
  EXPECT_NE(p2, a);
  EXPECT_NE(p2, b);
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(pool.AllocatePage(), b);
  EXPECT_EQ(evicted, std::vector<int32_t>{b});
  EXPECT_FALSE(pool.cached(b));
  // A cached page revived by a new user leaves the LRU and is not evicted.
  pool.Retain(a);
  EXPECT_EQ(pool.cached_free_pages(), 0);
  EXPECT_EQ(pool.AllocatePage(), -1);
  EXPECT_EQ(evicted.size(), 1u);
  pool.Release(a);
  EXPECT_EQ(pool.free_pages(), 1);
  // A plain free page cannot be retained (its content is gone).
  pool.Release(p1);
  EXPECT_THROW(pool.Retain(p1), Error);
}

TEST(EnginePrefixCache, LookupFindsTheLongestExactRun) {
  const int64_t page = 4;
  PagePool pool(16, page, 0);
  PrefixCache cache(&pool, {});
  const PageKey root = PrefixCache::RootKey("tenant", 0);
  const auto tokens = Range(100, 14);  // 3 full pages
  const auto keys = Keys(root, tokens, page);
  ASSERT_EQ(keys.size(), 3u);
  std::vector<int32_t> pages;
  for (size_t i = 0; i < keys.size(); ++i) {
    pages.push_back(pool.AllocatePage());
    EXPECT_TRUE(cache.Register(i == 0 ? root : keys[i - 1], keys[i], tokens.data() + i * page, pages.back()));
  }
  // The same key twice keeps the first page.
  int32_t dup = pool.AllocatePage();
  EXPECT_FALSE(cache.Register(root, keys[0], tokens.data(), dup));
  EXPECT_FALSE(pool.cached(dup));
  EXPECT_EQ(cache.entries(), 3);

  auto m = cache.Lookup(root, keys, tokens, 13, 1);
  EXPECT_EQ(m.pages, pages);
  EXPECT_EQ(m.tokens, 12);
  // Bounded by max_tokens and by the alignment (8: two pages).
  EXPECT_EQ(cache.Lookup(root, keys, tokens, 11, 1).tokens, 8);
  EXPECT_EQ(cache.Lookup(root, keys, tokens, 13, 8).tokens, 8);
  // Another namespace or block layout: nothing.
  const PageKey other = PrefixCache::RootKey("other", 0);
  EXPECT_EQ(cache.Lookup(other, Keys(other, tokens, page), tokens, 13, 1).tokens, 0);
  const PageKey blocks = PrefixCache::RootKey("tenant", 8);
  EXPECT_EQ(cache.Lookup(blocks, Keys(blocks, tokens, page), tokens, 13, 1).tokens, 0);
  // A different second page: only the first matches.
  auto changed = tokens;
  changed[5] = 7;
  EXPECT_EQ(cache.Lookup(root, Keys(root, changed, page), changed, 13, 1).tokens, 4);
  // Keys that claim a match but tokens that differ (a forged or colliding key): no hit.
  EXPECT_EQ(cache.Lookup(root, keys, changed, 13, 1).tokens, 4);

  // Evicting the middle page cuts the chain there.
  for (int32_t p : pages) pool.Release(p);
  pool.Release(dup);
  while (pool.free_pages() > pool.cached_free_pages()) pool.AllocatePage();  // use up plain pages
  EXPECT_EQ(pool.AllocatePage(), pages[0]);  // released first, evicted first
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.Lookup(root, keys, tokens, 13, 1).tokens, 0);
}

TEST(EnginePrefixCache, SnapshotsAreBoundedAndGateTheUsablePrefix) {
  const int64_t page = 2;
  PagePool pool(8, page, 0);
  PrefixCache cache(&pool, {5, 6});  // two snapshot slots
  ASSERT_TRUE(cache.keeps_snapshots());
  const PageKey root = PrefixCache::RootKey("", 0);
  const auto tokens = Range(1, 8);
  const auto keys = Keys(root, tokens, page);
  for (size_t i = 0; i < keys.size(); ++i)
    cache.Register(i == 0 ? root : keys[i - 1], keys[i], tokens.data() + i * page, pool.AllocatePage());
  // No snapshot yet: nothing is usable.
  EXPECT_EQ(cache.Lookup(root, keys, tokens, 8, 1).tokens, 0);
  int32_t s1 = cache.ReserveSnapshot(keys[1]);  // state at 4
  EXPECT_GE(s1, 5);
  EXPECT_EQ(cache.ReserveSnapshot(keys[1]), -1);  // already has one
  auto m = cache.Lookup(root, keys, tokens, 8, 1);
  EXPECT_EQ(m.tokens, 4);
  EXPECT_EQ(m.snapshot_slot, s1);
  int32_t s2 = cache.ReserveSnapshot(keys[3]);  // state at 8
  EXPECT_NE(s2, s1);
  EXPECT_EQ(cache.Lookup(root, keys, tokens, 8, 1).tokens, 8);
  EXPECT_EQ(cache.Lookup(root, keys, tokens, 7, 1).tokens, 4);
  EXPECT_EQ(cache.snapshots(), 2);
  // A third snapshot takes over the least recently used one: keys[1] was used by the lookup
  // just above, so keys[3]'s goes.
  int32_t s3 = cache.ReserveSnapshot(keys[0]);
  EXPECT_EQ(s3, s2);
  EXPECT_TRUE(cache.HasSnapshot(keys[1]));
  EXPECT_FALSE(cache.HasSnapshot(keys[3]));
  EXPECT_EQ(cache.Lookup(root, keys, tokens, 8, 1).tokens, 4);
  EXPECT_EQ(cache.ReserveSnapshot(PrefixCache::RootKey("nobody", 0)), -1);
}

TEST(EnginePrefixCache, EvictingAPageFreesItsSnapshot) {
  const int64_t page = 2;
  PagePool pool(2, page, 0);
  PrefixCache cache(&pool, {3});
  const PageKey root = PrefixCache::RootKey("", 0);
  const auto tokens = Range(1, 4);
  const auto keys = Keys(root, tokens, page);
  int32_t p0 = pool.AllocatePage(), p1 = pool.AllocatePage();
  cache.Register(root, keys[0], tokens.data(), p0);
  cache.Register(keys[0], keys[1], tokens.data() + 2, p1);
  EXPECT_EQ(cache.ReserveSnapshot(keys[1]), 3);
  pool.Release(p0);
  pool.Release(p1);
  EXPECT_EQ(pool.AllocatePage(), p0);
  EXPECT_EQ(pool.AllocatePage(), p1);
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.snapshots(), 0);
}

}  // namespace
}  // namespace tessera

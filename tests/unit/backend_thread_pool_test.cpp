// tessera tests: core/thread_pool.h, the CPU kernels' pool: every index of every loop runs exactly
// once on a thread index of its own chunk, through both hand-off paths (spinning, back-to-back loops;
// sleeping, loops more than the spin time apart), with pools larger than the machine (no spinning)
// and several callers taking turns. A lost wake-up would hang the test (ctest's timeout fails it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace tessera {
namespace {

// One loop of n over `pool`: each index counted once, chunks contiguous and tagged with distinct
// thread indices below the pool's size.
void CheckLoop(ThreadPool& pool, size_t n, size_t grain) {
  std::vector<std::atomic<int>> hits(n);
  std::vector<std::atomic<int>> by_thread(pool.size());
  pool.ParallelFor(
      n,
      [&](size_t b, size_t e, int t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, pool.size());
        ASSERT_LT(b, e);
        by_thread[t].fetch_add(1);
        for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      },
      grain);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
  for (int t = 0; t < pool.size(); ++t) ASSERT_LE(by_thread[t].load(), 1) << "thread " << t << " ran two chunks";
}

TEST(ThreadPool, EveryIndexOnceForAnySizeAndGrain) {
  for (int threads : {1, 2, 3, 8, 64}) {  // 64: more than this machine's cores, so no spinning
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{1000}, size_t{4097}})
      for (size_t grain : {size_t{1}, size_t{3}, size_t{256}}) CheckLoop(pool, n, grain);
  }
}

TEST(ThreadPool, BackToBackAndSpacedLoopsAllComplete) {
  ThreadPool pool(4);
  std::atomic<long> sum{0};
  for (int i = 0; i < 20000; ++i) {  // back to back: the workers are still spinning
    pool.ParallelFor(8, [&](size_t b, size_t e, int) { sum.fetch_add(static_cast<long>(e - b)); });
  }
  EXPECT_EQ(sum.load(), 20000L * 8);
  sum = 0;
  for (int i = 0; i < 200; ++i) {  // spaced past the spin time: every hand-off wakes sleepers
    std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadPool::kSpinMicros));
    pool.ParallelFor(8, [&](size_t b, size_t e, int t) {
      // A slow chunk on a worker: the caller finishes first and has to sleep for it.
      if (t != 0) std::this_thread::sleep_for(std::chrono::microseconds(2 * ThreadPool::kSpinMicros));
      sum.fetch_add(static_cast<long>(e - b));
    });
  }
  EXPECT_EQ(sum.load(), 200L * 8);
}

TEST(ThreadPool, CallersFromSeveralThreadsTakeTurns) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < 2000; ++i) {
        const size_t n = 10 + static_cast<size_t>((c * 7 + i) % 50);
        std::vector<int> hits(n, 0);  // written by disjoint chunks only
        pool.ParallelFor(n, [&](size_t b, size_t e, int) {
          for (size_t j = b; j < e; ++j) ++hits[j];
        });
        for (int h : hits) bad += h != 1;
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace tessera

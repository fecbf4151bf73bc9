// tessera tests: the CUDA kernels' key range of an attention row (src/backend/cuda/cuda_attention_mask.h,
// host and device code) against the CPU backend's Attention itself, on every machine (no GPU needed):
// with zero queries every visible key gets the same weight, and with V row j the unit vector e_j the
// output row is 1/n on exactly the keys the row sees. So the set the CPU backend attends is read off
// its output and must be the kernels' [first, last] for causal, block-causal, sliding-window and
// DiffusionGemma canvas rows (with and without a window, with committed rows before the canvas, from
// position 0 and after a paged prefix). The GPU tests (CudaAttention.SlidingWindowAndCanvasRows) then
// hold the kernels to the CPU's numbers.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_attention_mask.h"

namespace tessera {
namespace {

struct MaskCase {
  int64_t first_pos, T, block, window, canvas;
};

std::string Name(const MaskCase& c) {
  return "first_pos=" + std::to_string(c.first_pos) + " T=" + std::to_string(c.T) + " block=" +
         std::to_string(c.block) + " window=" + std::to_string(c.window) + " canvas=" + std::to_string(c.canvas);
}

TEST(CudaAttentionMask, KeyRangeIsWhatTheCpuBackendAttends) {
  constexpr int64_t kPage = 4;
  std::vector<MaskCase> cases;
  for (int64_t first_pos : {0, 3, 9, 14})
    for (int64_t T : {1, 5, 12})
      for (int64_t window : {0, 1, 2, 5, 40}) {
        cases.push_back({first_pos, T, 0, window, -1});                     // causal (windowed)
        for (int64_t canvas = 0; canvas < T; canvas += 2) cases.push_back({first_pos, T, 0, window, canvas});
        if (window == 0)
          for (int64_t block : {1, 4, 8}) cases.push_back({first_pos, T, block, 0, -1});  // block-causal
      }
  auto cpu = MakeCpuBackend();
  for (const MaskCase& c : cases) {
    const int64_t total = c.first_pos + c.T, D = total;  // one value dim per key
    std::vector<int32_t> pages;
    for (int64_t p = 0; p * kPage < total; ++p) pages.push_back(static_cast<int32_t>(p));
    const int64_t cache_rows = static_cast<int64_t>(pages.size()) * kPage;
    std::vector<float> kc(cache_rows * D, 0.5f), vc(cache_rows * D, 0.0f);
    for (int64_t j = 0; j < c.first_pos; ++j) vc[j * D + j] = 1.0f;  // page p holds positions p*4.. (identity table)
    std::vector<float> q(c.T * D, 0.0f), k(c.T * D, 0.5f), v(c.T * D, 0.0f), out(c.T * D, -1.0f);
    for (int64_t t = 0; t < c.T; ++t) v[t * D + c.first_pos + t] = 1.0f;
    AttentionArgs a;
    a.q = q.data();
    a.q_stride = D;
    a.k = k.data();
    a.v = v.data();
    a.kv_stride = D;
    a.T = c.T;
    a.num_heads = a.num_kv_heads = 1;
    a.head_dim = D;
    a.first_pos = c.first_pos;
    a.k_cache = kc.data();
    a.v_cache = vc.data();
    a.pages = pages.data();
    a.page_size = kPage;
    a.block_size = c.block;
    a.sliding_window = c.window;
    a.canvas_begin = c.canvas;
    a.out = out.data();
    a.out_stride = D;
    cpu->Attention(a);
    for (int64_t t = 0; t < c.T; ++t) {
      const cuda::KeyRange r = cuda::AttentionKeyRange(c.first_pos, c.T, c.block, c.window, c.canvas, t);
      ASSERT_LE(r.first, r.last) << Name(c) << " row " << t;
      for (int64_t j = 0; j < total; ++j) {
        const bool cpu_sees = out[t * D + j] > 0.0f;
        EXPECT_EQ(cpu_sees, j >= r.first && j <= r.last)
            << Name(c) << " row " << t << " key " << j << " (kernels' range [" << r.first << ", " << r.last << "])";
      }
    }
  }
}

// The rule of docs/DIFFUSION_GEMMA.md 3.2 at the published shape, by hand: a 256-row canvas after 5,000
// committed tokens in a sliding layer (W 1024) sees keys 3,977 .. 5,255 from every row; a commit row
// just before it sees its own window only.
TEST(CudaAttentionMask, CanvasRuleAtThePublishedShape) {
  const int64_t L = 5000, C = 256, W = 1024;
  for (int64_t t : {int64_t{0}, C / 2, C - 1}) {
    const cuda::KeyRange r = cuda::AttentionKeyRange(L, C, 0, W, 0, t);
    EXPECT_EQ(r.first, L - (W - 1));
    EXPECT_EQ(r.last, L + C - 1);
  }
  const cuda::KeyRange g = cuda::AttentionKeyRange(L, C, 0, 0, 0, 7);  // a global layer: everything
  EXPECT_EQ(g.first, 0);
  EXPECT_EQ(g.last, L + C - 1);
  const cuda::KeyRange commit = cuda::AttentionKeyRange(L - 4, 4 + C, 0, W, 4, 3);  // last committed row
  EXPECT_EQ(commit.first, L - 1 - (W - 1));
  EXPECT_EQ(commit.last, L - 1);
}

}  // namespace
}  // namespace tessera

// tessera tests: Model::Forward computes a step's logits rows Model::kLogitsChunkRows at a time (one
// lm_head product a chunk into one reused buffer). Steps of more rows than a chunk, whose chunk
// boundaries cut through each kind of row, must give every row what a step of that row's sequence
// alone gives (one chunk): full rows (logits to the host) on the tiny Qwen3 MoE checkpoint, greedy
// sampled rows on it, and DiffusionGemma canvas rows (picks and the next self-conditioning input) on
// the tiny numpy-made checkpoint. Each sequence differs from the others (tokens, draws, inputs), so a
// row read from the wrong place of a chunk shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dgemma_checkpoint.h"
#include "model/model.h"
#include "model_segment.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::Seg;

std::vector<int32_t> Ids(int64_t n, int32_t vocab, int32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 37 + seed * 101 + 11) % (vocab - 10) + 5);
  return ids;
}

double MaxDiff(const float* a, const float* b, int64_t n) {
  double d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// Rows [0, 2100) of one prompt as full rows (two chunks, the second from row 2048), against the rows'
// logits from steps of 60 rows; then 2 x 1,100 greedy sampled rows (the second sequence's rows cross
// the chunk boundary, each under a mask allowing every third token: Segment::sample_masks) against the
// argmax of the same rows' logits (over the allowed tokens).
TEST(ModelLogitsChunks, FullAndSampledRowsAcrossChunks) {
  ASSERT_EQ(Model::kLogitsChunkRows, 2048);
  auto m = Model::Load(testing::DataPath("fixtures/models/qwen3_moe"));
  const int64_t V = m->config().vocab_size, T = 2100;
  const std::vector<int32_t> ids = Ids(T, static_cast<int32_t>(V), 1);
  Batch all;
  all.segments.push_back(Seg(nullptr, 0, ids, T, true));
  const ForwardResult big = m->Forward(all);
  ASSERT_EQ(static_cast<int64_t>(big.logits.size()), T * V);
  for (const int64_t from : {int64_t{0}, int64_t{1990}, int64_t{2040}}) {  // before, across, after row 2048
    Batch few;
    few.segments.push_back(Seg(nullptr, 0, ids, T, false));
    few.segments[0].logits_rows.clear();
    for (int64_t r = from; r < from + 60; ++r) few.segments[0].logits_rows.push_back(static_cast<int32_t>(r));
    const ForwardResult small = m->Forward(few);
    EXPECT_LE(MaxDiff(small.logits.data(), big.logits.data() + from * V, 60 * V), 1e-5) << "rows from " << from;
  }
  // Sampled rows: two sequences of 1,100 rows each, every row greedy.
  Batch sampled;
  const int64_t W = (V + 31) / 32;
  auto allowed = [](int64_t t) { return t % 3 == 0; };
  for (int32_t q = 0; q < 2; ++q) {
    sampled.segments.push_back(Seg(nullptr, 0, Ids(1100, static_cast<int32_t>(V), 2 + q), 1100, true));
    sampled.segments.back().sample.assign(1100, RowSampling{});
  }
  std::vector<uint32_t>& masks = sampled.segments[1].sample_masks;
  masks.assign(static_cast<size_t>(1100 * W), 0u);
  for (int64_t r = 0; r < 1100; ++r)
    for (int64_t t = 0; t < V; ++t)
      if (allowed(t)) masks[r * W + t / 32] |= 1u << (t % 32);
  const ForwardResult picks = m->Forward(sampled);
  ASSERT_EQ(picks.picks.size(), 2200u);
  for (int32_t q = 0; q < 2; ++q) {
    Batch one;
    one.segments.push_back(Seg(nullptr, 0, Ids(1100, static_cast<int32_t>(V), 2 + q), 1100, true));
    const ForwardResult r = m->Forward(one);
    int mismatches = 0;
    for (int64_t t = 0; t < 1100; ++t) {
      const float* row = r.logits.data() + t * V;
      int32_t want = -1;
      for (int64_t i = 0; i < V; ++i)
        if ((q == 0 || allowed(i)) && (want < 0 || row[i] > row[want])) want = static_cast<int32_t>(i);
      mismatches += picks.picks[q * 1100 + t].token != want;
    }
    EXPECT_EQ(mismatches, 0) << "sequence " << q;
  }
}

// 130 canvases of 16 rows (2,080 canvas rows: the last chunk holds 32 rows, the boundary inside
// canvas 128), each with its own canvas tokens, draws and self-conditioning input, stateless (prompt and
// canvas in one segment); every canvas's picks and next input against the same canvas stepped alone.
TEST(ModelLogitsChunks, CanvasRowsAcrossChunks) {
  auto m = Model::Load(testing::DgemmaSelfcheckDir());
  const int64_t V = m->config().vocab_size, H = m->config().hidden_size, C = m->config().canvas_length;
  ASSERT_EQ(C, 16);
  const int64_t P = 12, N = 130;
  auto canvas = [&](int64_t i) {
    Segment s = Seg(nullptr, 0, Ids(P + C, static_cast<int32_t>(V), static_cast<int32_t>(i)), P, false);
    s.logits_rows.clear();
    for (int64_t t = 0; t < C; ++t) {
      s.logits_rows.push_back(static_cast<int32_t>(P + t));
      s.canvas_sample.push_back({0.7f, static_cast<double>((t * 37 + i * 11) % 97) / 97.0});
    }
    s.self_conditioning.resize(static_cast<size_t>(C * H));
    for (int64_t k = 0; k < C * H; ++k) s.self_conditioning[k] = 0.01f * static_cast<float>((k * 7 + i * 13) % 29 - 14);
    return s;
  };
  Batch all;
  for (int64_t i = 0; i < N; ++i) all.segments.push_back(canvas(i));
  const ForwardResult big = m->Forward(all);
  ASSERT_EQ(static_cast<int64_t>(big.canvas_picks.size()), N * C);
  ASSERT_EQ(static_cast<int64_t>(big.canvas_soft.size()), N * C * H);
  for (const int64_t i : {int64_t{0}, int64_t{64}, int64_t{127}, int64_t{128}, int64_t{129}}) {
    Batch one;
    one.segments.push_back(canvas(i));
    const ForwardResult r = m->Forward(one);
    for (int64_t t = 0; t < C; ++t) {
      const CanvasRowPick &got = big.canvas_picks[i * C + t], &want = r.canvas_picks[t];
      EXPECT_EQ(got.sampled, want.sampled) << "canvas " << i << " row " << t;
      EXPECT_EQ(got.argmax, want.argmax) << "canvas " << i << " row " << t;
      EXPECT_NEAR(got.entropy, want.entropy, 1e-6) << "canvas " << i << " row " << t;
    }
    EXPECT_LE(MaxDiff(big.canvas_soft.data() + i * C * H, r.canvas_soft.data(), C * H), 1e-5) << "canvas " << i;
  }
}

}  // namespace
}  // namespace tessera

// tessera golden tests: block-diffusion forwards on the qwen3_moe and qwen3_5_moe fixtures
// against HF's block-causal reference (logits_block8.npy): one block-causal forward, commit +
// denoise, fused commit + denoise; denoise segments leave every cache untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/hf_config.h"
#include "io/npy.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;

double MaxDiff(const float* a, const float* b, size_t n) {
  return testing::MaxAbsDiff(a, b, n);
}

bool SameArgmax(const float* a, const float* b, int64_t rows, int64_t V) {
  for (int64_t r = 0; r < rows; ++r)
    if (std::max_element(a + r * V, a + (r + 1) * V) - (a + r * V) !=
        std::max_element(b + r * V, b + (r + 1) * V) - (b + r * V))
      return false;
  return true;
}

class Diffusion : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = Model::Load(DataPath("fixtures/models/" + GetParam()));
    const std::string d = DataPath("fixtures/diffusion/" + GetParam());
    ids_ = ReadJsonFile(d + "/reference.json")["block8_ids"].get<std::vector<int32_t>>();
    want_ = ReadNpy(d + "/logits_block8.npy");
    V_ = model_->config().vocab_size;
    ASSERT_EQ(want_.shape, (std::vector<int64_t>{static_cast<int64_t>(ids_.size()), V_}));
    model_->AllocateCaches(16, 4, 2);
    for (int32_t p = 0; p < 16; ++p) cache_.pages.push_back(p);
    cache_.state_slot = model_->config().NumLayersOf(LayerKind::kLinearAttention) > 0 ? 0 : -1;
    if (cache_.state_slot >= 0) model_->ResetStateSlot(0);
  }
  Segment Seg(int64_t first, int64_t end, int64_t commit_len, bool logits) {
    Segment s;
    s.cache = &cache_;
    s.first_pos = first;
    s.tokens.assign(ids_.begin() + first, ids_.begin() + end);
    s.commit_len = commit_len;
    s.block_size = 8;
    if (logits)
      for (int32_t i = 0; i < end - first; ++i) s.logits_rows.push_back(i);
    return s;
  }
  ForwardResult Fwd(Segment s) {
    Batch b;
    b.segments.push_back(std::move(s));
    return model_->Forward(b);
  }
  void ExpectRows(const ForwardResult& r, int64_t first_row, int64_t rows) {
    ASSERT_EQ(static_cast<int64_t>(r.logits.size()), rows * V_);
    const float* want = want_.data.data() + first_row * V_;
    EXPECT_LT(MaxDiff(r.logits.data(), want, rows * V_), 1e-3);
    EXPECT_TRUE(SameArgmax(r.logits.data(), want, rows, V_));
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_;
  NpyArray want_;
  int64_t V_ = 0;
  SequenceCache cache_;
};

TEST_P(Diffusion, OneBlockCausalForward) {
  Segment s = Seg(0, 24, 24, true);
  s.cache = nullptr;
  ExpectRows(Fwd(s), 0, 24);
}

TEST_P(Diffusion, CausalMaskWouldDiffer) {
  // Guards the test above: with a causal mask the masked block's logits are different.
  Segment s = Seg(0, 24, 24, true);
  s.cache = nullptr;
  s.block_size = 0;
  auto r = Fwd(s);
  EXPECT_GT(MaxDiff(r.logits.data() + 16 * V_, want_.data.data() + 16 * V_, 8 * V_), 1e-3);
}

TEST_P(Diffusion, CommitThenDenoise) {
  Fwd(Seg(0, 16, 16, false));
  auto r = Fwd(Seg(16, 24, 0, true));
  EXPECT_EQ(r.rows_processed, 8);
  ExpectRows(r, 16, 8);
}

TEST_P(Diffusion, FusedCommitAndDenoise) {
  Fwd(Seg(0, 8, 8, false));
  auto r = Fwd(Seg(8, 24, 8, true));
  EXPECT_EQ(r.rows_processed, 16);
  ExpectRows(r, 8, 16);
  // The fused step committed block [8, 16): a denoise of the last block now matches too.
  auto d = Fwd(Seg(16, 24, 0, true));
  ExpectRows(d, 16, 8);
}

TEST_P(Diffusion, DenoiseLeavesCachesUntouched) {
  Fwd(Seg(0, 16, 16, false));
  Segment noisy = Seg(16, 24, 0, true);
  for (int i = 16; i < 24; ++i) noisy.tokens[i - 16] = 100 + i;  // other tokens than the reference's
  auto a = Fwd(noisy);
  auto b = Fwd(noisy);
  EXPECT_EQ(a.logits, b.logits);
  // A later step over the real block gives exactly what it gives without the denoise steps before.
  auto after = Fwd(Seg(16, 24, 8, true));
  model_->AllocateCaches(16, 4, 2);
  if (cache_.state_slot >= 0) model_->ResetStateSlot(0);
  Fwd(Seg(0, 16, 16, false));
  auto clean = Fwd(Seg(16, 24, 8, true));
  EXPECT_EQ(after.logits, clean.logits);
  ExpectRows(clean, 16, 8);
}

INSTANTIATE_TEST_SUITE_P(Families, Diffusion, ::testing::Values("qwen3_moe", "qwen3_5_moe"));

}  // namespace
}  // namespace tessera

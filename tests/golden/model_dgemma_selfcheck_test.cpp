// tessera model tests: DiffusionGemma's encoder (arch/diffusion_gemma.cpp) on the CPU backend against
// tools/dgemma_fixtures/dgemma_doc_model.py, docs/DIFFUSION_GEMMA.md written as float64 numpy code.
// SELF-CONSISTENCY ONLY, not a reference: both sides come from the same document, so agreement says
// the C++ computes what the document says (sections 3-4: sliding / global attention with their head
// dims and RoPE kinds, V from K, the dense MLP beside the experts, the scaled router, layer_scalar,
// embedding scale, soft-cap, tied lm_head), not that the document is what transformers does. The
// transformers fixtures of make_dgemma_fixtures.py (GPU machine) will replace this check.
// The checkpoint (tiny shape "dgemma_tiny_a": window 8 < prompt 24, bf16 weights, the saved tensor
// layout with a vision-tower tensor to skip) and the doc model's logits are made at test time by
// tools/dgemma_fixtures/make_dgemma_selfcheck.py (numpy), as the quantization goldens make theirs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "expect_error.h"
#include "io/hf_config.h"
#include "io/npy.h"
#include "model/model.h"
#include "model_segment.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::ExpectError;
using testing::Seg;

// Made once per test binary run (a test fails, never skips, when python3-numpy is missing).
const std::string& Dir() {
  static const std::string dir = [] {
    const std::string out = testing::ScratchDir("dgemma_selfcheck");
    const auto r = testing::RunCommand("/usr/bin/python3 " + std::string(TESSERA_SOURCE_DIR) +
                                       "/tools/dgemma_fixtures/make_dgemma_selfcheck.py " + out);
    if (r.exit_code != 0) ADD_FAILURE() << "make_dgemma_selfcheck.py failed: " << r.out << r.err;
    return out + "/dgemma_tiny_a";
  }();
  return dir;
}

struct Want {
  std::vector<int32_t> ids;
  NpyArray logits;  // [24, vocab]
};

const Want& Expected() {
  static const Want w = [] {
    Want x;
    x.ids = ReadJsonFile(Dir() + "/selfcheck.json")["prompt_ids"].get<std::vector<int32_t>>();
    x.logits = ReadNpy(Dir() + "/encoder_logits.npy");
    return x;
  }();
  return w;
}

int32_t Argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

// Rows [row0, row0 + n) of `got` (n rows of vocab V) against the doc model's rows from position pos0.
void ExpectRows(const float* got, int64_t n, int64_t pos0, const char* what) {
  const Want& w = Expected();
  const int64_t V = w.logits.shape.at(1);
  double worst = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* want = w.logits.data.data() + (pos0 + r) * V;
    const double d = testing::MaxAbsDiff(got + r * V, want, V);
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-3) << what << " position " << pos0 + r;
    EXPECT_EQ(Argmax(got + r * V, V), Argmax(want, V)) << what << " position " << pos0 + r;
  }
  std::printf("dgemma self-check %-34s positions %2ld..%2ld  max |C++ - doc model| %.3e\n", what,
              static_cast<long>(pos0), static_cast<long>(pos0 + n - 1), worst);
}

TEST(DiffusionGemmaSelfCheck, LoadsTheSavedLayout) {
  auto m = Model::Load(Dir());
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.family, ModelFamily::kDiffusionGemma);
  EXPECT_EQ(c.num_layers, 4);
  // K and V per token: 2 sliding layers x 2 x 2 heads x 16 + 2 global layers x 2 x 1 head x 32.
  EXPECT_EQ(m->KvBytesPerTokenPerRank(), (2 * 2 * 2 * 16 + 2 * 2 * 1 * 32) * 4);
}

TEST(DiffusionGemmaSelfCheck, EncoderLogitsWithoutCache) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  Batch b;
  b.segments.push_back(Seg(nullptr, 0, w.ids, static_cast<int64_t>(w.ids.size()), true));
  ForwardResult r = m->Forward(b);
  ExpectRows(r.logits.data(), static_cast<int64_t>(w.ids.size()), 0, "one forward, no cache");
}

// The prompt in chunks through the paged cache (pages of 4, so the window of 8 spans pages and the
// later chunks read their sliding keys from it), batched with a second sequence's whole prompt.
TEST(DiffusionGemmaSelfCheck, EncoderLogitsInChunksThroughPagedCache) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  const int64_t V = m->config().vocab_size, P = static_cast<int64_t>(w.ids.size());
  m->AllocateCaches(16, 4, 0);
  SequenceCache a, b;
  for (int32_t p = 0; p < 6; ++p) a.pages.push_back(p * 2);       // interleaved page ids
  for (int32_t p = 0; p < 6; ++p) b.pages.push_back(p * 2 + 1);
  auto ids = [&](int64_t from, int64_t to) { return std::vector<int32_t>(w.ids.begin() + from, w.ids.begin() + to); };
  {
    Batch batch;
    batch.segments.push_back(Seg(&a, 0, ids(0, 10), 10, true));
    ForwardResult r = m->Forward(batch);
    ExpectRows(r.logits.data(), 10, 0, "chunk 1 of 3");
  }
  {
    Batch batch;
    batch.segments.push_back(Seg(&a, 10, ids(10, 23), 13, true));
    batch.segments.push_back(Seg(&b, 0, ids(0, P), P, true));
    ForwardResult r = m->Forward(batch);
    ExpectRows(r.logits.data(), 13, 10, "chunk 2 of 3 (batched)");
    ExpectRows(r.logits.data() + 13 * V, P, 0, "second sequence, whole prompt");
  }
  {
    Batch batch;
    batch.segments.push_back(Seg(&a, 23, ids(23, 24), 1, true));
    ForwardResult r = m->Forward(batch);
    ExpectRows(r.logits.data(), 1, 23, "chunk 3 of 3 (one token)");
  }
}

TEST(DiffusionGemmaSelfCheck, RefusesWhatIsNotImplementedYet) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  Batch b;  // an uncommitted canvas: the decoder path
  b.segments.push_back(Seg(nullptr, 0, w.ids, 8, true));
  ExpectError([&] { m->Forward(b); }, ErrorKind::kUnsupported, {"decoder"});
  LoadOptions tp;
  tp.tensor_parallel_size = 2;
  ExpectError([&] { Model::Load(Dir(), tp); }, ErrorKind::kUnsupported, {"tensor parallelism"});
  LoadOptions dummy;
  dummy.load_format = "dummy";
  ExpectError([&] { Model::Load(Dir(), dummy); }, ErrorKind::kUnsupported, {"dummy"});
}

}  // namespace
}  // namespace tessera

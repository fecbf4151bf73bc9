// tessera model tests: DiffusionGemma's encoder and canvas decoder (arch/diffusion_gemma.cpp) on the
// CPU backend against tools/dgemma_fixtures/dgemma_doc_model.py, docs/DIFFUSION_GEMMA.md written as
// float64 numpy code.
// SELF-CONSISTENCY ONLY, not a reference: both sides come from the same document, so agreement says
// the C++ computes what the document says (sections 3-4: sliding / global attention with their head
// dims and RoPE kinds, V from K, the dense MLP beside the experts, the scaled router, layer_scalar,
// embedding scale, soft-cap, tied lm_head; section 5's self-conditioned decoder input, the decoder's
// layer_scalars, bidirectional canvas attention with the cached generation path's sliding rule), not
// that the document is what transformers does. The
// transformers fixtures of make_dgemma_fixtures.py (GPU machine) will replace this check.
// The checkpoints (tiny shape "dgemma_tiny_a": window 8 < prompt 24, bf16 weights, the saved tensor
// layout with a vision-tower tensor to skip; "dgemma_tiny_untied": the same shape with
// tie_word_embeddings false, two whole stacks and an lm_head, docs OPEN 5) and the doc model's logits
// are made at test time by tools/dgemma_fixtures/make_dgemma_selfcheck.py (numpy), as the
// quantization goldens make theirs. Every test runs on both.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
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
const std::string& OutDir() {
  static const std::string dir = [] {
    const std::string out = testing::ScratchDir("dgemma_selfcheck");
    const auto r = testing::RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) +
                                       "/tools/dgemma_fixtures/make_dgemma_selfcheck.py " + out);
    if (r.exit_code != 0) ADD_FAILURE() << "make_dgemma_selfcheck.py failed: " << r.out << r.err;
    return out;
  }();
  return dir;
}

// The shape the running test is instantiated for.
std::string Shape() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info && info->value_param() && std::string(info->value_param()).find("untied") != std::string::npos
             ? "dgemma_tiny_untied"
             : "dgemma_tiny_a";
}

std::string Dir() { return OutDir() + "/" + Shape(); }

struct Want {
  std::vector<int32_t> ids;
  NpyArray logits;  // [24, vocab]
  // The decoder after the 24-token prompt (window 8): two steps of one 16-token canvas.
  std::vector<int32_t> canvas1, canvas2;
  NpyArray step1, step2;          // [16, vocab]
  NpyArray step1_whole_prefix;    // step 1 by the other sliding rule (docs OPEN 2): must NOT match
  std::vector<float> soft2;       // [16, hidden]: step 2's self-conditioning input
  // The same input with S = bf16(f32(step 1) / f32(t1)), as a bf16 model stores S (docs 5).
  NpyArray soft2_stored;
  float t1 = 0;  // step 1's temperature (generation_config's t_max)
};

const Want& Expected() {
  static std::map<std::string, Want> cache;
  auto it = cache.find(Shape());
  if (it != cache.end()) return it->second;
  Want& w = cache[Shape()];
  w = [] {
    Want x;
    const auto j = ReadJsonFile(Dir() + "/selfcheck.json");
    x.ids = j["prompt_ids"].get<std::vector<int32_t>>();
    x.logits = ReadNpy(Dir() + "/encoder_logits.npy");
    x.canvas1 = j["canvas_step1_ids"].get<std::vector<int32_t>>();
    x.canvas2 = j["canvas_step2_ids"].get<std::vector<int32_t>>();
    x.step1 = ReadNpy(Dir() + "/decoder_step1_logits.npy");
    x.step2 = ReadNpy(Dir() + "/decoder_step2_logits.npy");
    x.step1_whole_prefix = ReadNpy(Dir() + "/decoder_step1_whole_prefix_logits.npy");
    const NpyArray soft = ReadNpy(Dir() + "/self_conditioning_step2.npy");
    x.soft2.assign(soft.data.begin(), soft.data.end());
    x.soft2_stored = ReadNpy(Dir() + "/self_conditioning_step2_stored.npy");
    x.t1 = j["step1_temperature"].get<float>();
    return x;
  }();
  return w;
}

class DiffusionGemmaSelfCheck : public ::testing::TestWithParam<std::string> {};

int32_t Argmax(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

// n rows of `got` (vocab V each) against the doc model's rows of `ref` from row pos0 (the encoder's
// logits by default, whose rows are positions).
double ExpectRows(const float* got, int64_t n, int64_t pos0, const char* what, const NpyArray* ref = nullptr) {
  const Want& w = Expected();
  if (!ref) ref = &w.logits;
  const int64_t V = ref->shape.at(1);
  double worst = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* want = ref->data.data() + (pos0 + r) * V;
    const double d = testing::MaxAbsDiff(got + r * V, want, V);
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-3) << what << " position " << pos0 + r;
    EXPECT_EQ(Argmax(got + r * V, V), Argmax(want, V)) << what << " position " << pos0 + r;
  }
  std::printf("dgemma self-check %-18s %-40s rows %2ld..%2ld  max |C++ - doc model| %.3e\n", Shape().c_str(), what,
              static_cast<long>(pos0), static_cast<long>(pos0 + n - 1), worst);
  return worst;
}

// The largest difference between n rows of `got` and `ref`'s first rows.
double MaxDiff(const float* got, int64_t n, const NpyArray& ref) {
  const int64_t V = ref.shape.at(1);
  double worst = 0;
  for (int64_t r = 0; r < n; ++r) worst = std::max(worst, testing::MaxAbsDiff(got + r * V, ref.data.data() + r * V, V));
  return worst;
}

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_P(DiffusionGemmaSelfCheck, LoadsTheSavedLayout) {
  auto m = Model::Load(Dir());
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.family, ModelFamily::kDiffusionGemma);
  EXPECT_EQ(c.num_layers, 4);
  // K and V per token: 2 sliding layers x 2 x 2 heads x 16 + 2 global layers x 2 x 1 head x 32.
  EXPECT_EQ(m->KvBytesPerTokenPerRank(), (2 * 2 * 2 * 16 + 2 * 2 * 1 * 32) * 4);
}

TEST_P(DiffusionGemmaSelfCheck, EncoderLogitsWithoutCache) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  Batch b;
  b.segments.push_back(Seg(nullptr, 0, w.ids, static_cast<int64_t>(w.ids.size()), true));
  ForwardResult r = m->Forward(b);
  ExpectRows(r.logits.data(), static_cast<int64_t>(w.ids.size()), 0, "one forward, no cache");
}

// The prompt in chunks through the paged cache (pages of 4, so the window of 8 spans pages and the
// later chunks read their sliding keys from it), batched with a second sequence's whole prompt.
TEST_P(DiffusionGemmaSelfCheck, EncoderLogitsInChunksThroughPagedCache) {
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

// The canvas decoder (docs 5, 3.2) after a prompt longer than the window, the prompt committed
// through the paged cache: step 1 without self-conditioning, step 2 with step 1's soft embedding.
// Sequence a's pages cover the prompt only (a canvas K/V write would fall outside them).
TEST_P(DiffusionGemmaSelfCheck, DecoderStepsAfterPromptLongerThanWindow) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  const int64_t H = m->config().hidden_size, P = static_cast<int64_t>(w.ids.size());
  const int64_t C = static_cast<int64_t>(w.canvas1.size());
  ASSERT_EQ(C, m->config().canvas_length);
  ASSERT_EQ(static_cast<int64_t>(w.soft2.size()), C * H);
  m->AllocateCaches(16, 4, 0);
  SequenceCache a;
  for (int32_t p = 0; p < 6; ++p) a.pages.push_back(p * 2);
  {
    Batch batch;
    batch.segments.push_back(Seg(&a, 0, w.ids, P, false));
    m->Forward(batch);
  }
  Batch s1;
  s1.segments.push_back(Seg(&a, P, w.canvas1, 0, true));
  ForwardResult r1 = m->Forward(s1);
  ExpectRows(r1.logits.data(), C, 0, "decoder step 1 (no self-conditioning)", &w.step1);
  // The other sliding rule (whole prefix) differs by far more: the window of the canvas is exercised.
  EXPECT_GT(MaxDiff(r1.logits.data(), C, w.step1_whole_prefix), 0.1);
  Batch s2;
  s2.segments.push_back(Seg(&a, P, w.canvas2, 0, true));
  s2.segments[0].self_conditioning = w.soft2;
  ForwardResult r2 = m->Forward(s2);
  ExpectRows(r2.logits.data(), C, 0, "decoder step 2 (self-conditioned)", &w.step2);
  // The input as the engine computes it from step 1's logits (the decoder stack's embedding).
  std::vector<float> z(w.step1.data.size());
  for (size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>(w.step1.data[i]) / w.t1;
  const std::vector<float> soft = m->SelfConditioningInput(z.data(), C);
  ASSERT_EQ(soft.size(), w.soft2_stored.data.size());
  EXPECT_LE(testing::MaxAbsDiff(soft.data(), w.soft2_stored.data.data(), static_cast<int64_t>(soft.size())), 1e-3)
      << "Model::SelfConditioningInput against the doc model";
  s2.segments[0].self_conditioning.clear();  // the input matters
  EXPECT_GT(MaxDiff(m->Forward(s2).logits.data(), C, w.step2), 0.1);
  // Nothing of the canvas persisted: step 1 again gives the same logits.
  ForwardResult again = m->Forward(s1);
  EXPECT_EQ(again.logits, r1.logits);
}

// A commit and the next canvas step in ONE segment (committed rows: encoder, uncommitted: decoder),
// batched with another sequence's self-conditioned step 2; and the same without a cache.
TEST_P(DiffusionGemmaSelfCheck, DecoderFusedWithCommitAndBatched) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  const int64_t V = m->config().vocab_size, P = static_cast<int64_t>(w.ids.size());
  const int64_t C = static_cast<int64_t>(w.canvas1.size());
  m->AllocateCaches(16, 4, 0);
  SequenceCache a, b;
  for (int32_t p = 0; p < 6; ++p) a.pages.push_back(p * 2);
  for (int32_t p = 0; p < 6; ++p) b.pages.push_back(p * 2 + 1);
  const std::vector<int32_t> head(w.ids.begin(), w.ids.begin() + 16), tail(w.ids.begin() + 16, w.ids.end());
  {
    Batch batch;
    batch.segments.push_back(Seg(&a, 0, head, 16, false));
    batch.segments.push_back(Seg(&b, 0, w.ids, P, false));
    m->Forward(batch);
  }
  Batch batch;
  batch.segments.push_back(Seg(&a, 16, Cat(tail, w.canvas1), P - 16, true));
  batch.segments.push_back(Seg(&b, P, w.canvas2, 0, true));
  batch.segments[1].self_conditioning = w.soft2;
  ForwardResult r = m->Forward(batch);
  ExpectRows(r.logits.data(), P - 16, 16, "fused: commit rows (encoder)");
  ExpectRows(r.logits.data() + (P - 16) * V, C, 0, "fused: canvas rows, step 1", &w.step1);
  ExpectRows(r.logits.data() + P * V, C, 0, "batched: other sequence, step 2", &w.step2);
  Batch stateless;  // prompt and canvas in one segment from position 0, nothing cached
  stateless.segments.push_back(Seg(nullptr, 0, Cat(w.ids, w.canvas2), P, true));
  stateless.segments[0].self_conditioning = w.soft2;
  ForwardResult s = m->Forward(stateless);
  ExpectRows(s.logits.data(), P, 0, "no cache: prompt rows (encoder)");
  ExpectRows(s.logits.data() + P * V, C, 0, "no cache: canvas rows, step 2", &w.step2);
}

TEST_P(DiffusionGemmaSelfCheck, RefusesBadDecoderInputs) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  const int64_t P = static_cast<int64_t>(w.ids.size());
  Batch b;  // a self-conditioning input of the wrong size
  b.segments.push_back(Seg(nullptr, 0, Cat(w.ids, w.canvas2), P, true));
  b.segments[0].self_conditioning.assign(w.soft2.begin(), w.soft2.end() - 1);
  ExpectError([&] { m->Forward(b); }, ErrorKind::kInvalidArgument, {"self-conditioning"});
  b.segments[0].commit_len = P + static_cast<int64_t>(w.canvas2.size());  // no canvas rows for it
  b.segments[0].self_conditioning = w.soft2;
  ExpectError([&] { m->Forward(b); }, ErrorKind::kInvalidArgument, {"self-conditioning"});
  Batch bc;  // no block-causal mask in this family
  bc.segments.push_back(Seg(nullptr, 0, w.ids, 16, true, 8));
  ExpectError([&] { m->Forward(bc); }, ErrorKind::kInvalidArgument, {"block"});
}

// A canvas drawn on the backend under a canvas state keeps its next self-conditioning input in the model
// instead of returning it: the next step reading the kept input gives the same rows as one given that
// input from the host; releasing forgets it; and the inputs the model refuses.
TEST_P(DiffusionGemmaSelfCheck, KeptSelfConditioningInputEqualsTheReturnedOne) {
  auto m = Model::Load(Dir());
  const Want& w = Expected();
  const int64_t P = static_cast<int64_t>(w.ids.size()), C = static_cast<int64_t>(w.canvas2.size());
  auto drawn = [&](int64_t state) {
    Segment s = Seg(nullptr, 0, Cat(w.ids, w.canvas2), P, false);
    s.logits_rows.clear();
    for (int64_t t = 0; t < C; ++t) {
      s.logits_rows.push_back(static_cast<int32_t>(P + t));
      s.canvas_sample.push_back({0.8f, static_cast<double>(t) / static_cast<double>(C)});
    }
    s.canvas_logits = true;
    s.canvas_state = state;
    return s;
  };
  Batch first;  // step 1: the same canvas returned (-1) and kept (7)
  first.segments = {drawn(-1), drawn(7)};
  first.segments[0].self_conditioning = first.segments[1].self_conditioning = w.soft2;
  const ForwardResult r1 = m->Forward(first);
  EXPECT_EQ(m->kept_canvas_states(), 1);
  ASSERT_EQ(static_cast<int64_t>(r1.canvas_soft.size()), 2 * C * m->config().hidden_size) << "returned: all rows";
  const std::vector<float> soft(r1.canvas_soft.begin(), r1.canvas_soft.begin() + C * m->config().hidden_size);
  Batch second;  // step 2: from the host, and kept
  second.segments = {drawn(-1), drawn(7)};
  second.segments[0].self_conditioning = soft;
  second.segments[1].self_conditioning_kept = true;
  const ForwardResult r2 = m->Forward(second);
  const int64_t V = m->config().vocab_size;
  ASSERT_EQ(static_cast<int64_t>(r2.canvas_logits.size()), 2 * C * V);
  double d = 0;
  for (int64_t i = 0; i < C * V; ++i) d = std::max(d, static_cast<double>(std::fabs(r2.canvas_logits[i] - r2.canvas_logits[C * V + i])));
  EXPECT_LE(d, 1e-6) << "kept input against the returned one";
  Batch only_kept;  // every drawn canvas kept: nothing comes back
  only_kept.segments = {drawn(7)};
  only_kept.segments[0].self_conditioning_kept = true;
  EXPECT_TRUE(m->Forward(only_kept).canvas_soft.empty());
  // Refused: two segments of one state, a kept input with a host one too, a state for part of the rows,
  // and an input nobody kept (after the release).
  Batch twice;
  twice.segments = {drawn(7), drawn(7)};
  ExpectError([&] { m->Forward(twice); }, ErrorKind::kInvalidArgument, {"the same canvas state"});
  Batch both = only_kept;
  both.segments[0].self_conditioning = soft;
  ExpectError([&] { m->Forward(both); }, ErrorKind::kInvalidArgument, {"no kept self-conditioning input"});
  Batch part;
  part.segments = {drawn(9)};
  part.segments[0].logits_rows.pop_back();
  part.segments[0].canvas_sample.pop_back();
  ExpectError([&] { m->Forward(part); }, ErrorKind::kInvalidArgument, {"every canvas row drawn"});
  m->ReleaseCanvasState(7);
  EXPECT_EQ(m->kept_canvas_states(), 0);
  ExpectError([&] { m->Forward(only_kept); }, ErrorKind::kInvalidArgument, {"no kept self-conditioning input"});
}

TEST_P(DiffusionGemmaSelfCheck, RefusesWhatIsNotImplementedYet) {
  LoadOptions tp;
  tp.tensor_parallel_size = 2;
  ExpectError([&] { Model::Load(Dir(), tp); }, ErrorKind::kUnsupported, {"tensor parallelism"});
}

INSTANTIATE_TEST_SUITE_P(Shapes, DiffusionGemmaSelfCheck, ::testing::Values("tied", "untied"));

// A checkpoint whose stacks disagree with config.json's tie_word_embeddings is refused naming the key
// (not the first tensor found missing or unused).
TEST(DiffusionGemmaTieSetting, ACheckpointOfTheOtherKindIsNamed) {
  for (const auto& [shape, tie] : {std::pair<std::string, bool>{"dgemma_tiny_a", false}, {"dgemma_tiny_untied", true}}) {
    SCOPED_TRACE(shape);
    const std::string dir = testing::ScratchDir("dgemma_tie_" + shape);
    std::filesystem::copy_file(OutDir() + "/" + shape + "/model.safetensors", dir + "/model.safetensors",
                               std::filesystem::copy_options::overwrite_existing);
    nlohmann::json cfg = ReadJsonFile(OutDir() + "/" + shape + "/config.json");
    cfg["tie_word_embeddings"] = tie;
    testing::WriteFile(dir + "/config.json", cfg.dump());
    ExpectError([&] { Model::Load(dir); }, ErrorKind::kCorrupt,
                {"tie_word_embeddings", tie ? "holds two stacks" : "holds one"});
  }
}

}  // namespace
}  // namespace tessera

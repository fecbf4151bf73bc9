// tessera golden tests: the MoE router temperature (Segment::router_temperature) against an
// independent numpy forward of the qwen3_moe fixture (tests/tools/qwen3_moe_reference.py, which is
// itself checked against HF's logits at temperature 1): logits and the experts each layer routes to,
// for temperatures that change the routing; 1 is bit-identical to the plain model, and a segment's
// temperature touches its own rows only.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "io/npy.h"
#include "model/model.h"
#include "model_segment.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;
using testing::Seg;

std::string Fixture() { return DataPath("fixtures/models/qwen3_moe"); }

// The first 40 ids of the fixture's long prompt: enough positions that the temperatures below change
// which experts layer 2 picks for several of them (layer 0 sees the same inputs at every temperature,
// and dividing logits by T > 0 keeps their order, so only its weights change).
std::vector<int32_t> Prompt() {
  auto ids = ReadJsonFile(Fixture() + "/reference.json")["long_ids"].get<std::vector<int32_t>>();
  ids.resize(40);
  return ids;
}

struct Reference {
  NpyArray logits;                                     // [T, vocab]
  std::vector<std::vector<int64_t>> expert_counts;     // [layer][expert]; empty for dense layers
  std::vector<std::vector<std::vector<int>>> routing;  // [layer][position] -> experts (null layer: empty)
};

Reference RunReference(const std::vector<int32_t>& ids, double temperature, int64_t num_experts) {
  std::string csv;
  for (int32_t id : ids) csv += (csv.empty() ? "" : ",") + std::to_string(id);
  const std::string out = testing::ScratchDir("router_reference_" + std::to_string(temperature));
  auto r = testing::RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) +
                               "/tests/tools/qwen3_moe_reference.py " + Fixture() + " " + csv + " " +
                               std::to_string(temperature) + " " + out);
  if (r.exit_code != 0) throw std::runtime_error("the numpy reference failed: " + r.err);
  Reference ref;
  ref.logits = ReadNpy(out + "/logits.npy");
  const nlohmann::json routing = ReadJsonFile(out + "/routing.json");
  for (const auto& layer : routing) {
    ref.expert_counts.emplace_back();
    ref.routing.emplace_back();
    if (layer.is_null()) continue;
    ref.expert_counts.back().assign(num_experts, 0);
    for (const auto& pos : layer) {
      ref.routing.back().push_back(pos.get<std::vector<int>>());
      for (int e : ref.routing.back().back()) ++ref.expert_counts.back()[e];
    }
  }
  return ref;
}

ForwardResult Forward(Model& m, const std::vector<Segment>& segs) {
  Batch b;
  b.segments = segs;
  ForwardOptions o;
  o.collect_expert_stats = true;
  return m.Forward(b, o);
}

Segment Prompted(const std::vector<int32_t>& ids, float temperature) {
  Segment s = Seg(nullptr, 0, ids, static_cast<int64_t>(ids.size()), true);
  s.router_temperature = temperature;
  return s;
}

TEST(ModelRouterTemperature, ReferenceAtOneIsHfs) {
  // The numpy reference is only as good as its agreement with transformers: at temperature 1 it
  // must give the fixture's HF logits.
  auto ids = ReadJsonFile(Fixture() + "/reference.json")["short_ids"].get<std::vector<int32_t>>();
  Reference ref = RunReference(ids, 1.0, 8);
  NpyArray hf = ReadNpy(Fixture() + "/logits_short.npy");
  ASSERT_EQ(ref.logits.data.size(), hf.data.size());
  EXPECT_LT(testing::MaxAbsDiff(ref.logits.data.data(), hf.data.data(), hf.data.size()), 1e-5);
}

TEST(ModelRouterTemperature, LogitsAndRoutingMatchTheNumpyReference) {
  auto model = Model::Load(Fixture());
  const int64_t E = model->config().num_experts;
  const auto ids = Prompt();
  const Reference at_one = RunReference(ids, 1.0, E);
  for (double t : {1.0, 0.3, 2.5}) {
    SCOPED_TRACE("router temperature " + std::to_string(t));
    const Reference ref = t == 1.0 ? at_one : RunReference(ids, t, E);
    ForwardResult r = Forward(*model, {Prompted(ids, static_cast<float>(t))});
    ASSERT_EQ(r.logits.size(), ref.logits.data.size());
    EXPECT_LT(testing::MaxAbsDiff(r.logits.data(), ref.logits.data.data(), r.logits.size()), 1e-3);
    ASSERT_EQ(r.expert_token_counts.size(), ref.expert_counts.size());
    for (size_t l = 0; l < ref.expert_counts.size(); ++l)
      EXPECT_EQ(r.expert_token_counts[l], ref.expert_counts[l]) << "layer " << l;
    if (t == 1.0) continue;
    // The temperature really changed the routing of the last MoE layer, as the reference says, and
    // the output with it (else this test could not tell a model that ignores it).
    int changed = 0;
    for (size_t p = 0; p < ids.size(); ++p) changed += ref.routing[2][p] != at_one.routing[2][p];
    EXPECT_GT(changed, 0);
    EXPECT_GT(testing::MaxAbsDiff(ref.logits.data.data(), at_one.logits.data.data(), ref.logits.data.size()), 0.1);
  }
}

TEST(ModelRouterTemperature, OneIsBitIdenticalAndRowsStayTheirSegments) {
  auto model = Model::Load(Fixture());
  const auto ids = Prompt();
  const std::vector<int32_t> other = {7, 300, 41, 9, 250, 18};
  // Temperature 1 is the plain model, bit for bit.
  ForwardResult plain = Forward(*model, {Seg(nullptr, 0, ids, static_cast<int64_t>(ids.size()), true)});
  ForwardResult one = Forward(*model, {Prompted(ids, 1.f)});
  ASSERT_EQ(plain.logits.size(), one.logits.size());
  EXPECT_EQ(std::memcmp(plain.logits.data(), one.logits.data(), plain.logits.size() * sizeof(float)), 0);
  // In one batch, the second segment's temperature leaves the first segment's rows exactly as they
  // are with the second at 1 (the same batch shape, so the same kernels), and changes its own rows.
  ForwardResult both_one = Forward(*model, {Prompted(ids, 1.f), Prompted(other, 1.f)});
  ForwardResult mixed = Forward(*model, {Prompted(ids, 1.f), Prompted(other, 0.3f)});
  const size_t first = ids.size() * 512;
  ASSERT_EQ(mixed.logits.size(), both_one.logits.size());
  EXPECT_EQ(std::memcmp(mixed.logits.data(), both_one.logits.data(), first * sizeof(float)), 0);
  EXPECT_GT(testing::MaxAbsDiff(mixed.logits.data() + first, both_one.logits.data() + first, other.size() * 512), 1e-3);
  // And the second segment alone at 0.3 agrees with its rows of the mixed batch.
  ForwardResult alone = Forward(*model, {Prompted(other, 0.3f)});
  EXPECT_LT(testing::MaxAbsDiff(alone.logits.data(), mixed.logits.data() + first, other.size() * 512), 1e-5);
}

TEST(ModelRouterTemperature, BadTemperaturesAreRefused) {
  auto model = Model::Load(Fixture());
  for (float t : {0.f, -1.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_THROW(Forward(*model, {Prompted({1, 2, 3}, t)}), Error) << t;
}

}  // namespace
}  // namespace tessera

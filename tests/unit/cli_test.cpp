// tessera tests: the `tessera` command line end to end: every command's --help, usage errors
// (one line, exit 2), logits and greedy / diffusion generation against the HF fixtures, inspect
// against the published parameter counts, verify against sha256sum, tokenizer commands against
// the HF goldens, and bad checkpoints as clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dgemma_checkpoint.h"
#include "io/npy.h"
#include "test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using ordered = nlohmann::ordered_json;
using namespace tessera::testing;
namespace fs = std::filesystem;

std::string Bin() { return TesseraBinary(); }
std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
std::string Model(const std::string& fam) { return DataPath("fixtures/models/" + fam); }
json ReadJson(const std::string& path) { return json::parse(ReadFile(path)); }
template <typename J>
std::string IdList(const J& ids) {
  std::string s;
  // Appended piece by piece: "," + std::to_string(..) made GCC 12 warn (-Wrestrict, a false positive).
  for (const auto& v : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(v.template get<int>());
  }
  return s;
}
int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, EveryCommandHasHelp) {
  for (const char* cmd : {"generate", "logits", "tokenize", "detokenize", "render", "inspect", "verify"}) {
    auto r = RunCommand(Bin() + " " + cmd + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("--model"), std::string::npos) << cmd;
  }
  auto r = RunCommand(Bin() + " --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("generate"), std::string::npos);
}

TEST(Cli, UsageErrorsAreOneLineAndExitTwo) {
  const std::string m = Quote(Model("qwen3_moe"));
  std::vector<std::string> bad = {
      "generate --model " + m + " --ids 1,2 --no-such-flag",
      "generate --model " + m + " --ids 1,2 --max-tokens abc",
      "generate --model " + m + " --ids 1,2 --max-tokens 0",
      "generate --model " + m + " --ids 1,x,3",
      "generate --model " + m + " --ids 1,2 --temperature -1",
      "generate --model " + m + " --ids 1,2 --policy fastest --diffusion",
      "generate --model /no/such/dir --ids 1,2",
      "generate --model " + m,
      "logits --model " + m + " --ids 1,2",
      "logits --model " + m + " --ids 1,99999 --out /tmp/x.npy",
      "inspect --model " + m + " --context -5",
      "frobnicate",
      "",
  };
  for (const auto& args : bad) {
    auto r = RunCommand(Bin() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << args;
  }
  // The range checks say what the flag wants (not "not in range 0.000000 to 1797693134862315708..."),
  // and a seed outside [0, 2^64) is refused, not wrapped or clamped to 2^64 - 1.
  const std::pair<std::string, std::string> said[] = {
      {"--max-tokens 0", "--max-tokens: must be a positive number, got 0"},
      {"--top-k -1", "--top-k: must be a number >= 0, got -1"},
      {"--seed -1", "--seed: must be an integer in [0, 2^64), got -1"},
      {"--seed 18446744073709551616", "--seed: must be an integer in [0, 2^64), got 18446744073709551616"},
  };
  for (const auto& [args, message] : said) {
    auto r = RunCommand(Bin() + " generate --model " + m + " --ids 1,2 " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
  }
  auto top = RunCommand(Bin() + " generate --model " + m + " --ids 1,2 --max-tokens 2 --temperature 1 --output-ids " +
                        "--seed 18446744073709551615");
  EXPECT_EQ(top.exit_code, 0) << top.err;
}

class CliFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(CliFamily, LogitsMatchReference) {
  json ref = ReadJson(Model(GetParam()) + "/reference.json");
  std::string out = ScratchDir("cli-logits-" + GetParam()) + "/logits.npy";
  auto r = RunCommand(Bin() + " logits --model " + Quote(Model(GetParam())) + " --ids " + IdList(ref["long_ids"]) +
                      " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  NpyArray got = ReadNpy(out), want = ReadNpy(Model(GetParam()) + "/logits_long.npy");
  ASSERT_EQ(got.shape, want.shape);
  double worst = 0;
  for (size_t i = 0; i < got.data.size(); ++i) worst = std::max(worst, (double)std::fabs(got.data[i] - want.data[i]));
  EXPECT_LT(worst, 1e-3);
}

TEST_P(CliFamily, GreedyOutputIdsMatchReference) {
  json ref = ReadJson(Model(GetParam()) + "/reference.json");
  auto r = RunCommand(Bin() + " generate --model " + Quote(Model(GetParam())) + " --ids " + IdList(ref["short_ids"]) +
                      " --max-tokens 24 --min-tokens 24 --temperature 0 --output-ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), ref["greedy_continuation"]);
}

INSTANTIATE_TEST_SUITE_P(Families, CliFamily, ::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"));

class CliDiffusion : public ::testing::TestWithParam<std::string> {};

TEST_P(CliDiffusion, BlockCausalLogitsMatchReference) {
  const std::string fam = GetParam();
  json ref = ReadJson(DataPath("fixtures/diffusion/" + fam + "/reference.json"));
  std::string out = ScratchDir("cli-block-" + fam) + "/logits.npy";
  auto r = RunCommand(Bin() + " logits --model " + Quote(Model(fam)) + " --ids " + IdList(ref["block8_ids"]) +
                      " --block-size 8 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  NpyArray got = ReadNpy(out), want = ReadNpy(DataPath("fixtures/diffusion/" + fam + "/logits_block8.npy"));
  ASSERT_EQ(got.shape, want.shape);
  double worst = 0;
  for (size_t i = 0; i < got.data.size(); ++i) worst = std::max(worst, (double)std::fabs(got.data[i] - want.data[i]));
  EXPECT_LT(worst, 1e-3);
}

TEST_P(CliDiffusion, CasesReproduceOutputAndTraceFile) {
  const std::string fam = GetParam();
  json ref = ReadJson(DataPath("fixtures/diffusion/" + fam + "/reference.json"));
  for (const json& c : ref["cases"]) {
    std::string trace = ScratchDir("cli-trace-" + fam) + "/trace.json";
    std::string cmd = Bin() + " generate --model " + Quote(Model(fam)) + " --ids " + IdList(ref["prompt"]) +
                      " --diffusion --block-size " + c["block"].dump() + " --steps " + c["steps"].dump() +
                      " --policy " + c["policy"].get<std::string>() + " --mask-token-id " +
                      ref["mask_token_id"].dump() + " --max-tokens " + c["max_new_tokens"].dump() +
                      " --temperature 0 --output-ids --trace " + trace;
    if (!c["threshold"].is_null()) cmd += " --threshold " + fmt::format("{:.17g}", c["threshold"].get<double>());
    auto r = RunCommand(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
    EXPECT_EQ(json::parse(r.out), c["output"]) << cmd;
    json got = ReadJson(trace);
    ASSERT_EQ(got.size(), c["trace"].size()) << cmd;
    for (size_t i = 0; i < got.size(); ++i) {
      for (const char* k : {"block_start", "step", "unmasked", "tokens"})
        EXPECT_EQ(got[i][k], c["trace"][i][k]) << cmd << " step " << i << " " << k;
      for (size_t j = 0; j < got[i]["conf"].size(); ++j)
        EXPECT_NEAR(got[i]["conf"][j].get<double>(), c["trace"][i]["conf"][j].get<double>(), 1e-4);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CliDiffusion, ::testing::Values("qwen3_moe", "qwen3_5_moe"));

// A checkpoint that declares itself a diffusion model (model_type sdar_moe on the qwen3_moe layout,
// clover_moe on the qwen3_5_moe layout, mask token and block size in config.json) runs as one
// without --diffusion / --mask-token-id / --block-size, and gives the fixtures' output.
TEST(CliDiffusionModelTypes, DeclaredDiffusionCheckpointsNeedNoFlags) {
  for (auto [fam, type] : {std::pair<std::string, std::string>{"qwen3_moe", "sdar_moe"}, {"qwen3_5_moe", "clover_moe"}}) {
    json ref = ReadJson(DataPath("fixtures/diffusion/" + fam + "/reference.json"));
    const json& c = ref["cases"][1];  // block 8, 4 steps, static
    std::string dir = ScratchDir("cli-declared-" + type);
    for (const char* f : {"generation_config.json", "model.safetensors"})
      fs::copy_file(Model(fam) + "/" + f, dir + "/" + f);
    json cfg = ReadJson(Model(fam) + "/config.json");
    cfg["model_type"] = type;
    cfg["mask_token_id"] = ref["mask_token_id"];
    cfg["block_size"] = c["block"];
    WriteFile(dir + "/config.json", cfg.dump(2));
    auto r = RunCommand(Bin() + " generate --model " + dir + " --ids " + IdList(ref["prompt"]) + " --steps " +
                        c["steps"].dump() + " --max-tokens " + c["max_new_tokens"].dump() +
                        " --temperature 0 --output-ids");
    ASSERT_EQ(r.exit_code, 0) << type << "\n" << r.err;
    EXPECT_EQ(json::parse(r.out), c["output"]) << type;
    // Without a mask token anywhere, a diffusion model refuses to start and says how to give one.
    cfg.erase("mask_token_id");
    WriteFile(dir + "/config.json", cfg.dump(2));
    r = RunCommand(Bin() + " generate --model " + dir + " --ids 1,2,3 --steps 4");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--mask-token-id"), std::string::npos) << r.err;
  }
}

TEST(CliDiffusionErrors, BadParametersAreClearErrors) {
  const std::string base = Bin() + " generate --model " + Quote(Model("qwen3_moe")) + " --ids 1,2,3 --diffusion ";
  struct Case {
    std::string args, expect;
  };
  std::vector<Case> cases = {
      {"--block-size 0 --steps 4 --mask-token-id 511", "block size"},
      {"--block-size 100000 --steps 4 --mask-token-id 511", "block size"},
      {"--block-size 4 --steps 0 --mask-token-id 511", "steps"},
      {"--block-size 4 --steps 4 --mask-token-id 511 --policy threshold --threshold 0", "threshold"},
      {"--block-size 4 --steps 4 --mask-token-id 511 --policy threshold --threshold 1.5", "threshold"},
      {"--block-size 4 --steps 4 --mask-token-id 512", "mask token id 512"},
      {"--block-size 4 --steps 4", "--mask-token-id"},
      {"--steps 4 --mask-token-id 511", "--block-size"},
      {"--block-size 4 --mask-token-id 511", "--steps"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(base + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
  }
  auto r = RunCommand(Bin() + " generate --model " + Quote(Model("qwen3_next")) +
                      " --ids 1,2,3 --diffusion --block-size 4 --steps 4 --mask-token-id 511");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no block-diffusion variant"), std::string::npos) << r.err;
  r = RunCommand(Bin() + " generate --model " + Quote(Model("qwen3_moe")) + " --ids 1,2,3 --block-size 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--diffusion"), std::string::npos) << r.err;
}

TEST(CliDiffusionStats, StatsReportCountersAndTpf) {
  auto r = RunCommand(Bin() + " generate --model " + Quote(Model("qwen3_5_moe")) +
                      " --ids 500,94,275 --diffusion --block-size 8 --steps 4 --mask-token-id 511 --max-tokens 16 "
                      "--temperature 0 --output-ids --stats");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* k : {"forwards:", "tokens per forward (TPF)", "denoising steps per block: [", "distinct experts"})
    EXPECT_NE(r.err.find(k), std::string::npos) << k << "\n" << r.err;
}

// Published sizes (model cards, shared/configs/README.md): an independent check of the counting.
TEST(CliInspect, ParameterCountsMatchPublishedSizes) {
  // Qwen3-30B-A3B: 30.5B total, 3.3B active (3.0B without the input embedding).
  auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) +
                      " --json --context 8192 --concurrency 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_NEAR(j["total_params"].get<double>(), 30.5e9, 0.3e9);
  EXPECT_NEAR(j["active_params"].get<double>(), 3.3e9, 0.1e9);
  EXPECT_NEAR(j["active_params_no_embedding"].get<double>(), 3.0e9, 0.1e9);
  EXPECT_EQ(j["memory"]["kv_bytes"].get<int64_t>(), j["kv_bytes_per_token"].get<int64_t>() * 8192 * 4);
  EXPECT_GT(j["weight_bytes"]["bf16"].get<int64_t>(), j["weight_bytes"]["int8"].get<int64_t>());
  EXPECT_GT(j["weight_bytes"]["int8"].get<int64_t>(), j["weight_bytes"]["int4"].get<int64_t>());
  // The hybrids: ~34.7B (text part of Qwen3.5-35B-A3B) and ~80B total; "A3B" active is only
  // published as a rounded figure, so it is checked to be of that order, not to a digit.
  for (auto [dir, total] : {std::pair<std::string, double>{"qwen3.5-35b-a3b", 34.7e9}, {"qwen3-next-80b-a3b", 80e9}}) {
    auto h = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/" + dir)) + " --json");
    ASSERT_EQ(h.exit_code, 0) << h.err;
    json k = json::parse(h.out);
    EXPECT_NEAR(k["total_params"].get<double>(), total, total * 0.01) << dir;
    EXPECT_GT(k["active_params_no_embedding"].get<double>(), 2.5e9) << dir;
    EXPECT_LT(k["active_params_no_embedding"].get<double>(), 4.0e9) << dir;
    EXPECT_GT(k["state_bytes_per_sequence"].get<int64_t>(), 0) << dir;
  }
  // Qwen3-30B-A3B: 48 layers x 2 (K, V) x 4 kv heads x 128 x 4 bytes (f32, as the caches hold it).
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) + " --json");
  EXPECT_EQ(json::parse(r.out)["kv_bytes_per_token"].get<int64_t>(), 48 * 2 * 4 * 128 * 4);
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3.5-35b-a3b")));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("30 Gated DeltaNet"), std::string::npos) << r.out;
}

// `tessera inspect`'s "read per token" is the numerator of the benchmarks' decode floor (one count,
// WeightCensus): one embedding row, not the table; the lm_head; top-k routed experts. Qwen3-30B-A3B
// by hand from its config.json:
//   a layer: q 4096 x 2048 = 8,388,608 + k, v 512 x 2048 = 2 x 1,048,576 + o 2048 x 4096 = 8,388,608
//            + router 128 x 2048 = 262,144 + norms 2 x 2048 + q / k norms 2 x 128 = 19,140,864;
//            48 layers: 918,761,472; the final norm 2,048
//   experts: 48 layers x top-8 x (gate + up + down) 3 x 768 x 2048 = 1,811,939,328
//   lm_head 151,936 x 2048 = 311,164,928; one embedding row 2,048
//   = 3,041,869,824 parameters, x 2 bytes (bf16) = 6,083,739,648 bytes = 5.67 GiB (the benchmarks' 6.08
//   GB; counting the whole embedding table, as inspect did, gave 6.71 GB = 6.25 GiB).
TEST(CliInspect, ReadPerTokenIsTheDecodeFloorsCount) {
  auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["read_bytes_per_token_bf16"].get<int64_t>(), int64_t{6'083'739'648});
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("read per token:   5.67 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("top-8 experts"), std::string::npos) << r.out;
}

// The W8A8 bench config (compressed-tensors FP8 with dynamic per-token activations, the layout of the
// published Qwen3-30B-A3B FP8-dynamic builds; tests/data/configs/README.md): inspect names the scheme,
// activations included, and counts one byte a weight.
TEST(CliInspect, W8A8BenchConfigIsDescribedWithItsActivations) {
  auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b-fp8-dynamic")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("as compressed-tensors fp8 per channel, W8A8 (activations per token)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("weights:          29.11 GiB"), std::string::npos) << r.out;
}

// Gemma 4's attention layers are local (sliding window) or global: inspect counts both kinds (it
// called all of them "full attention"). The checkpoint is the DiffusionGemma self-check's (numpy).
TEST(CliInspect, SlidingWindowLayersAreCountedApart) {
  const std::string out = testing::DgemmaSelfcheckOut();  // made once per test process
  auto r = RunCommand(Bin() + " inspect --model " + Quote(out + "/dgemma_tiny_a"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layers:           4 (4 attention: 2 sliding-window, 2 global, 0 Gated DeltaNet"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("family diffusion_gemma), canvas diffusion (16-token canvases)"), std::string::npos) << r.out;
  r = RunCommand(Bin() + " inspect --model " + Quote(out + "/dgemma_tiny_a") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["layers"]["sliding_window"].get<int64_t>(), 2) << r.out;
  // It writes by canvas diffusion (config.json's canvas_length 16), not by masked block diffusion.
  EXPECT_EQ(json::parse(r.out)["canvas_length"].get<int64_t>(), 16) << r.out;
  EXPECT_FALSE(json::parse(r.out)["diffusion"].get<bool>()) << r.out;
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")));
  EXPECT_NE(r.out.find("(48 full attention, 0 Gated DeltaNet"), std::string::npos) << r.out;
}

// An untied DiffusionGemma (two whole stacks and an lm_head, docs/DIFFUSION_GEMMA.md OPEN 5): inspect's
// total is every parameter the file holds (its safetensors header, the vision tower aside), its active
// count the tied shape's plus the separate lm_head (a token runs through one stack, not both).
TEST(CliInspect, UntiedDiffusionGemmaCountsBothStacksAsHeldOneAsActive) {
  const std::string out = testing::DgemmaSelfcheckOut();  // made once per test process
  std::ifstream f(out + "/dgemma_tiny_untied/model.safetensors", std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), sizeof(header_len));
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  int64_t held = 0;
  const json tensors = json::parse(header);
  for (const auto& [name, t] : tensors.items()) {
    if (name == "__metadata__" || name.find("vision_tower") != std::string::npos) continue;
    int64_t n = 1;
    for (const auto& d : t["shape"]) n *= d.get<int64_t>();
    held += n;
  }
  auto tied = RunCommand(Bin() + " inspect --json --model " + Quote(out + "/dgemma_tiny_a"));
  auto untied = RunCommand(Bin() + " inspect --json --model " + Quote(out + "/dgemma_tiny_untied"));
  ASSERT_EQ(tied.exit_code, 0) << tied.err;
  ASSERT_EQ(untied.exit_code, 0) << untied.err;
  const json t = json::parse(tied.out), u = json::parse(untied.out);
  EXPECT_EQ(u["total_params"].get<int64_t>(), held);
  EXPECT_EQ(u["weight_bytes"]["bf16"].get<int64_t>(), 2 * held);
  EXPECT_EQ(u["active_params"].get<int64_t>(), t["active_params"].get<int64_t>() + 512 * 64);
  EXPECT_EQ(u["read_bytes_per_token"].get<int64_t>(), t["read_bytes_per_token"].get<int64_t>());
}

// The GPU memory plan: utilization x the device, minus the bf16 weights and the context estimate,
// the state slots and the activation reserve, leaves the KV pool; a device too small is an error.
TEST(CliInspect, GpuMemoryPlanAddsUp) {
  auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3.5-35b-a3b")) +
                      " --json --gpu-memory 141GB --gpu-memory-utilization 0.9 --max-num-seqs 32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  const json& p = j["gpu_plan"];
  EXPECT_EQ(p["total_bytes"].get<int64_t>(), int64_t{141} * 1000 * 1000 * 1000);
  EXPECT_EQ(p["budget_bytes"].get<int64_t>(), static_cast<int64_t>(0.9 * 141e9));
  EXPECT_EQ(p["in_use_bytes"].get<int64_t>(), j["weight_bytes"]["bf16"].get<int64_t>() + (int64_t{768} << 20));
  // 32 running sequences plus 8 prefix-cache snapshots of the recurrent state.
  EXPECT_EQ(p["state_bytes"].get<int64_t>(), j["state_bytes_per_sequence"].get<int64_t>() * 40);
  EXPECT_GT(p["reserve_bytes"].get<int64_t>(), int64_t{256} << 20);
  EXPECT_EQ(p["kv_pool_bytes"].get<int64_t>(), p["budget_bytes"].get<int64_t>() - p["in_use_bytes"].get<int64_t>() -
                                                    p["state_bytes"].get<int64_t>() - p["reserve_bytes"].get<int64_t>());
  EXPECT_EQ(p["kv_tokens"].get<int64_t>(), p["kv_pool_bytes"].get<int64_t>() / j["kv_bytes_per_token"].get<int64_t>());
  EXPECT_GT(p["kv_tokens"].get<int64_t>(), 100000);
  // 35B parameters in bf16 do not fit in 40 GiB.
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3.5-35b-a3b")) + " --gpu-memory 40GiB");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not fit"), std::string::npos) << r.err;
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3.5-35b-a3b")) +
                 " --gpu-memory 141GB --gpu-memory-utilization 1.5");
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// Quantization at load: the weights are counted as the loader holds them (codes + f32 scales; the
// embedding, lm_head and routers bf16). Qwen3-30B-A3B: 30.5B parameters, of which 2 x 151936 x 2048
// (embedding and lm_head, 1.24 GB in bf16) and the routers stay bf16; the rest is int4 with one 4-byte
// scale per 128 columns (0.53125 bytes a parameter): about 16.7 GB. It fits a 24 GiB card with a
// 32K-token bf16 KV cache (98,304 bytes a token) with 2,048-token steps and the default 64 sequences
// (37K tokens: the activation reserve counts one logits row a sequence and the experts' width; the
// default 4,096-token steps leave 24K).
TEST(CliInspect, Int4Qwen3_30BFitsA24GiBCardWith32KTokens) {
  auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) +
                      " --json --quantization int4 --kv-cache-dtype bf16 --gpu-memory 24GiB"
                      " --max-num-batched-tokens 2048");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  const int64_t w = j["weight_bytes"]["format"].get<int64_t>();
  EXPECT_EQ(w, j["weight_bytes"]["int4"].get<int64_t>());
  EXPECT_GT(w, int64_t{16'000'000'000});
  EXPECT_LT(w, int64_t{17'500'000'000});
  EXPECT_LT(j["weight_bytes"]["int4"].get<int64_t>(), j["weight_bytes"]["int8"].get<int64_t>());
  EXPECT_EQ(j["gpu_plan"]["in_use_bytes"].get<int64_t>(), w + (int64_t{768} << 20));
  EXPECT_GE(j["gpu_plan"]["kv_tokens"].get<int64_t>(), 32768);
  EXPECT_NE(j["weight_format"].get<std::string>().find("int4"), std::string::npos);
  // The per-token read shrinks with the format: int4 experts are ~0.27 of their bf16 bytes.
  EXPECT_LT(j["read_bytes_per_token"].get<int64_t>(), j["read_bytes_per_token_bf16"].get<int64_t>() / 2);
  // In bf16 the same card does not hold it.
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) + " --gpu-memory 24GiB");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) + " --quantization int3");
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// --kv-cache-dtype bf16: K and V in 2 bytes instead of 4, so the same GPU plan (same pool bytes) holds
// twice the tokens; the text output names the element type.
TEST(CliInspect, Bf16KvCacheHalvesBytesPerToken) {
  auto inspect = [](const std::string& flags) {
    auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) +
                        " --gpu-memory 141GB --max-num-seqs 32 --context 8192 --concurrency 4 " + flags);
    EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    return r.out;
  };
  const json f32 = json::parse(inspect("--json"));
  const json bf16 = json::parse(inspect("--json --kv-cache-dtype bf16"));
  EXPECT_EQ(f32["kv_cache_dtype"], "f32");
  EXPECT_EQ(bf16["kv_cache_dtype"], "bf16");
  EXPECT_EQ(json::parse(inspect("--json --kv-cache-dtype f32")), f32);  // f32 is the default
  // 48 layers x (K, V) x 4 kv heads x 128 x 2 bytes.
  EXPECT_EQ(bf16["kv_bytes_per_token"].get<int64_t>(), 48 * 2 * 4 * 128 * 2);
  EXPECT_EQ(2 * bf16["kv_bytes_per_token"].get<int64_t>(), f32["kv_bytes_per_token"].get<int64_t>());
  EXPECT_EQ(2 * bf16["memory"]["kv_bytes"].get<int64_t>(), f32["memory"]["kv_bytes"].get<int64_t>());
  const json &p16 = bf16["gpu_plan"], &p32 = f32["gpu_plan"];
  EXPECT_EQ(p16["kv_pool_bytes"], p32["kv_pool_bytes"]);  // the weights, state and reserve do not change
  EXPECT_EQ(p16["kv_tokens"].get<int64_t>(),
            p16["kv_pool_bytes"].get<int64_t>() / bf16["kv_bytes_per_token"].get<int64_t>());
  EXPECT_NEAR(p16["kv_tokens"].get<double>(), 2 * p32["kv_tokens"].get<double>(), 1.0);
  EXPECT_GT(p32["kv_tokens"].get<int64_t>(), 100000);
  const std::string text = inspect("--kv-cache-dtype bf16");
  EXPECT_NE(text.find("KV cache:         96.00 KiB per token (bf16, 48 attention layers)"), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("({} tokens at 98304 B), bf16 KV cache", p16["kv_tokens"].get<int64_t>())),
            std::string::npos)
      << text;
  auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3-30b-a3b")) + " --kv-cache-dtype fp8");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--kv-cache-dtype"), std::string::npos) << r.err;
}

// A bf16 KV cache needs a GPU: on the CPU, serve and generate stop with one line naming the flag or
// key, exit 2 before loading (no crash, no server left listening); every command that plans memory lists it.
TEST(CliKvCacheDType, Bf16OnTheCpuIsAClearError) {
  const std::string m = Quote(Model("qwen3_moe"));
  const std::string tok = Quote(DataPath("fixtures/tokenizers/bytes"));
  for (const std::string& args :
       {"generate --model " + m + " --ids 1,2,3 --max-tokens 2 --kv-cache-dtype bf16",
        "generate --model " + m + " --ids 1,2,3 --max-tokens 2 --kv-cache-dtype bf16 --device cpu",
        "serve --port 0 --model " + m + " --tokenizer " + tok + " --kv-cache-dtype bf16",
        "serve --port 0 --model " + m + " --tokenizer " + tok + " --kv-cache-dtype bf16 --device cpu"}) {
    auto r = RunCommand("timeout 60 " + Bin() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;  // a usage error: not a crash, not the timeout
    EXPECT_EQ(Lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("kv"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
  }
  for (const std::string& args : {"generate --model " + m + " --ids 1,2 --kv-cache-dtype fp8",
                                  "serve --port 0 --model " + m + " --kv-cache-dtype fp8"}) {
    auto r = RunCommand("timeout 60 " + Bin() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << "\n" << r.err;
  }
  for (const char* cmd : {"generate", "inspect", "serve"}) {
    auto r = RunCommand(Bin() + " " + cmd + " --help");
    EXPECT_NE(r.out.find("--kv-cache-dtype"), std::string::npos) << cmd;
  }
  // bf16 activations likewise (--activation-precision: the GPU's products).
  for (const std::string& args : {"generate --model " + m + " --ids 1,2,3 --max-tokens 2 --activation-precision bf16",
                                  "serve --port 0 --model " + m + " --tokenizer " + tok + " --activation-precision bf16"}) {
    auto r = RunCommand("timeout 60 " + Bin() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("activation"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
  }
  for (const char* cmd : {"generate", "serve"}) {
    auto r = RunCommand(Bin() + " " + cmd + " --help");
    EXPECT_NE(r.out.find("--activation-precision"), std::string::npos) << cmd;
  }
}

// --num-state-snapshots sets the prefix-cache snapshot slots of a hybrid model's recurrent state:
// each adds one sequence's state to the plan and takes it from the KV pool; a model without
// recurrent state has none, whatever is set.
TEST(CliInspect, StateSnapshotsFollowTheFlag) {
  auto inspect = [](const std::string& config, const std::string& flags) {
    auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/" + config)) +
                        " --gpu-memory 141GB --max-num-seqs 32 " + flags);
    EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    return r.out;
  };
  const json def = json::parse(inspect("qwen3.5-35b-a3b", "--json"));
  const int64_t per_seq = def["state_bytes_per_sequence"].get<int64_t>();
  EXPECT_EQ(def["state_slots"]["snapshots"].get<int64_t>(), 8);  // 0 = max_num_seqs / 4
  for (int64_t n : {1, 8, 128}) {
    const json j = json::parse(inspect("qwen3.5-35b-a3b", "--json --num-state-snapshots " + std::to_string(n)));
    const json& s = j["state_slots"];
    EXPECT_EQ(s["sequences"].get<int64_t>(), 32) << n;
    EXPECT_EQ(s["snapshots"].get<int64_t>(), n);
    EXPECT_EQ(s["snapshot_bytes"].get<int64_t>(), per_seq * n);
    EXPECT_EQ(s["total_bytes"].get<int64_t>(), per_seq * (32 + n));
    EXPECT_EQ(j["gpu_plan"]["state_bytes"].get<int64_t>(), per_seq * (32 + n));
    EXPECT_EQ(j["gpu_plan"]["kv_pool_bytes"].get<int64_t>() + per_seq * n,
              def["gpu_plan"]["kv_pool_bytes"].get<int64_t>() + per_seq * 8);
  }
  EXPECT_NE(
      inspect("qwen3.5-35b-a3b", "--num-state-snapshots 128").find("32 sequence slots + 128 prefix-cache snapshots"),
      std::string::npos);
  const json dense = json::parse(inspect("qwen3-30b-a3b", "--json --num-state-snapshots 128"));
  EXPECT_EQ(dense["state_slots"]["snapshots"].get<int64_t>(), 0);
  EXPECT_EQ(dense["state_slots"]["snapshot_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(dense["gpu_plan"]["state_bytes"].get<int64_t>(), 0);
  EXPECT_NE(inspect("qwen3-30b-a3b", "--num-state-snapshots 128").find("state slots:      none"), std::string::npos);
  for (const char* bad : {"-1", "many", "2.5"}) {
    auto r = RunCommand(Bin() + " inspect --model " + Quote(DataPath("configs/qwen3.5-35b-a3b")) +
                        " --num-state-snapshots " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("--num-state-snapshots"), std::string::npos) << r.err;
  }
}

// `tessera serve --num-state-snapshots N` reaches the engine: its start-up log shows the state slots
// the engine allocated (a hybrid fixture with the byte tokenizer, stopped with SIGTERM once ready).
TEST(CliServe, StateSnapshotsReachTheEngine) {
  auto start_up_log = [](const std::string& family, const std::string& flags) {
    const std::string log = ScratchDir("cli-serve-state") + "/stderr";
    auto r =
        RunCommand("(TESSERA_LOG_LEVEL=info " + Bin() + " serve --port 0 --access-log '' --max-num-seqs 4 --model " +
                   Quote(Model(family)) + " --tokenizer " + Quote(DataPath("fixtures/tokenizers/bytes")) + " " + flags +
                   " 2>" + log + " & p=$!; i=0; while [ $i -lt 600 ] && ! grep -q 'ready: ' " + log +
                   "; do sleep 0.1; i=$((i + 1)); done; kill -TERM $p; wait $p)");
    EXPECT_EQ(r.exit_code, 0) << flags << "\n" << ReadFile(log);
    return ReadFile(log);
  };
  std::string log = start_up_log("qwen3_5_moe", "--num-state-snapshots 3");
  EXPECT_NE(log.find("recurrent state: 4 sequence slots + 3 prefix-cache snapshots"), std::string::npos) << log;
  EXPECT_NE(log.find("engine.num_state_snapshots: 3"), std::string::npos) << log;  // the effective configuration
  log = start_up_log("qwen3_5_moe", "");
  EXPECT_NE(log.find("recurrent state: 4 sequence slots + 1 prefix-cache snapshots"), std::string::npos) << log;
  log = start_up_log("qwen3_5_moe", "--num-state-snapshots 3 --no-enable-prefix-caching");
  EXPECT_NE(log.find("recurrent state: 4 sequence slots + 0 prefix-cache snapshots"), std::string::npos) << log;
  EXPECT_NE(log.find("engine.num_state_snapshots ignored: prefix caching is off"), std::string::npos) << log;
  log = start_up_log("qwen3_moe", "--num-state-snapshots 3");
  EXPECT_NE(log.find("recurrent state: none"), std::string::npos) << log;
  EXPECT_NE(log.find("engine.num_state_snapshots ignored: the model has no recurrent state"), std::string::npos) << log;
  // More snapshots than the machine has memory for: after the start-up log, an error naming the key
  // before any cache is allocated (each snapshot of the fixture is a few KiB; 10^12 are petabytes).
  {
    auto r = RunCommand(Bin() + " serve --port 0 --model " + Quote(Model("qwen3_5_moe")) + " --tokenizer " +
                        Quote(DataPath("fixtures/tokenizers/bytes")) + " --num-state-snapshots 1000000000000");
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("need more than this machine's"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("engine.num_state_snapshots"), std::string::npos) << r.err;
  }
  for (const char* bad : {"-1", "many"}) {
    auto r =
        RunCommand(Bin() + " serve --port 0 --model " + Quote(Model("qwen3_5_moe")) + " --num-state-snapshots " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("engine.num_state_snapshots"), std::string::npos) << r.err;
  }
}

// With --health-port, serve's start-up lines name the second port too (a probe or a person reading
// the log must know where /health answers outside the connection caps), and it answers there.
TEST(CliServe, PrintsTheHealthPortBesideTheMainOne) {
  // A port that was free a moment ago (bound, read, closed): the OS hands out ports in order, so the
  // chance another process takes it before serve binds it is small.
  auto r = RunCommand("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); "
                      "print(s.getsockname()[1])'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string health = r.out.substr(0, r.out.find('\n'));
  const std::string out = ScratchDir("cli-serve-health") + "/stdout";
  r = RunCommand("(" + Bin() + " serve --port 0 --health-port " + health + " --access-log '' --model " +
                 Quote(Model("qwen3_moe")) + " --tokenizer " + Quote(DataPath("fixtures/tokenizers/bytes")) + " >" +
                 out + " 2>&1 & p=$!; i=0; while [ $i -lt 600 ] && ! grep -q 'also on' " + out +
                 "; do sleep 0.1; i=$((i + 1)); done; python3 -c 'import urllib.request,sys; "
                 "print(\"health\", urllib.request.urlopen(\"http://127.0.0.1:" + health +
                 "/metrics\").status)'; kill -TERM $p; wait $p)");
  const std::string log = ReadFile(out);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << log;
  EXPECT_NE(log.find("tessera: listening on http://127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("tessera: /health and /metrics also on http://127.0.0.1:" + health + "\n"), std::string::npos)
      << log;
  EXPECT_NE(r.out.find("health 200"), std::string::npos) << r.out << r.err;
}

TEST(CliVerify, ReportsEachChecksumMismatch) {
  std::string dir = ScratchDir("cli-verify");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(Model("qwen3_moe") + "/" + f, dir + "/" + f);
  ASSERT_EQ(RunCommand("(cd " + dir + " && sha256sum config.json generation_config.json model.safetensors > SHA256SUMS)")
                .exit_code, 0);
  auto r = RunCommand(Bin() + " verify --model " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // Append a space to the generation config (still valid JSON) and flip one bit of the weights.
  WriteFile(dir + "/generation_config.json", ReadFile(Model("qwen3_moe") + "/generation_config.json") + " ");
  std::string w = ReadFile(dir + "/model.safetensors");
  w[w.size() - 3] ^= 0x01;
  WriteFile(dir + "/model.safetensors", w);
  r = RunCommand(Bin() + " verify --model " + dir + " --checksums-only");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("MISMATCH  generation_config.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MISMATCH  model.safetensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OK        config.json"), std::string::npos) << r.out;
}

TEST(CliBadInput, BrokenCheckpointsAreOneLineErrors) {
  auto broken = [](const std::string& name, const std::function<void(const std::string&)>& damage) {
    std::string dir = ScratchDir("cli-broken-" + name);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      fs::copy_file(Model("qwen3_moe") + "/" + f, dir + "/" + f);
    damage(dir);
    return dir;
  };
  std::vector<std::pair<std::string, std::string>> dirs = {
      {broken("truncated", [](const std::string& d) {
         std::string w = ReadFile(d + "/model.safetensors");
         WriteFile(d + "/model.safetensors", w.substr(0, w.size() / 2));
       }), "model.safetensors"},
      {broken("lying-header", [](const std::string& d) {
         std::string w = ReadFile(d + "/model.safetensors");
         w[0] = static_cast<char>(0xff);  // header length beyond the file
         w[5] = 0x01;
         WriteFile(d + "/model.safetensors", w);
       }), "model.safetensors"},
      {broken("config-syntax", [](const std::string& d) { WriteFile(d + "/config.json", "{\"model_type\": "); }),
       "config.json"},
      {broken("unknown-arch", [](const std::string& d) {
         std::string c = ReadFile(d + "/config.json");
         c.replace(c.find("\"qwen3_moe\""), 11, "\"mystery_lm\"");
         WriteFile(d + "/config.json", c);
       }), "mystery_lm"},
      {broken("no-weights", [](const std::string& d) { fs::remove(d + "/model.safetensors"); }), "safetensors"},
  };
  for (const auto& [dir, expect] : dirs) {
    auto r = RunCommand(Bin() + " generate --model " + dir + " --ids 1,2,3 --max-tokens 2");
    EXPECT_NE(r.exit_code, 0) << dir;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << dir << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << dir << "\n" << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << dir << "\n" << r.err;
  }
}

// A model directory with the byte-level tokenizer: complete end to end (text is noise).
std::string BytesModelDir() {
  std::string dir = ScratchDir("cli-bytes-model");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(Model("qwen3_moe") + "/" + f, dir + "/" + f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(DataPath("fixtures/tokenizers/bytes/") + f, dir + "/" + f);
  return dir;
}

TEST(CliTokenizer, BytesTokenizerMatchesGolden) {
  ordered g = ordered::parse(ReadFile(DataPath("fixtures/tokenizers/bytes/golden.json")));
  const std::string dir = DataPath("fixtures/tokenizers/bytes");
  for (const auto& e : g["encode"]) {
    std::string f = ScratchDir("cli-tok") + "/in.txt";
    WriteFile(f, e["text"].get<std::string>());
    auto r = RunCommand(Bin() + " tokenize --model " + dir + " --file " + f);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(ordered::parse(r.out), e["ids"]) << e["text"];
    r = RunCommand(Bin() + " detokenize --model " + dir + " --ids " + IdList(e["ids"]));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, e["decoded"].get<std::string>() + "\n");
  }
  for (const auto& c : g["chat"]) {
    std::string f = ScratchDir("cli-render") + "/req.json";
    WriteFile(f, c["input"].dump());
    auto r = RunCommand(Bin() + " render --model " + dir + " --request " + f);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, c["rendered"].get<std::string>());
  }
}

TEST(CliTokenizer, Qwen3GoldenThroughTheCli) {
  const std::string dir = NpmTokenizerDir("tokenizer-qwen3");
  if (!fs::exists(dir + "/tokenizer.json")) GTEST_SKIP() << "run scripts/fetch_test_data.sh (npm tokenizer data)";
  ordered g = ordered::parse(ReadFile(DataPath("fixtures/tokenizers/qwen3_golden.json")))["qwen3"];
  // Every golden is checked in process (tokenizer_golden_test.cpp, template_chat_test.cpp); through
  // the CLI a sample of them is (each command loads the 151k-token tokenizer: 27 starts took 30-50 s
  // of CI): every 6th encoding and three chat renderings (plain, with tools, with thinking).
  ordered encode = ordered::array(), chat = ordered::array();
  for (size_t i = 0; i < g["encode"].size(); i += 6) encode.push_back(g["encode"][i]);
  for (size_t i : {size_t{0}, size_t{2}, g["chat"].size() - 1}) chat.push_back(g["chat"][i]);
  ASSERT_GE(encode.size(), 3u);
  for (const auto& e : encode) {
    std::string f = ScratchDir("cli-qtok") + "/in.txt";
    WriteFile(f, e["text"].get<std::string>());
    auto r = RunCommand(Bin() + " tokenize --model " + dir + " --file " + f);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(ordered::parse(r.out), e["ids"]) << e["text"];
  }
  for (const auto& c : chat) {
    std::string f = ScratchDir("cli-qrender") + "/req.json";
    ordered req = c["input"];
    if (req.contains("enable_thinking")) {
      req["chat_template_kwargs"] = {{"enable_thinking", req["enable_thinking"]}};
      req.erase("enable_thinking");
    }
    WriteFile(f, req.dump());
    auto r = RunCommand(Bin() + " render --model " + dir + " --request " + f);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, c["rendered"].get<std::string>());
    std::string t = ScratchDir("cli-qrender-tok") + "/in.txt";
    WriteFile(t, r.out);
    auto ids = RunCommand(Bin() + " tokenize --model " + dir + " --file " + t);
    EXPECT_EQ(ordered::parse(ids.out), c["ids"]);
  }
}

TEST(CliTokenizer, TemplateThatRaisesIsAnError) {
  std::string dir = ScratchDir("cli-raise");
  fs::copy_file(DataPath("fixtures/tokenizers/bytes/tokenizer.json"), dir + "/tokenizer.json");
  WriteFile(dir + "/tokenizer_config.json",
            R"({"chat_template": "{% if messages[0].role != 'system' %}{{ raise_exception('first message must be system') }}{% endif %}", "eos_token": "<|im_end|>"})");
  WriteFile(dir + "/req.json", R"({"messages": [{"role": "user", "content": "hi"}]})");
  auto r = RunCommand(Bin() + " render --model " + dir + " --request " + dir + "/req.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128);
  EXPECT_NE(r.err.find("first message must be system"), std::string::npos) << r.err;
}

TEST(CliGenerate, ChatWithATokenizerStreamsTextAndStopsAtMaxTokens) {
  std::string dir = BytesModelDir();
  auto r = RunCommand(Bin() + " generate --model " + dir + " --chat hello --max-tokens 5 --temperature 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  // Sampled generation with a seed is reproducible.
  auto a = RunCommand(Bin() + " generate --model " + dir + " --prompt abc --max-tokens 8 --temperature 1 --seed 5 --output-ids");
  auto b = RunCommand(Bin() + " generate --model " + dir + " --prompt abc --max-tokens 8 --temperature 1 --seed 5 --output-ids");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

}  // namespace
}  // namespace tessera

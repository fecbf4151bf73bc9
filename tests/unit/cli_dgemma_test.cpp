// tessera tests: the command line with DiffusionGemma (`diffusion_gemma`): `generate` with the canvas
// sampler's flags on dummy weights of the tiny numpy checkpoint's config (the flags take effect: steps
// and canvases in --stats), the flags refused where they do not apply (exit 2, one line naming them),
// and `inspect` of the published full-size config (tests/data/configs/diffusiongemma-26b-a4b-it);
// `tessera serve` of the tiny checkpoint gets ready and answers a completion.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "dgemma_checkpoint.h"
#include "test_util.h"
#include "unit/server_http_fakes.h"

namespace tessera {
namespace {

using namespace tessera::testing;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string Generate(const std::string& args) {
  return TesseraBinary() + " generate --model " + Quote(DgemmaSelfcheckDir()) + " --ids 5,6,7,8 " + args;
}

TEST(CliDgemma, DummyWeightsGenerateWithTheCanvasFlags) {
  // 16 tokens in canvases of 8, 2 steps each (K = 1: no stop before the second step).
  auto r = RunCommand(Generate("--load-format dummy --max-tokens 16 --canvas-length 8 --max-denoising-steps 2 "
                               "--seed 3 --ignore-eos --output-ids --stats"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("denoising steps per block: [2,2]"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 16u) << r.out;
  // Every step a canvas: stable at once, confident below a loose bound.
  r = RunCommand(Generate("--load-format dummy --max-tokens 16 --stability-threshold 0 --confidence-threshold 50 "
                          "--t-min 0.5 --t-max 1.5 --entropy-bound 2 --ignore-eos --stats"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("denoising steps per block: [1]"), std::string::npos) << r.err;
  // The checkpoint has no tokenizer: without --output-ids the ids are printed all the same (one canvas).
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 16u) << r.out;
}

TEST(CliDgemma, FlagsThatDoNotApplyAreUsageErrors) {
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {"--steps 4", "--max-denoising-steps"},
      {"--block-size 8", "--canvas-length"},
      {"--policy threshold", "--policy"},
      {"--diffusion", "--diffusion"},
      {"--mask-token-id 3", "--mask-token-id"},
      {"--trace steps.jsonl", "--trace"},
      {"--canvas-length 17", "--canvas-length"},
      {"--canvas-length 0", "--canvas-length"},
      {"--t-min 0.9", "t_min"},
      {"--max-denoising-steps 0", "--max-denoising-steps"},
      {"--entropy-bound 0", "--entropy-bound"},
  };
  for (const Case& c : cases) {
    auto r = RunCommand(Generate(c.args));
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
  }
  // The canvas flags on another family.
  auto r = RunCommand(TesseraBinary() + " generate --model " + Quote(DataPath("fixtures/models/qwen3_moe")) +
                      " --ids 1,2,3 --max-denoising-steps 4");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("canvas-diffusion"), std::string::npos) << r.err;
}

// The published config: 30 layers (25 sliding-window, 5 global), 128 experts top-8, parameters as the
// model cards give them (25.2B total, 3.8B active; inspect counts the text model).
TEST(CliDgemma, InspectsThePublishedFullSizeConfig) {
  const std::string dir = DataPath("configs/diffusiongemma-26b-a4b-it");
  auto r = RunCommand(TesseraBinary() + " inspect --model " + Quote(dir) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layers"]["sliding_window"].get<int64_t>(), 25) << r.out;
  EXPECT_NEAR(j["total_params"].get<double>(), 25.2e9, 0.1e9) << r.out;
  EXPECT_NEAR(j["active_params"].get<double>(), 3.8e9, 0.1e9) << r.out;
  r = RunCommand(TesseraBinary() + " inspect --model " + Quote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("30 (30 attention: 25 sliding-window, 5 global"), std::string::npos) << r.out;
}

// The server's warm-up request must be one a canvas model takes: it was greedy (temperature 0), which
// the canvas sampler refuses, so every `tessera serve` of a DiffusionGemma model exited before ready.
TEST(CliDgemma, ServeGetsReadyAndAnswers) {
  const std::string dir = ScratchDir("cli-dgemma-serve"), log = dir + "/log";
  RunCommand("(" + TesseraBinary() + " serve --port 0 --access-log '' --model " + Quote(DgemmaSelfcheckDir()) +
             " --tokenizer " + Quote(DataPath("fixtures/tokenizers/bytes")) + " >" + Quote(log) +
             " 2>&1 </dev/null & echo $! >" + Quote(dir + "/pid") + ")");
  const int pid = std::atoi(ReadFile(dir + "/pid").c_str());
  ASSERT_GT(pid, 0);
  struct Stop {  // SIGTERM drains and exits; the test does not leave it behind
    int pid;
    ~Stop() {
      ::kill(pid, SIGTERM);
      for (int i = 0; i < 300 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } stop{pid};
  int port = 0;
  bool ready = false;
  const std::string mark = "listening on http://127.0.0.1:";
  // Until ready, or until the server has exited (its warm-up failed).
  for (int i = 0; i < 1200 && !ready && ::kill(pid, 0) == 0; ++i) {
    const std::string text = std::filesystem::exists(log) ? ReadFile(log) : "";
    if (size_t at = text.find(mark); port == 0 && at != std::string::npos)
      port = std::atoi(text.c_str() + at + mark.size());
    ready = port > 0 && testing_server::Call(port, "GET", "/health").status == 200;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string text = std::filesystem::exists(log) ? ReadFile(log) : "(no log)";
  ASSERT_TRUE(ready) << text;
  EXPECT_NE(text.find("(canvas diffusion)"), std::string::npos) << text;
  // One canvas (16 tokens) at the sampler's own temperature, as a request must ask for it.
  const nlohmann::json body = {{"prompt", {5, 6, 7, 8}}, {"max_tokens", 16}, {"temperature", 1}, {"ignore_eos", true}};
  const testing_server::HttpResponse r = testing_server::Call(port, "POST", "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["usage"]["completion_tokens"].get<int64_t>(), 16) << r.body;
}

}  // namespace
}  // namespace tessera

// tessera tests: a canvas-diffusion model (the tiny numpy DiffusionGemma checkpoint: canvas 16, vocab
// 512) in a real engine behind the HTTP server: the `diffusion` object's knobs take effect (the steps
// per canvas and the canvases a request took, read from /metrics' steps-per-block histogram, which
// counts canvas models' canvases too), the seed decides the output, and refused fields are 400s before
// anything runs. The prompts are bytes as ids (the fake prompt builder); the demo model's tokenizer
// gives the output ids their text.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include "dgemma_checkpoint.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"
#include "unit/server_http_fakes.h"

namespace tessera {
namespace {

using namespace testing_server;

class ServerDgemmaHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    model = Model::Load(testing::DgemmaSelfcheckDir());
    tokenizer = Tokenizer::FromDir(std::string(TESSERA_SOURCE_DIR) + "/models/demo");
    EngineConfig ec;
    ec.num_pages = 256;
    ec.page_size = 4;
    ec.served_model_name = "dg";
    ec.canvas.max_denoising_steps = 4;  // the server's default for requests that leave it out
    ec.canvas.stability_threshold = 4;  // no early stop within 4 steps: every canvas takes them all
    engine = std::make_unique<Engine>(model.get(), tokenizer.get(), ec);
    engine->Start();
    engine->SetReady(true);
    ServerConfig cfg;
    cfg.server.port = 0;
    cfg.server.threads = 2;
    cfg.server.access_log = "";
    server = std::make_unique<HttpServer>(cfg, *engine, prompts);
    server->Start();
    port = server->port();
  }
  void TearDown() override {
    if (server) server->Stop();
    if (engine) engine->Stop();
  }
  // A completion of `max_tokens` (end tokens ignored: the random model's would vary the lengths).
  HttpResponse Complete(const ojson& diffusion, uint64_t seed = 7, int64_t max_tokens = 16) {
    ojson b = {{"model", "dg"}, {"prompt", "Why is the sky blue?"}, {"max_tokens", max_tokens},
               {"seed", seed},  {"ignore_eos", true}};
    if (!diffusion.is_null()) b["diffusion"] = diffusion;
    return Call(port, "POST", "/v1/completions", b.dump());
  }
  std::string Text(const HttpResponse& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    ojson j = ojson::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("choices")) return "";
    return j["choices"][0]["text"].get<std::string>();
  }
  // The steps-per-block histogram's sum and count (canvases) so far.
  std::pair<double, double> StepsPerCanvas() {
    std::istringstream in(Call(port, "GET", "/metrics").body);
    std::pair<double, double> out{-1, -1};
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("tessera_diffusion_steps_per_block_sum ", 0) == 0) out.first = std::stod(line.substr(line.find(' ')));
      if (line.rfind("tessera_diffusion_steps_per_block_count ", 0) == 0)
        out.second = std::stod(line.substr(line.find(' ')));
    }
    return out;
  }
  // Steps and canvases one request added.
  std::pair<double, double> Delta(const ojson& diffusion, int64_t max_tokens = 16) {
    const auto before = StepsPerCanvas();
    Text(Complete(diffusion, 7, max_tokens));
    const auto after = StepsPerCanvas();
    return {after.first - before.first, after.second - before.second};
  }

  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  FakePromptBuilder prompts;
  std::unique_ptr<HttpServer> server;
  int port = 0;
};

TEST_F(ServerDgemmaHttp, DiffusionKnobsTakeEffect) {
  // The engine's default: 4 steps for the one canvas of 16 tokens.
  EXPECT_EQ(Delta(nullptr), std::make_pair(4.0, 1.0));
  // max_denoising_steps: 2 a canvas; 7.
  EXPECT_EQ(Delta({{"max_denoising_steps", 2}}), std::make_pair(2.0, 1.0));
  EXPECT_EQ(Delta({{"max_denoising_steps", 7}}), std::make_pair(7.0, 1.0));
  // canvas_length: 16 tokens in canvases of 8 are two canvases.
  EXPECT_EQ(Delta({{"canvas_length", 8}}), std::make_pair(8.0, 2.0));
  // The stopping thresholds: stable at once (0) and confident below a loose bound: one step.
  EXPECT_EQ(Delta({{"stability_threshold", 0}, {"confidence_threshold", 50}}), std::make_pair(1.0, 1.0));
  // The temperatures and the entropy bound change what is sampled and accepted, so the text.
  const std::string base = Text(Complete(nullptr));
  EXPECT_EQ(Text(Complete(nullptr)), base) << "the same seed, the same text";
  EXPECT_NE(Text(Complete({{"t_min", 1.5}, {"t_max", 3.0}})), base);
  EXPECT_NE(Text(Complete({{"entropy_bound", 1e5}})), base);
}

TEST_F(ServerDgemmaHttp, TheSeedDecidesTheOutput) {
  const std::string a = Text(Complete(nullptr, 1)), b = Text(Complete(nullptr, 2));
  EXPECT_FALSE(a.empty());
  EXPECT_NE(a, b);
  EXPECT_EQ(Text(Complete(nullptr, 1)), a);
}

TEST_F(ServerDgemmaHttp, RefusedFieldsAre400s) {
  auto refused = [&](const ojson& d, const std::string& param) {
    HttpResponse r = Complete(d);
    EXPECT_EQ(r.status, 400) << r.body;
    ojson j = ojson::parse(r.body, nullptr, false);
    EXPECT_EQ(j["error"]["param"], param) << r.body;
  };
  refused({{"steps", 4}}, "diffusion.steps");
  refused({{"block_size", 4}}, "diffusion.block_size");
  refused({{"policy", "static"}}, "diffusion.policy");
  refused({{"canvas_length", 17}}, "diffusion.canvas_length");
  refused({{"max_denoising_steps", 0}}, "diffusion.max_denoising_steps");
  refused({{"t_min", 0.8}}, "diffusion.t_min");
  EXPECT_EQ(StepsPerCanvas().second, 0) << "nothing ran";
}

}  // namespace
}  // namespace tessera

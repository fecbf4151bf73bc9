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

// n choices of one canvas request share its prompt and draw their own canvases: choice 0 is the n = 1
// request's output for the seed, the others differ from it.
TEST_F(ServerDgemmaHttp, ChoicesDrawTheirOwnCanvases) {
  const std::string one = Text(Complete(nullptr, 5));
  ojson b = {{"model", "dg"}, {"prompt", "Why is the sky blue?"}, {"max_tokens", 16}, {"seed", 5},
             {"ignore_eos", true}, {"n", 3}};
  const HttpResponse r = Call(port, "POST", "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson j = ojson::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 3u) << r.body;
  std::vector<std::string> texts(3);
  for (const ojson& c : j["choices"]) texts.at(c["index"].get<size_t>()) = c["text"].get<std::string>();
  EXPECT_EQ(texts[0], one);
  EXPECT_NE(texts[1], one);
  EXPECT_NE(texts[2], texts[1]);
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int64_t>(), 3 * 16) << "every choice counted" << r.body;
}

TEST_F(ServerDgemmaHttp, TheSeedDecidesTheOutput) {
  const std::string a = Text(Complete(nullptr, 1)), b = Text(Complete(nullptr, 2));
  EXPECT_FALSE(a.empty());
  EXPECT_NE(a, b);
  EXPECT_EQ(Text(Complete(nullptr, 1)), a);
}

// stream_steps: every denoising step of every canvas is a `diffusion_step` event with the canvas's
// argmax at its absolute position (every cell has text: no masks), the rows it accepted and their
// probabilities; the last step of each canvas is what the canvas commits, so the steps' last canvases
// decode to the streamed text, which equals the same request's without the events.
TEST_F(ServerDgemmaHttp, StreamStepsShowsEveryCanvasStep) {
  ojson b = {{"model", "dg"},  {"prompt", "Why is the sky blue?"}, {"max_tokens", 32}, {"seed", 7},
             {"ignore_eos", true}, {"stream", true}, {"diffusion", {{"stream_steps", true}}}};
  HttpResponse r = Call(port, "POST", "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<SseEvent> events;
  ASSERT_TRUE(ParseSse(r.body, events)) << r.body;
  std::string text;
  std::vector<ojson> steps;
  for (const SseEvent& e : events) {
    if (e.data == "[DONE]") continue;
    ojson j = ojson::parse(e.data);
    if (e.event == "diffusion_step") {
      steps.push_back(j);
    } else if (j.contains("choices") && !j["choices"].empty() && j["choices"][0]["text"].is_string()) {
      text += j["choices"][0]["text"].get<std::string>();
    }
  }
  ASSERT_EQ(steps.size(), 8u) << "2 canvases of 16 x 4 steps (no early stop in the fixture's settings)";
  std::vector<int32_t> committed;
  int64_t first_start = -1;
  for (size_t i = 0; i < steps.size(); ++i) {
    const ojson& st = steps[i];
    SCOPED_TRACE(st.dump());
    EXPECT_EQ(st["index"], 0);
    EXPECT_EQ(st["step"], static_cast<int64_t>(i % 4));
    const auto tokens = st["block_tokens"].get<std::vector<int32_t>>();
    ASSERT_EQ(tokens.size(), 16u);
    ASSERT_EQ(st["block_text"].size(), 16u);
    for (const ojson& cell : st["block_text"]) EXPECT_TRUE(cell.is_string()) << "a canvas has no masked cells";
    const int64_t start = st["block_start"];
    if (first_start < 0) first_start = start;
    EXPECT_EQ(start, first_start + static_cast<int64_t>(i / 4) * 16) << "the second canvas follows the first";
    const auto unmasked = st["unmasked"].get<std::vector<int64_t>>();
    const auto conf = st["conf"].get<std::vector<float>>();
    ASSERT_EQ(unmasked.size(), conf.size());
    EXPECT_FALSE(unmasked.empty()) << "a step accepts at least its lowest-entropy row";
    for (size_t k = 0; k < unmasked.size(); ++k) {
      EXPECT_GE(unmasked[k], start);
      EXPECT_LT(unmasked[k], start + 16);
      EXPECT_GT(conf[k], 0.f);
      EXPECT_LE(conf[k], 1.f);
    }
    if (i % 4 == 3) committed.insert(committed.end(), tokens.begin(), tokens.end());
  }
  EXPECT_GT(first_start, 0) << "after the prompt";
  EXPECT_EQ(text, tokenizer->Decode(committed)) << "the last step of each canvas is what it commits";
  EXPECT_EQ(text, Text(Complete(nullptr, 7, 32))) << "the events change nothing";
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

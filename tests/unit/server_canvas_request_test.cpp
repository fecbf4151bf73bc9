// tessera tests: the `diffusion` object of a canvas-diffusion model (DiffusionGemma): each sampler knob
// of generation_config.json (and the canvas length) overrides the model's default, a value out of range
// is a 400 naming the field, `stream_steps` is taken (a bool), a field of the other diffusion family
// (block_size, steps, policy, threshold) is a 400 naming it, and the canvas knobs are refused by masked
// block-diffusion and autoregressive models. Through the HTTP server (fake engine): the knobs reach the
// engine's request and /v1/models lists the defaults. server_dgemma_http_test.cpp shows them taking
// effect in a real engine.
#include <gtest/gtest.h>

#include <string>

#include "server/openai_protocol.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"

namespace tessera {
namespace {

using namespace testing_server;

EngineModelInfo CanvasModel() {
  EngineModelInfo info;
  info.name = "dg";
  info.max_model_len = 4096;
  info.vocab_size = 1000;
  info.canvas_length = 256;
  info.canvas_defaults.canvas_length = 256;  // the published generation_config.json's, as the engine resolves them
  return info;
}

ojson Cmpl(const ojson& diffusion) {
  ojson b = {{"model", "dg"}, {"prompt", "abc"}};
  if (!diffusion.is_null()) b["diffusion"] = diffusion;
  return b;
}

ParsedRequest Parse(const ojson& diffusion, const EngineModelInfo& info = CanvasModel()) {
  return ParseCompletionRequest(Cmpl(diffusion), info, DiffusionParams{});
}

// The 400 a `diffusion` object gets: its param, and the message (which names the same field).
std::string Refusal(const ojson& diffusion, const std::string& param, const EngineModelInfo& info = CanvasModel()) {
  try {
    Parse(diffusion, info);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.message;
    EXPECT_EQ(e.param, param) << e.message;
    EXPECT_NE(e.message.find(param), std::string::npos) << e.message;
    return e.message;
  }
  ADD_FAILURE() << "accepted: " << diffusion.dump();
  return "";
}

TEST(CanvasRequest, WithoutTheObjectTheEngineDefaultsApply) {
  EXPECT_FALSE(Parse(nullptr).canvas.has_value());
  EXPECT_FALSE(Parse(nullptr).diffusion.has_value()) << "not a masked-diffusion request";
  // An empty object (or only nulls) is the defaults, whole.
  ParsedRequest r = Parse(ojson::object({{"t_min", nullptr}, {"steps", nullptr}}));
  ASSERT_TRUE(r.canvas.has_value());
  EXPECT_EQ(r.canvas->max_denoising_steps, 48);
  EXPECT_EQ(r.canvas->canvas_length, 256);
}

TEST(CanvasRequest, EveryKnobOverridesItsDefault) {
  ParsedRequest r = Parse({{"canvas_length", 64},
                           {"max_denoising_steps", 16},
                           {"entropy_bound", 0.5},
                           {"t_min", 0.1},
                           {"t_max", 1.5},
                           {"stability_threshold", 0},
                           {"confidence_threshold", 0.02}});
  ASSERT_TRUE(r.canvas.has_value());
  const CanvasSamplerParams& c = *r.canvas;
  EXPECT_EQ(c.canvas_length, 64);
  EXPECT_EQ(c.max_denoising_steps, 16);
  EXPECT_DOUBLE_EQ(c.entropy_bound, 0.5);
  EXPECT_DOUBLE_EQ(c.t_min, 0.1);
  EXPECT_DOUBLE_EQ(c.t_max, 1.5);
  EXPECT_EQ(c.stability_threshold, 0);
  EXPECT_DOUBLE_EQ(c.confidence_threshold, 0.02);
  // One knob alone leaves the others at the model's defaults.
  ParsedRequest one = Parse({{"max_denoising_steps", 8}});
  EXPECT_EQ(one.canvas->max_denoising_steps, 8);
  EXPECT_DOUBLE_EQ(one.canvas->t_max, 0.8);
  EXPECT_DOUBLE_EQ(one.canvas->entropy_bound, 0.1);
  EXPECT_EQ(one.canvas->canvas_length, 256);
}

TEST(CanvasRequest, OutOfRangeIsA400NamingTheField) {
  Refusal({{"canvas_length", 0}}, "diffusion.canvas_length");
  const std::string big = Refusal({{"canvas_length", 257}}, "diffusion.canvas_length");
  EXPECT_NE(big.find("256"), std::string::npos) << "the model's canvas is the most: " << big;
  Refusal({{"max_denoising_steps", 0}}, "diffusion.max_denoising_steps");
  Refusal({{"max_denoising_steps", 5000}}, "diffusion.max_denoising_steps");
  Refusal({{"max_denoising_steps", 2.5}}, "diffusion.max_denoising_steps");
  Refusal({{"entropy_bound", 0}}, "diffusion.entropy_bound");
  Refusal({{"entropy_bound", -1}}, "diffusion.entropy_bound");
  Refusal({{"t_min", -0.1}}, "diffusion.t_min");
  Refusal({{"t_max", 0}}, "diffusion.t_max");
  Refusal({{"t_max", 1000}}, "diffusion.t_max");
  Refusal({{"stability_threshold", -1}}, "diffusion.stability_threshold");
  Refusal({{"confidence_threshold", 0}}, "diffusion.confidence_threshold");
  Refusal({{"confidence_threshold", "high"}}, "diffusion.confidence_threshold");
  // t_min < t_max, against the default of the other one: the field sent is named.
  const std::string hot = Refusal({{"t_min", 0.9}}, "diffusion.t_min");
  EXPECT_NE(hot.find("t_max"), std::string::npos) << hot;
  Refusal({{"t_max", 0.3}}, "diffusion.t_max");
  Refusal({{"t_min", 0.5}, {"t_max", 0.5}}, "diffusion.t_min");
  EXPECT_DOUBLE_EQ(Parse({{"t_min", 0.9}, {"t_max", 1.0}}).canvas->t_min, 0.9) << "both moved together";
  // Not an object; an unknown field.
  try {
    ParseCompletionRequest(ojson{{"model", "dg"}, {"prompt", "a"}, {"diffusion", 3}}, CanvasModel(), DiffusionParams{});
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "diffusion");
  }
  Refusal({{"temperature", 0.5}}, "diffusion.temperature");
}

TEST(CanvasRequest, MaskedDiffusionFieldsAreRefusedByName) {
  // The canvas sampler's own names are suggested for the two that have one.
  EXPECT_NE(Refusal({{"steps", 8}}, "diffusion.steps").find("max_denoising_steps"), std::string::npos);
  EXPECT_NE(Refusal({{"block_size", 32}}, "diffusion.block_size").find("canvas_length"), std::string::npos);
  Refusal({{"policy", "threshold"}}, "diffusion.policy");
  Refusal({{"threshold", 0.9}}, "diffusion.threshold");
}

TEST(CanvasRequest, StreamStepsIsABool) {
  EXPECT_TRUE(Parse({{"stream_steps", true}}).stream_steps);
  EXPECT_FALSE(Parse({{"stream_steps", false}}).stream_steps);
  EXPECT_FALSE(Parse({{"t_max", 1.0}}).stream_steps);
  Refusal({{"stream_steps", "yes"}}, "diffusion.stream_steps");
}

TEST(CanvasRequest, OtherFamiliesRefuseTheCanvasKnobs) {
  EngineModelInfo masked;
  masked.name = "dg";
  masked.max_model_len = 4096;
  masked.vocab_size = 1000;
  masked.diffusion = true;
  for (const char* k : {"canvas_length", "max_denoising_steps", "entropy_bound", "t_min", "t_max",
                        "stability_threshold", "confidence_threshold"}) {
    const std::string msg = Refusal({{k, 1}}, std::string("diffusion.") + k, masked);
    EXPECT_NE(msg.find("canvas"), std::string::npos) << msg;
  }
  EXPECT_EQ(Parse({{"steps", 2}, {"block_size", 4}}, masked).diffusion->steps, 2) << "its own fields still work";
  EngineModelInfo ar = masked;
  ar.diffusion = false;
  Refusal({{"max_denoising_steps", 4}}, "diffusion", ar);
}

class ServerCanvasRequest : public FakeServerTest {
 protected:
  void SetUp() override {
    FakeServerTest::SetUp();
    engine.info = CanvasModel();
    engine.info.name = "fake-moe";
  }
  HttpResponse Post(const ojson& body) { return Call(port, "POST", "/v1/completions", body.dump()); }
  static ojson Body(const ojson& diffusion) {
    ojson b = {{"model", "fake-moe"}, {"prompt", "abc"}, {"diffusion", diffusion}};
    return b;
  }
};

TEST_F(ServerCanvasRequest, KnobsReachTheEngineAndTheDefaultsAreListed) {
  Start();
  auto r = Post(Body({{"max_denoising_steps", 12}, {"canvas_length", 32}, {"t_max", 1.2}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const GenerationRequest last = engine.last();
  ASSERT_TRUE(last.canvas.has_value());
  EXPECT_EQ(last.canvas->max_denoising_steps, 12);
  EXPECT_EQ(last.canvas->canvas_length, 32);
  EXPECT_DOUBLE_EQ(last.canvas->t_max, 1.2);
  EXPECT_DOUBLE_EQ(last.canvas->t_min, 0.4);
  EXPECT_FALSE(last.diffusion.has_value());
  ExpectApiError(Post(Body({{"steps", 12}})), 400, "diffusion.steps");
  ExpectApiError(Post(Body({{"t_min", 2.0}})), 400, "diffusion.t_min");
  ojson models = ojson::parse(Call(port, "GET", "/v1/models").body);
  const ojson& c = models["data"][0]["canvas"];
  EXPECT_EQ(c["canvas_length"], 256) << models.dump();
  EXPECT_EQ(c["max_denoising_steps"], 48);
  EXPECT_EQ(c["stability_threshold"], 1);
  EXPECT_FALSE(models["data"][0].contains("diffusion")) << "not a masked-diffusion model";
}

}  // namespace
}  // namespace tessera

// tessera tests: the server's side of the sampling API over real sockets with the fake engine: n
// choices (whole responses and streams, indices, usage summed as OpenAI does), logit_bias,
// router_temperature, stop_token_ids, echo, continuous usage, parallel_tool_calls, diffusion
// logprobs, and the audit of request fields: every field is known and takes effect, is metadata, or
// is refused with a 400 naming it.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>

#include "server/openai_protocol.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"

namespace tessera {
namespace {

using namespace testing_server;

class ServerSamplingApi : public FakeServerTest {
 protected:
  HttpResponse Post(const std::string& path, const ojson& body) { return Call(port, "POST", path, body.dump()); }
  static ojson Chat(ojson extra = ojson::object()) {
    ojson b = {{"model", "fake-moe"}, {"messages", ojson::array({{{"role", "user"}, {"content", "Hi"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  static ojson Cmpl(ojson extra = ojson::object()) {
    ojson b = {{"model", "fake-moe"}, {"prompt", "abc"}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  // The JSON chunks of a stream (without [DONE], which must end it).
  static std::vector<ojson> Chunks(const HttpResponse& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<SseEvent> evs;
    EXPECT_TRUE(ParseSse(r.body, evs));
    EXPECT_FALSE(evs.empty());
    if (evs.empty()) return {};
    EXPECT_EQ(evs.back().data, "[DONE]");
    std::vector<ojson> out;
    for (size_t i = 0; i + 1 < evs.size(); ++i)
      if (evs[i].event.empty()) out.push_back(ojson::parse(evs[i].data));
    return out;
  }
};

TEST_F(ServerSamplingApi, ChatChoicesHaveIndicesAndUsageSumsTheirTokens) {
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"n", 3}, {"seed", 11}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 3u);
  std::set<std::string> contents;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["finish_reason"], "stop");
    contents.insert(j["choices"][i]["message"]["content"].get<std::string>());
  }
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, world!");
  EXPECT_EQ(j["choices"][2]["message"]["content"], "Hello#2,#2 world#2!#2");
  EXPECT_EQ(contents.size(), 3u);
  // The prompt counts once, its cache hits are the first choice's; completion tokens add up.
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 18);
  EXPECT_EQ(j["usage"]["total_tokens"], 30);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  // One engine request with n choices and the client's seed (the engine derives one per choice).
  EXPECT_EQ(engine.num_submitted(), 1u);
  EXPECT_EQ(engine.last().n, 3);
  EXPECT_EQ(engine.last().sampling.seed, 11u);
}

TEST_F(ServerSamplingApi, StreamedChoicesCarryTheirIndex) {
  Start();
  auto chunks = Chunks(
      Post("/v1/chat/completions", Chat({{"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}})));
  std::map<int, std::string> text;
  std::map<int, int> roles, finishes;
  ojson usage;
  for (const ojson& c : chunks) {
    if (c["choices"].empty()) {
      usage = c["usage"];
      continue;
    }
    ASSERT_EQ(c["choices"].size(), 1u);
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    const ojson& ch = c["choices"][0];
    const int i = ch["index"].get<int>();
    if (ch["delta"].contains("role")) roles[i]++;
    if (ch["delta"].contains("content")) text[i] += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finishes[i]++;
  }
  EXPECT_EQ(text[0], "Hello, world!");
  EXPECT_EQ(text[1], "Hello#1,#1 world#1!#1");
  EXPECT_EQ(roles, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(usage["completion_tokens"], 8);
}

TEST_F(ServerSamplingApi, CompletionChoicesStreamedAndWhole) {
  Start();
  ojson j = ojson::parse(Post("/v1/completions", Cmpl({{"n", 2}})).body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "Hello#1,#1 world#1!#1");
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  std::map<int, std::string> text;
  for (const ojson& c : Chunks(Post("/v1/completions", Cmpl({{"n", 2}, {"stream", true}}))))
    for (const ojson& ch : c["choices"]) text[ch["index"].get<int>()] += ch["text"].get<std::string>();
  EXPECT_EQ(text[0], "Hello, world!");
  EXPECT_EQ(text[1], "Hello#1,#1 world#1!#1");
}

TEST_F(ServerSamplingApi, ChoiceLimitsAndBestOf) {
  Start();
  ExpectApiError(Post("/v1/chat/completions", Chat({{"n", 0}})), 400, "n");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"n", kMaxChoicesPerRequest + 1}})), 400, "n");
  ExpectApiError(Post("/v1/completions", Cmpl({{"best_of", 3}})), 400, "best_of");
  ExpectApiError(Post("/v1/completions", Cmpl({{"best_of", 1}, {"n", 2}})), 400, "best_of");
  EXPECT_EQ(Post("/v1/completions", Cmpl({{"best_of", 1}})).status, 200);
  EXPECT_EQ(Post("/v1/chat/completions", Chat({{"n", kMaxChoicesPerRequest}})).status, 200);
  EXPECT_EQ(engine.num_submitted(), 2u);
}

TEST_F(ServerSamplingApi, LogitBiasIsPassedOnAndChecked) {
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"logit_bias", {{"5", 100}, {"17", -3.5}}}})).status, 200);
  const auto bias = engine.last().sampling.logit_bias;
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{5, 100.f}, {17, -3.5f}}));
  ASSERT_EQ(Post("/v1/completions", Cmpl({{"logit_bias", {{"999", -100}}}})).status, 200);
  EXPECT_EQ(engine.last().sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{999, -100.f}}));
  for (const ojson& bad :
       {ojson{{"abc", 1}}, ojson{{"1000", 1}}, ojson{{"-1", 1}}, ojson{{"5", 101}}, ojson{{"5", "x"}},
        ojson{{"5", true}}, ojson{{"", 1}}, ojson{{" 5", 1}}, ojson{{"99999999999", 1}}, ojson(ojson::array({1}))}) {
    SCOPED_TRACE(bad.dump());
    ExpectApiError(Post("/v1/chat/completions", Chat({{"logit_bias", bad}})), 400, "logit_bias");
  }
  EXPECT_EQ(engine.num_submitted(), 2u);
}

TEST_F(ServerSamplingApi, RouterTemperature) {
  engine.info.num_experts = 8;
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"router_temperature", 1.5}})).status, 200);
  EXPECT_EQ(engine.last().router_temperature, std::optional<float>(1.5f));
  ASSERT_EQ(Post("/v1/completions", Cmpl({{"router_temperature", 0.05}})).status, 200);
  EXPECT_EQ(engine.last().router_temperature, std::optional<float>(0.05f));
  ASSERT_EQ(Post("/v1/completions", Cmpl()).status, 200);
  EXPECT_FALSE(engine.last().router_temperature.has_value());  // the engine's default applies
  for (const ojson& bad : {ojson(0), ojson(0.01), ojson(-1), ojson(25), ojson("hot"), ojson(true)})
    ExpectApiError(Post("/v1/chat/completions", Chat({{"router_temperature", bad}})), 400, "router_temperature");
  engine.info.num_experts = 0;  // a dense model: there is no router
  ExpectApiError(Post("/v1/chat/completions", Chat({{"router_temperature", 1}})), 400, "router_temperature");
}

TEST_F(ServerSamplingApi, StopTokenIds) {
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"stop_token_ids", {7, 9}}})).status, 200);
  EXPECT_EQ(engine.last().sampling.stop_token_ids, (std::vector<int32_t>{7, 9}));
  ExpectApiError(Post("/v1/chat/completions", Chat({{"stop_token_ids", {1000}}})), 400, "stop_token_ids");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"stop_token_ids", "7"}})), 400, "stop_token_ids");
}

TEST_F(ServerSamplingApi, EchoOpensEveryChoiceWithThePrompt) {
  Start();
  ojson j = ojson::parse(Post("/v1/completions", Cmpl({{"echo", true}, {"n", 2}})).body);
  EXPECT_EQ(j["choices"][0]["text"], "abcHello, world!");
  EXPECT_EQ(j["choices"][1]["text"], "abcHello#1,#1 world#1!#1");
  // A prompt of ids echoes its decoded text.
  j = ojson::parse(Post("/v1/completions", Cmpl({{"echo", true}, {"prompt", {5, 6}}})).body);
  EXPECT_EQ(j["choices"][0]["text"], "<5><6>Hello, world!");
  auto chunks = Chunks(Post("/v1/completions", Cmpl({{"echo", true}, {"stream", true}})));
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0]["choices"][0]["text"], "abc");
  // echo false is the plain completion.
  j = ojson::parse(Post("/v1/completions", Cmpl({{"echo", false}})).body);
  EXPECT_EQ(j["choices"][0]["text"], "Hello, world!");
}

TEST_F(ServerSamplingApi, ContinuousUsageStats) {
  Start();
  auto chunks = Chunks(
      Post("/v1/chat/completions",
           Chat({{"stream", true}, {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}})));
  int64_t last = -1;
  for (const ojson& c : chunks) {
    ASSERT_TRUE(c["usage"].is_object()) << c.dump();
    const int64_t done = c["usage"]["completion_tokens"].get<int64_t>();
    EXPECT_GE(done, last);
    EXPECT_EQ(c["usage"]["total_tokens"], c["usage"]["prompt_tokens"].get<int64_t>() + done);
    last = done;
  }
  EXPECT_EQ(last, 4);
  ExpectApiError(
      Post("/v1/chat/completions", Chat({{"stream", true}, {"stream_options", {{"continuous_usage_stats", "yes"}}}})),
      400, "stream_options.continuous_usage_stats");
  // Without include_usage there is no usage field to carry it: refused rather than ignored.
  ExpectApiError(
      Post("/v1/chat/completions", Chat({{"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}})),
      400, "stream_options.continuous_usage_stats");
}

TEST_F(ServerSamplingApi, ParallelToolCallsFalseKeepsTheFirstCall) {
  const ojson tools = ojson::array(
      {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
  engine.script = {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                   "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"};
  Start();
  ojson both = ojson::parse(Post("/v1/chat/completions", Chat({{"tools", tools}})).body);
  EXPECT_EQ(both["choices"][0]["message"]["tool_calls"].size(), 2u);
  ojson one = ojson::parse(Post("/v1/chat/completions", Chat({{"tools", tools}, {"parallel_tool_calls", false}})).body);
  ASSERT_EQ(one["choices"][0]["message"]["tool_calls"].size(), 1u) << one.dump();
  EXPECT_EQ(one["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(one["choices"][0]["finish_reason"], "tool_calls");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"parallel_tool_calls", "no"}})), 400, "parallel_tool_calls");
}

TEST_F(ServerSamplingApi, DiffusionLogprobsWithoutAlternatives) {
  engine.info.diffusion = true;
  engine.info.default_diffusion.block_size = 4;
  engine.info.default_diffusion.steps = 2;
  engine.info.default_diffusion.mask_token_id = 999;
  engine.with_logprobs = true;
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"logprobs", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ojson::parse(r.body)["choices"][0]["logprobs"]["content"].size(), 4u);
  EXPECT_EQ(engine.last().sampling.top_logprobs, 0);
  EXPECT_EQ(Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 0}})).status, 200);
  EXPECT_EQ(Post("/v1/completions", Cmpl({{"logprobs", 0}})).status, 200);
  const std::string msg = ExpectApiError(Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 2}})),
                                         400, "top_logprobs");
  EXPECT_NE(msg.find("diffusion"), std::string::npos) << msg;
  ExpectApiError(Post("/v1/completions", Cmpl({{"logprobs", 2}})), 400, "logprobs");
}

TEST_F(ServerSamplingApi, EveryFieldIsKnownOrRefused) {
  Start();
  // Unknown fields: OpenAI's "Unrecognized request argument", naming the field.
  const std::string msg = ExpectApiError(Post("/v1/chat/completions", Chat({{"temperatur", 0.5}})), 400, "temperatur");
  EXPECT_NE(msg.find("Unrecognized request argument supplied: temperatur"), std::string::npos) << msg;
  ExpectApiError(Post("/v1/chat/completions", Chat({{"guided_json", ojson::object()}})), 400, "guided_json");
  // Fields of the other endpoint are unknown here.
  ExpectApiError(Post("/v1/chat/completions", Chat({{"echo", true}})), 400, "echo");
  ExpectApiError(Post("/v1/completions", Cmpl({{"top_logprobs", 2}})), 400, "top_logprobs");
  ExpectApiError(Post("/v1/completions", Cmpl({{"tools", ojson::array()}})), 400, "tools");
  // Known OpenAI fields tessera cannot honour say why.
  for (const char* f :
       {"audio", "prediction", "reasoning_effort", "verbosity", "web_search_options", "functions", "function_call"}) {
    SCOPED_TRACE(f);
    const std::string why = ExpectApiError(Post("/v1/chat/completions", Chat({{f, "x"}})), 400, f);
    EXPECT_EQ(why.find("Unrecognized"), std::string::npos) << why;
  }
  ExpectApiError(Post("/v1/chat/completions", Chat({{"modalities", {"text", "audio"}}})), 400, "modalities");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"service_tier", "flex"}})), 400, "service_tier");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"metadata", {{"k", 1}}}})), 400, "metadata");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"store", "yes"}})), 400, "store");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"user", 5}})), 400, "user");
  ExpectApiError(Post("/v1/completions", Cmpl({{"suffix", "tail"}})), 400, "suffix");
  EXPECT_EQ(engine.num_submitted(), 0u);
  // Metadata: accepted, no effect on what the engine is asked.
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"user", "u-1"},
                                               {"metadata", {{"team", "a"}}},
                                               {"store", false},
                                               {"safety_identifier", "s"},
                                               {"prompt_cache_key", "p"},
                                               {"service_tier", "auto"},
                                               {"modalities", {"text"}},
                                               {"parallel_tool_calls", true}}))
                .status,
            200);
  ASSERT_EQ(Post("/v1/completions", Cmpl({{"user", "u-1"}, {"suffix", ""}, {"echo", false}})).status, 200);
  // An explicit null is "not given" for any field, known or not.
  EXPECT_EQ(Post("/v1/chat/completions", Chat({{"functions", nullptr}, {"whatever", nullptr}})).status, 200);
  EXPECT_EQ(engine.num_submitted(), 3u);
}

}  // namespace
}  // namespace tessera

// tessera tests: the HTTP server over real sockets with a fake engine: routes, OpenAI response
// and chunk shapes, SSE framing and [DONE], request validation errors (status, type, param),
// tool calls, the diffusion step extension events, /metrics and the access log.
#include <gtest/gtest.h>

#include "server/http_server.h"
#include "test_util.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"
#include "unit/server_metrics_checker.h"

namespace tessera {
namespace {

using namespace testing_server;

class ServerHttp : public FakeServerTest {
 protected:
  HttpResponse Post(const std::string& path, const ojson& body,
                    const std::map<std::string, std::string>& h = {}) {
    return Call(port, "POST", path, body.dump(), h);
  }
  static ojson Chat(ojson extra = ojson::object()) {
    ojson b = {{"model", "fake-moe"}, {"messages", ojson::array({{{"role", "user"}, {"content", "Hi"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
};

TEST_F(ServerHttp, HealthFollowsReadiness) {
  engine.ready = false;
  Start();
  auto r = Call(port, "GET", "/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ojson::parse(r.body)["status"], "loading");
  auto c = Post("/v1/chat/completions", Chat());
  ExpectApiError(c, 503, "", "service_unavailable");
  engine.ready = true;
  r = Call(port, "GET", "/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(ojson::parse(r.body)["status"], "ok");
}

TEST_F(ServerHttp, ModelsAndUnknownRoutes) {
  Start();
  auto r = Call(port, "GET", "/v1/models");
  ASSERT_EQ(r.status, 200);
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "fake-moe");
  EXPECT_EQ(j["data"][0]["object"], "model");
  ExpectApiError(Call(port, "GET", "/v1/nothing"), 404, "");
  ExpectApiError(Call(port, "GET", "/elsewhere"), 404, "");
  EXPECT_EQ(Call(port, "GET", "/v1/chat/completions").status, 405);
}

TEST_F(ServerHttp, ChatCompletion) {
  Start();
  auto r = Post("/v1/chat/completions",
                Chat({{"max_tokens", 50}, {"temperature", 0.5}, {"stop", "xyz"}, {"seed", 7}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/json");
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "fake-moe");
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, world!");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  // The fake template renders "user:Hi\n" (8 bytes) + "assistant:" (10) = 18 tokens.
  EXPECT_EQ(j["usage"]["prompt_tokens"], 18);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 22);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  GenerationRequest g = engine.last();
  EXPECT_EQ(g.prompt.size(), 18u);
  EXPECT_EQ(g.sampling.max_tokens, 50);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_EQ(g.sampling.stop, std::vector<std::string>{"xyz"});
  EXPECT_EQ(g.sampling.seed, 7u);
  EXPECT_FALSE(g.diffusion.has_value());
}

TEST_F(ServerHttp, ChatDefaultMaxTokensFillsTheContext) {
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
  EXPECT_EQ(engine.last().sampling.max_tokens, 4096 - 18);
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"max_completion_tokens", 9}, {"max_tokens", 3}})).status,
            200);
  EXPECT_EQ(engine.last().sampling.max_tokens, 9);
}

// vLLM's extra sampling fields that README lists reach the engine; min_tokens past the limit is refused.
TEST_F(ServerHttp, MinTokensAndPriorityReachTheEngine) {
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"min_tokens", 5}, {"priority", -3}, {"max_tokens", 20}})).status, 200);
  EXPECT_EQ(engine.last().sampling.min_tokens, 5);
  EXPECT_EQ(engine.last().priority, -3);
  ASSERT_EQ(Post("/v1/completions", {{"prompt", "Hi"}, {"min_tokens", 2}, {"priority", 4}}).status, 200);
  EXPECT_EQ(engine.last().sampling.min_tokens, 2);
  EXPECT_EQ(engine.last().priority, 4);
  auto r = Post("/v1/chat/completions", Chat({{"min_tokens", 30}, {"max_tokens", 20}}));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ojson::parse(r.body)["error"]["param"], "min_tokens");
  EXPECT_EQ(Post("/v1/chat/completions", Chat({{"min_tokens", -1}})).status, 400);
  EXPECT_EQ(Post("/v1/chat/completions", Chat({{"priority", "high"}})).status, 400);
}

TEST_F(ServerHttp, ChatStreamFraming) {
  engine.finish = FinishReason::kLength;
  Start();
  auto r =
      Post("/v1/chat/completions", Chat({{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs)) << r.body;
  ASSERT_GE(evs.size(), 4u);
  EXPECT_EQ(evs.back().data, "[DONE]");
  std::string content, id;
  int finish_chunks = 0;
  for (size_t i = 0; i + 1 < evs.size(); ++i) {
    EXPECT_EQ(evs[i].event, "");
    ojson j = ojson::parse(evs[i].data);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    if (id.empty()) id = j["id"];
    EXPECT_EQ(j["id"], id);     // one id for the whole stream
    if (i + 2 == evs.size()) {  // the usage chunk
      EXPECT_TRUE(j["choices"].empty());
      EXPECT_EQ(j["usage"]["completion_tokens"], 4);
      EXPECT_EQ(j["usage"]["prompt_tokens"], 18);
      continue;
    }
    EXPECT_TRUE(j["usage"].is_null());
    const ojson& ch = j["choices"][0];
    if (i == 0)
      EXPECT_EQ(ch["delta"]["role"], "assistant");
    else
      EXPECT_FALSE(ch["delta"].contains("role"));
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) {
      ++finish_chunks;
      EXPECT_EQ(ch["finish_reason"], "length");
    }
  }
  EXPECT_EQ(content, "Hello, world!");
  EXPECT_EQ(finish_chunks, 1);
}

TEST_F(ServerHttp, ChatStreamWithoutUsageHasNoUsageField) {
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs));
  EXPECT_EQ(evs.back().data, "[DONE]");
  for (size_t i = 0; i + 1 < evs.size(); ++i) {
    ojson j = ojson::parse(evs[i].data);
    EXPECT_FALSE(j.contains("usage"));
    EXPECT_EQ(j["choices"].size(), 1u);
  }
}

TEST_F(ServerHttp, Completions) {
  Start();
  auto r = Post("/v1/completions", {{"model", "fake-moe"}, {"prompt", "abc"}});
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["text"], "Hello, world!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(engine.last().sampling.max_tokens, 16);  // OpenAI's default for completions
  r = Post("/v1/completions", {{"prompt", ojson::array({5, 6, 7, 8})}, {"stream", true}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(engine.last().prompt, (std::vector<int32_t>{5, 6, 7, 8}));
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs));
  std::string text;
  for (size_t i = 0; i + 1 < evs.size(); ++i) {
    ojson c = ojson::parse(evs[i].data);
    EXPECT_EQ(c["object"], "text_completion");
    text += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello, world!");
  EXPECT_EQ(evs.back().data, "[DONE]");
}

TEST_F(ServerHttp, ValidationErrors) {
  Start();
  struct Bad {
    std::string path;
    ojson body;
    int status;
    std::string param;
  };
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  std::vector<Bad> cases = {
      {chat, {{"messages", ojson::array()}}, 400, "messages"},
      {chat, ojson::object(), 400, "messages"},
      {chat, {{"messages", "hi"}}, 400, "messages"},
      {chat, Chat({{"temperature", "hot"}}), 400, "temperature"},
      {chat, Chat({{"temperature", 3}}), 400, "temperature"},
      {chat, Chat({{"top_p", 0}}), 400, "top_p"},
      {chat, Chat({{"max_tokens", 0}}), 400, "max_tokens"},
      {chat, Chat({{"max_tokens", 2.5}}), 400, "max_tokens"},
      {chat, Chat({{"n", 17}}), 400, "n"},
      {chat, Chat({{"stream", "yes"}}), 400, "stream"},
      {chat, Chat({{"stream_options", {{"include_usage", true}}}}), 400, "stream_options"},
      {chat, Chat({{"stop", ojson::array({1})}}), 400, "stop"},
      {chat, Chat({{"seed", "x"}}), 400, "seed"},
      {chat, Chat({{"presence_penalty", 5}}), 400, "presence_penalty"},
      {chat, Chat({{"top_logprobs", 3}}), 400, "top_logprobs"},
      {chat, Chat({{"tool_choice", "required"}}), 400, "tool_choice"},
      {chat, Chat({{"tools", "x"}}), 400, "tools"},
      {chat, Chat({{"diffusion", {{"steps", 4}}}}), 400, "diffusion"},
      {chat, Chat({{"response_format", {{"type", "xml"}}}}), 400, "response_format.type"},
      {chat, {{"messages", ojson::array({{{"role", "wizard"}, {"content", "x"}}})}}, 400, "messages[0].role"},
      {chat, {{"messages", ojson::array({{{"role", "user"}}})}}, 400, "messages[0].content"},
      {chat,
       {{"messages",
         ojson::array({{{"role", "user"}, {"content", ojson::array({{{"type", "image_url"}}})}}})}},
       400,
       "messages[0].content[0].type"},
      {chat,
       {{"messages", ojson::array({{{"role", "tool"}, {"content", "42"}}})}},
       400,
       "messages[0].tool_call_id"},
      {chat, Chat({{"messages", ojson::array({{{"role", "user"}, {"content", "TEMPLATE_ERROR"}}})}}), 400,
       "messages"},
      {chat, Chat({{"messages", ojson::array({{{"role", "user"}, {"content", std::string(5000, 'x')}}})}}),
       400, "messages"},
      {chat, Chat({{"max_tokens", 4090}}), 400, "max_tokens"},
      {cmpl, {{"prompt", ojson::array({"a", "b"})}}, 400, "prompt"},
      {cmpl, {{"prompt", ""}}, 400, "prompt"},
      {cmpl, {{"prompt", ojson::array({5000})}}, 400, "prompt"},
      {cmpl, {{"prompt", "x"}, {"echo", true}, {"logprobs", 1}}, 400, "echo"},
      {cmpl, {{"prompt", "x"}, {"logprobs", 9}}, 400, "logprobs"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.body.dump());
    ExpectApiError(Post(b.path, b.body), b.status, b.param);
  }
  ExpectApiError(Call(port, "POST", chat, "{not json"), 400, "");
  auto r = Post(chat, Chat({{"model", "gpt-4"}}));
  ExpectApiError(r, 404, "model");
  EXPECT_EQ(ojson::parse(r.body)["error"]["code"], "model_not_found");
  r = Post(chat,
           Chat({{"messages", ojson::array({{{"role", "user"}, {"content", std::string(5000, 'x')}}})}}));
  EXPECT_EQ(ojson::parse(r.body)["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(engine.num_submitted(), 0u);  // nothing bad reached the engine
}

TEST_F(ServerHttp, MessagesAreNormalizedForTheTemplate) {
  Start();
  ojson msgs = ojson::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "42"}])");
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"messages", msgs}})).status, 200);
  const ojson& m = prompts.last_messages;
  EXPECT_EQ(m[0]["content"], "a\nb");
  EXPECT_EQ(m[2]["content"], "");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], ojson({{"x", 1}}));  // an object for templates
  EXPECT_EQ(m[3]["tool_call_id"], "call_1");
}

TEST_F(ServerHttp, ToolCallsNonStreaming) {
  engine.script = {"Checking.", "\n<tool_call>\n{\"name\": \"get_weather\", ",
                   "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"};
  Start();
  ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  auto r = Post("/v1/chat/completions", Chat({{"tools", tools}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  const ojson& msg = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["content"], "Checking.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(ojson::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            ojson({{"city", "Paris"}}));
  EXPECT_EQ(prompts.last_tools, tools);
  // tool_choice none: tools are neither given to the template nor parsed.
  r = Post("/v1/chat/completions", Chat({{"tools", tools}, {"tool_choice", "none"}}));
  j = ojson::parse(r.body);
  EXPECT_TRUE(prompts.last_tools.is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(j["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
}

TEST_F(ServerHttp, ToolCallsStreaming) {
  engine.script = {"<tool_", "call>\n<function=f>\n<parameter=n>\n5\n</para",
                   "meter>\n</function>\n</tool_call>"};
  Start();
  ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  auto r = Post("/v1/chat/completions", Chat({{"tools", tools}, {"stream", true}}));
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs)) << r.body;
  std::string name, args, id, content;
  std::string finish;
  for (size_t i = 0; i + 1 < evs.size(); ++i) {
    ojson ch = ojson::parse(evs[i].data)["choices"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (!ch["delta"].contains("tool_calls")) continue;
    const ojson& tc = ch["delta"]["tool_calls"][0];
    EXPECT_EQ(tc["index"], 0);
    if (tc.contains("id")) id = tc["id"];
    if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
    args += tc["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(content, "");
  EXPECT_EQ(name, "f");
  EXPECT_EQ(args, R"({"n":5})");
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(finish, "tool_calls");
}

// tool_choice required / named appends the opening of a call to the rendered chat. It was
// tokenized like a whole prompt, with the tokenizer's special tokens: a tokenizer that adds a BOS
// put one in the middle of the prompt, right before "<tool_call>". A raw completion prompt still
// gets its BOS first.
TEST_F(ServerHttp, ForcedToolCallOpeningHasNoBosInside) {
  prompts.bos = 300;  // not a byte, so it stands out in the fake's one-token-per-byte prompt
  Start();
  ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
  const ojson named = ojson::parse(R"({"type": "function", "function": {"name": "get_weather"}})");
  for (const ojson& choice : {ojson("required"), named}) {
    SCOPED_TRACE(choice.dump());
    ASSERT_EQ(Post("/v1/chat/completions", Chat({{"tools", tools}, {"tool_choice", choice}})).status, 200);
    std::vector<int32_t> prompt = engine.last().prompt;
    ASSERT_FALSE(prompt.empty());
    EXPECT_EQ(prompt[0], 300);
    EXPECT_EQ(std::count(prompt.begin(), prompt.end(), 300), 1) << "a BOS inside the prompt";
    std::string tail;
    for (int32_t id : prompt) tail += id < 256 ? static_cast<char>(id) : '?';
    EXPECT_NE(tail.find("assistant:<tool_call>\n"), std::string::npos) << tail;
  }
  ASSERT_EQ(Post("/v1/completions", {{"prompt", "Hi"}}).status, 200);
  EXPECT_EQ(engine.last().prompt, (std::vector<int32_t>{300, 'H', 'i'}));
}

TEST_F(ServerHttp, DiffusionStepEventsAndParams) {
  engine.info.diffusion = true;
  engine.info.default_diffusion.block_size = 4;
  engine.info.default_diffusion.steps = 4;
  engine.diffusion_steps_per_block = 2;
  Start();
  // Diffusion logprobs exist (the unmasking confidences), their alternatives do not.
  ExpectApiError(Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 1}})), 400, "top_logprobs");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"diffusion", {{"steps", "many"}}}})), 400,
              "diffusion.steps");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"diffusion", {{"policy", "magic"}}}})), 400,
              "diffusion.policy");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"diffusion", {{"block_size", 4}, {"steps", 8}}}})), 400,
              "diffusion.steps");
  ExpectApiError(Post("/v1/chat/completions", Chat({{"diffusion", {{"bogus", 1}}}})), 400, "diffusion.bogus");
  auto r = Post("/v1/chat/completions",
                Chat({{"stream", true},
                      {"diffusion", {{"stream_steps", true}, {"policy", "threshold"}, {"threshold", 0.8}}}}));
  ASSERT_EQ(r.status, 200);
  GenerationRequest g = engine.last();
  ASSERT_TRUE(g.diffusion.has_value());
  EXPECT_EQ(g.diffusion->block_size, 4);
  EXPECT_EQ(g.diffusion->policy, DiffusionPolicy::kThreshold);
  EXPECT_FLOAT_EQ(g.diffusion->threshold, 0.8f);
  EXPECT_TRUE(g.emit_steps);
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs)) << r.body;
  int steps = 0;
  for (const auto& e : evs) {
    if (e.event != "diffusion_step") continue;
    ++steps;
    ojson j = ojson::parse(e.data);
    EXPECT_EQ(j["block_tokens"], ojson::array({7, 999, 8, 999}));
    EXPECT_TRUE(j.contains("unmasked") && j.contains("conf") && j.contains("block_start") &&
                j.contains("step"));
  }
  EXPECT_EQ(steps, 8);  // 4 blocks x 2 steps
  // Without stream_steps: no step events (and the engine is not asked for them).
  r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  EXPECT_FALSE(engine.last().emit_steps);
  EXPECT_EQ(r.body.find("diffusion_step"), std::string::npos);
}

TEST_F(ServerHttp, LogprobsChat) {
  engine.with_logprobs = true;
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 1}}));
  ASSERT_EQ(r.status, 200);
  ojson lp = ojson::parse(r.body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["content"].size(), 4u);
  EXPECT_EQ(lp["content"][0]["token"], "<100>");
  EXPECT_FLOAT_EQ(lp["content"][0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(lp["content"][0]["top_logprobs"][0]["token"], "<1>");
  EXPECT_EQ(engine.last().sampling.top_logprobs, 1);
}

TEST_F(ServerHttp, EngineErrors) {
  engine.error = "prompt token 5 is out of range";
  Start();
  ExpectApiError(Post("/v1/chat/completions", Chat()), 400, "");
  engine.error_after = 2;
  ExpectApiError(Post("/v1/chat/completions", Chat()), 500, "", "internal_error");
  auto r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  EXPECT_EQ(r.status, 200);
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs));
  EXPECT_EQ(evs.back().data, "[DONE]");
  EXPECT_EQ(ojson::parse(evs[evs.size() - 2].data)["error"]["type"], "internal_error");
}

// A failure the engine blames on the request's input (a grammar too ambiguous to follow, found
// while generating) is the client's error even after output started: 400, in the stream too.
// It was a 500 "internal_error".
TEST_F(ServerHttp, EngineErrorBlamingTheRequestAfterOutputIs400) {
  engine.error = "grammar too ambiguous: more than 1024 parses are alive at one position";
  engine.error_after = 2;
  engine.error_invalid_request = true;
  Start();
  std::string msg = ExpectApiError(Post("/v1/chat/completions", Chat()), 400, "", "invalid_request_error");
  EXPECT_NE(msg.find("too ambiguous"), std::string::npos) << msg;
  auto r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  EXPECT_EQ(r.status, 200);
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs));
  ASSERT_GE(evs.size(), 2u);
  EXPECT_EQ(evs.back().data, "[DONE]");
  ojson err = ojson::parse(evs[evs.size() - 2].data)["error"];
  EXPECT_EQ(err["type"], "invalid_request_error") << err;
}

// A step that throws (Engine::FailRunning) fails its requests through no fault of theirs: out of
// memory (CUDA's, in a step) is a 503 naming it, another failure a 500, also before any output,
// where an engine error used to be taken for the request's own (400 invalid_request_error).
TEST_F(ServerHttp, FailedEngineStepsAre503WhenOutOfMemoryElse500) {
  engine.error = "engine error: CUDA out of memory allocating 64.0 MiB (tessera holds 70000.0 MiB, device free 12.0 "
                 "of 81000.0 MiB) (the step was dropped; retry later)";
  engine.error_unavailable = true;
  Start();
  std::string msg = ExpectApiError(Post("/v1/chat/completions", Chat()), 503, "", "service_unavailable");
  EXPECT_NE(msg.find("CUDA out of memory allocating 64.0 MiB"), std::string::npos) << msg;
  ExpectApiError(Post("/v1/chat/completions", Chat({{"stream", true}})), 503, "", "service_unavailable");
  engine.error_unavailable = false;
  engine.error_server_fault = true;
  engine.error = "engine error: CUDA error in attention: an illegal memory access was encountered";
  msg = ExpectApiError(Post("/v1/chat/completions", Chat()), 500, "", "internal_error");
  EXPECT_NE(msg.find("illegal memory access"), std::string::npos) << msg;
  engine.error.clear();
  EXPECT_EQ(Post("/v1/chat/completions", Chat()).status, 200);  // still serving
}

TEST_F(ServerHttp, MetricsEndpoint) {
  Start();
  Post("/v1/chat/completions", Chat());
  Post("/v1/chat/completions", Chat({{"stream", true}}));
  Post("/v1/chat/completions", Chat({{"n", 99}}));
  auto r = Call(port, "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"].rfind("text/plain; version=0.0.4", 0), 0u);
  testing_metrics::Exposition e;
  std::string err;
  ASSERT_TRUE(testing_metrics::CheckExposition(r.body, &e, &err)) << err;
  EXPECT_EQ(e.Value("tessera_http_requests_total", {{"path", "/v1/chat/completions"}, {"code", "200"}}), 2);
  EXPECT_EQ(e.Value("tessera_request_errors_total", {{"code", "400"}}), 1);
  EXPECT_EQ(e.Value("tessera_generation_tokens_total", {}), 8);
  EXPECT_EQ(e.Value("tessera_prompt_tokens_total", {}), 36);
  EXPECT_EQ(e.Value("tessera_time_to_first_token_seconds_count", {}), 2);
  EXPECT_EQ(e.Value("tessera_inter_token_latency_seconds_count", {}), 6);
  EXPECT_EQ(e.Value("tessera_kv_cache_pages_total", {}), 100);
  EXPECT_EQ(e.Value("tessera_state_slots_used", {}), 3);
  EXPECT_EQ(e.Value("tessera_state_slots_total", {}), 8);
  EXPECT_EQ(e.Value("tessera_prefix_cache_hits_total", {}), 12);
  EXPECT_EQ(e.Value("tessera_ready", {}), 1);
  // A collector can feed the per-expert routing counter (labels layer, expert).
  server->metrics().AddCollector([&] { server->server_metrics().expert_routed_tokens.Set({"3", "41"}, 77); });
  r = Call(port, "GET", "/metrics");
  testing_metrics::Exposition e2;
  ASSERT_TRUE(testing_metrics::CheckExposition(r.body, &e2, &err)) << err;
  EXPECT_EQ(e2.Value("tessera_moe_routed_tokens_total", {{"layer", "3"}, {"expert", "41"}}), 77);
}

TEST_F(ServerHttp, AccessLog) {
  std::string dir = testing::ScratchDir("server_access_log");
  cfg.server.access_log = dir + "/access.log";
  cfg.security.api_keys = {"sk-topsecret"};
  Start();
  Post("/v1/chat/completions", Chat(), {{"Authorization", "Bearer sk-topsecret"}});
  Post("/v1/chat/completions", Chat(), {{"Authorization", "Bearer wrong"}});
  server.reset();
  std::string log = testing::ReadFile(dir + "/access.log");
  EXPECT_EQ(log.find("sk-topsecret"), std::string::npos);
  EXPECT_EQ(log.find("user:Hi"), std::string::npos);
  EXPECT_EQ(log.find("Hello"), std::string::npos);  // no completions without log_requests
  std::vector<ojson> lines;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t nl = log.find('\n', pos);
    lines.push_back(ojson::parse(log.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["status"], 200);
  EXPECT_EQ(lines[0]["path"], "/v1/chat/completions");
  EXPECT_EQ(lines[0]["method"], "POST");
  EXPECT_EQ(lines[0]["key_id"].get<std::string>().rfind("key-", 0), 0u);
  EXPECT_EQ(lines[0]["prompt_tokens"], 18);
  EXPECT_EQ(lines[0]["completion_tokens"], 4);
  EXPECT_TRUE(lines[0]["ttft_s"].is_number());
  EXPECT_TRUE(lines[0]["e2e_s"].is_number());
  EXPECT_EQ(lines[0]["request_id"].get<std::string>().rfind("req-", 0), 0u);
  EXPECT_EQ(lines[1]["status"], 401);
  EXPECT_TRUE(lines[1]["key_id"].is_null());
}

TEST_F(ServerHttp, AccessLogWithRequests) {
  std::string dir = testing::ScratchDir("server_access_log2");
  cfg.server.access_log = dir + "/access.log";
  cfg.server.log_requests = true;
  Start();
  Post("/v1/chat/completions", Chat());
  server.reset();
  ojson line = ojson::parse(testing::ReadFile(dir + "/access.log"));
  EXPECT_EQ(line["completion"], "Hello, world!");
  EXPECT_NE(line["prompt"].get<std::string>().find("Hi"), std::string::npos);
}

// A full disk under the access log (/dev/full: every write ENOSPC): each request is answered, each
// lost line counted (docs/RELIABILITY.md, "Faults"; the end-to-end test is CliFaults.AccessLog...).
TEST_F(ServerHttp, AccessLogOnAFullDiskCountsLostLines) {
  cfg.server.access_log = "/dev/full";
  Start();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Post("/v1/chat/completions", Chat({{"stream", i == 1}})).status, 200) << i;
  // A line is written once its response is out, so the last one may trail the client a little;
  // every /metrics call is one more line.
  testing_metrics::Exposition e;
  for (int i = 0; i < 100; ++i) {
    auto r = Call(port, "GET", "/metrics");
    std::string err;
    e = {};
    ASSERT_TRUE(testing_metrics::CheckExposition(r.body, &e, &err)) << err;
    if (e.Value("tessera_access_log_errors_total", {}) >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(e.types["tessera_access_log_errors_total"], "counter");
  EXPECT_GE(e.Value("tessera_access_log_errors_total", {}), 3);
}

TEST_F(ServerHttp, KeepAliveServesSeveralRequests) {
  Start();
  Client c(port);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send("POST", "/v1/chat/completions", Chat({{"stream", i == 1}}).dump(), {}, true));
    HttpResponse r = c.Read();
    ASSERT_TRUE(r.ok) << i;
    EXPECT_EQ(r.status, 200) << i;
  }
  ASSERT_TRUE(c.Send("GET", "/health", "", {}, true));
  EXPECT_EQ(c.Read().status, 200);
}

}  // namespace
}  // namespace tessera

// tessera tests: a Gemma 4 model behind the HTTP server (fake engine scripted with hand-made Gemma 4
// output, fake prompt builder with a Gemma 4 chat format): the thinking channel comes out as
// `reasoning_content` and the calls as `tool_calls`, in one answer and streamed; the request asks
// the engine to keep the format's marker tokens in the text (chat only); a prompt that ends inside
// the thinking channel starts the reply there; tool_choice opens a Gemma 4 call; strict tools are
// refused; a malformed call is plain content.
#include <gtest/gtest.h>

#include <algorithm>

#include "server/http_server.h"
#include "test_util.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"

namespace tessera {
namespace {

using namespace testing_server;

const std::string Q = "<|\"|>";

class ServerGemma4 : public FakeServerTest {
 protected:
  void SetUp() override {
    FakeServerTest::SetUp();
    prompts.gemma4 = true;
    // The markers are one token each, as in Gemma 4's vocabulary.
    prompts.added_tokens = {{"<|tool_call>", 300}, {"<tool_call|>", 301}, {"<|\"|>", 302}, {"<|channel>", 303},
                            {"<channel|>", 304},   {"<|turn>", 305},      {"<turn|>", 306}};
    engine.info.vocab_size = 1000;
  }
  HttpResponse Post(const std::string& path, const ojson& body) { return Call(port, "POST", path, body.dump()); }
  static ojson Chat(ojson extra = ojson::object()) {
    ojson b = {{"model", "fake-moe"}, {"messages", ojson::array({{{"role", "user"}, {"content", "Weather?"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  static ojson Tools() {
    return ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  }
  // A stream's deltas, concatenated per field.
  struct Streamed {
    std::string content, reasoning, name, args, id, finish;
    int tool_chunks = 0;
  };
  static Streamed Collect(const std::string& body) {
    std::vector<SseEvent> evs;
    Streamed s;
    EXPECT_TRUE(ParseSse(body, evs)) << body;
    for (size_t i = 0; i + 1 < evs.size(); ++i) {
      ojson j = ojson::parse(evs[i].data);
      if (j["choices"].empty()) continue;
      const ojson& ch = j["choices"][0];
      if (!ch["finish_reason"].is_null()) s.finish = ch["finish_reason"];
      const ojson& d = ch["delta"];
      if (d.contains("content")) s.content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
      if (!d.contains("tool_calls")) continue;
      ++s.tool_chunks;
      const ojson& tc = d["tool_calls"][0];
      if (tc.contains("id")) s.id = tc["id"];
      if (tc["function"].contains("name")) s.name += tc["function"]["name"].get<std::string>();
      s.args += tc["function"]["arguments"].get<std::string>();
    }
    return s;
  }
};

const std::vector<std::string> kThinkThenCall = {"<|channel>",
                                                 "thou",
                                                 "ght\nThe user wants",
                                                 " the weather.\n",
                                                 "<channel|>",
                                                 "<|tool",
                                                 "_call>call:get_",
                                                 "weather{city:<|\"",
                                                 "|>Paris<|\"|>,days:2}",
                                                 "<tool_call|>"};

TEST_F(ServerGemma4, ReasoningAndToolCallsInOneAnswer) {
  engine.script = kThinkThenCall;
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"tools", Tools()}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  const ojson& msg = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["reasoning_content"], "The user wants the weather.");
  EXPECT_TRUE(msg["content"].is_null()) << r.body;
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(ojson::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            ojson::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  // The engine keeps the markers' text for the parsers (the other special tokens stay dropped).
  std::vector<int32_t> keep = engine.last().keep_special_ids;
  std::sort(keep.begin(), keep.end());
  EXPECT_EQ(keep, (std::vector<int32_t>{300, 301, 302, 303, 304}));
}

TEST_F(ServerGemma4, ReasoningAndToolCallsStreamed) {
  engine.script = kThinkThenCall;
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"tools", Tools()}, {"stream", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  Streamed s = Collect(r.body);
  EXPECT_EQ(s.reasoning, "The user wants the weather.");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.name, "get_weather");
  EXPECT_EQ(ojson::parse(s.args), ojson::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(s.id.rfind("call_", 0), 0u);
  EXPECT_EQ(s.tool_chunks, 2);  // the call's head, then its arguments
  EXPECT_EQ(s.finish, "tool_calls");
  // The reasoning went out as it came, before the call was complete.
  EXPECT_NE(r.body.find("\"reasoning_content\":\"The user wants\""), std::string::npos) << r.body;
}

TEST_F(ServerGemma4, ThinkingWithoutToolsAndPlainAnswers) {
  engine.script = {"<|channel>thought\n", "Two and two.", "\n<channel|>", "\n4"};
  Start();
  ojson j = ojson::parse(Post("/v1/chat/completions", Chat()).body);
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "Two and two.");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "4");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // Without a channel nothing changes: no reasoning_content at all.
  engine.script = {"Just ", "an answer."};
  j = ojson::parse(Post("/v1/chat/completions", Chat()).body);
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Just an answer.");
  // Completions are raw text: no parsing, and the markers are not asked for.
  engine.script = {"<|channel>x<channel|>y"};
  j = ojson::parse(Post("/v1/completions", {{"model", "fake-moe"}, {"prompt", "p"}}).body);
  EXPECT_EQ(j["choices"][0]["text"], "<|channel>x<channel|>y");
  EXPECT_TRUE(engine.last().keep_special_ids.empty());
}

TEST_F(ServerGemma4, ReplyStartingInsideTheChannel) {
  // Gemma 4's template ends the prompt with "<|channel>thought\n" after a tool response, thinking on.
  prompts.generation_suffix = "<|channel>thought\n";
  engine.script = {"It says 18C.", "\n<channel|>", "It is 18C."};
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  Streamed s = Collect(r.body);
  EXPECT_EQ(s.reasoning, "It says 18C.");
  EXPECT_EQ(s.content, "It is 18C.");
}

TEST_F(ServerGemma4, ToolChoiceOpensAGemmaCall) {
  engine.script = {"city:", "<|\"|>Rome<|\"|>}", "<tool_call|>"};
  Start();
  ojson named = ojson::parse(R"({"type": "function", "function": {"name": "get_weather"}})");
  auto r = Post("/v1/chat/completions", Chat({{"tools", Tools()}, {"tool_choice", named}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Rome"})");
  // The prompt ends with the opening, tokenized without a BOS: <|tool_call> "call:get_weather{".
  const std::vector<int32_t> prompt = engine.last().prompt;
  const std::string tail = "call:get_weather{";
  ASSERT_GE(prompt.size(), tail.size() + 1);
  EXPECT_EQ(prompt[prompt.size() - tail.size() - 1], 300);
  for (size_t i = 0; i < tail.size(); ++i) EXPECT_EQ(prompt[prompt.size() - tail.size() + i], tail[i]);
}

TEST_F(ServerGemma4, StrictToolsAreRefused) {
  Start();
  ojson tools = Tools();
  tools[0]["function"]["strict"] = true;
  std::string msg =
      ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", tools}})), 400, "tools[0].function.strict");
  EXPECT_NE(msg.find("Gemma 4"), std::string::npos) << msg;
}

TEST_F(ServerGemma4, MalformedCallIsContent) {
  engine.script = {"Here: ", "<|tool_call>call:get_weather{city:<|\"|>Paris}", "<tool_call|>"};
  Start();
  ojson j = ojson::parse(Post("/v1/chat/completions", Chat({{"tools", Tools()}})).body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Here: <|tool_call>call:get_weather{city:<|\"|>Paris}<tool_call|>");
}

}  // namespace
}  // namespace tessera

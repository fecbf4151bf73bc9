// tool_choice "required" / named: the reply is opened with the start of a call. Checked by feeding
// the opening plus a continuation a model would write to the tool-call parser, whose formats are
// those of tool_parser.h (Qwen JSON, Qwen3-Coder XML), and by what the opening must not be for
// auto / none / completions.
#include <gtest/gtest.h>

#include "server/openai_protocol.h"
#include "server/tool_parser.h"

namespace tessera {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");

ParsedRequest Chat(const std::string& tool_choice_json) {
  EngineModelInfo info;
  info.name = "m";
  info.max_model_len = 4096;
  info.vocab_size = 1000;
  ojson body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", kTools}};
  if (!tool_choice_json.empty()) body["tool_choice"] = ojson::parse(tool_choice_json);
  return ParseChatRequest(body, info, DiffusionParams{});
}

ToolParseResult Continue(const std::string& opening, const std::string& continuation) {
  int n = 0;
  ToolCallParser p(kTools, [&n] { return "call_" + std::to_string(n++); });
  ToolParseResult r;
  for (const auto& piece : {opening, continuation})
    for (const auto& ev : p.Push(piece)) ev.is_call ? r.calls.push_back(ev.call) : void(r.content += ev.content);
  for (const auto& ev : p.Finish()) ev.is_call ? r.calls.push_back(ev.call) : void(r.content += ev.content);
  return r;
}

TEST(ToolChoice, NamedJsonOpeningCompletesToTheNamedCall) {
  const std::string open = ForcedToolCallPrefix(Chat(R"({"type": "function", "function": {"name": "get_weather"}})"), false);
  ASSERT_FALSE(open.empty());
  ToolParseResult r = Continue(open, "{\"city\": \"Paris\"}}\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u) << open;
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(r.content, "");
}

TEST(ToolChoice, NamedXmlOpeningCompletesToTheNamedCall) {
  const std::string open = ForcedToolCallPrefix(Chat(R"({"type": "function", "function": {"name": "get_weather"}})"), true);
  ToolParseResult r = Continue(open, "<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u) << open;
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(r.calls[0].arguments), ojson::parse(R"({"city": "Oslo", "days": 3})"));
}

TEST(ToolChoice, RequiredOpensACallWithoutChoosingTheFunction) {
  const std::string open = ForcedToolCallPrefix(Chat(R"("required")"), false);
  ToolParseResult r = Continue(open, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
}

TEST(ToolChoice, MalformedForcedCallComesBackAsTextWithItsOpening) {
  const std::string open = ForcedToolCallPrefix(Chat(R"({"type": "function", "function": {"name": "get_weather"}})"), false);
  ToolParseResult r = Continue(open, "no json here");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_NE(r.content.find("get_weather"), std::string::npos) << r.content;
  EXPECT_NE(r.content.find("no json here"), std::string::npos) << r.content;
}

TEST(ToolChoice, AutoAndNoneOpenNothing) {
  EXPECT_EQ(ForcedToolCallPrefix(Chat(""), false), "");
  EXPECT_EQ(ForcedToolCallPrefix(Chat(R"("auto")"), false), "");
  EXPECT_EQ(ForcedToolCallPrefix(Chat(R"("none")"), true), "");
}

// A request cannot name such a function any more (OpenAI's ^[a-zA-Z0-9_-]{1,64}$, checked by
// ParseChatRequest); the JSON opening still escapes whatever name it is given.
TEST(ToolChoice, FunctionNameIsJsonEscapedInTheOpening) {
  ParsedRequest req = Chat(R"({"type": "function", "function": {"name": "get_weather"}})");
  req.tool_choice_name = "we\"ird";
  const std::string open = ForcedToolCallPrefix(req, false);
  EXPECT_NE(open.find(R"("we\"ird")"), std::string::npos) << open;
}

}  // namespace
}  // namespace tessera

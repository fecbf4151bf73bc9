// tessera tests: tool-call parsing (Qwen JSON and Qwen3-Coder XML): a table of hand-written cases
// (expected content and calls written from the formats' definitions), and the streaming parser fed
// at every split position must give exactly the one-shot result.
#include <gtest/gtest.h>

#include <regex>

#include "server/tool_parser.h"

namespace tessera {
namespace {

using ojson = nlohmann::ordered_json;

struct Case {
  const char* name;
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON text
  bool use_tools = false;
};

const ojson& Tools() {
  static const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                     "zip": {"type": "string"}, "limit": {"type": ["integer", "null"]},
                     "ratio": {"type": "number"}}}}},
    {"type": "function", "function": {"name": "ping"}}
  ])");
  return tools;
}

std::vector<Case> Cases() {
  const std::string call_paris =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  return {
      {"plain", "Hello world", "Hello world", {}},
      {"empty", "", "", {}},
      {"only_call", call_paris, "", {{"get_weather", R"({"city":"Paris"})"}}},
      {"text_then_call",
       "Let me check.\n\n" + call_paris,
       "Let me check.",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {"two_calls",
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": "
       "\"b\", "
       "\"arguments\": {\"y\": [1, 2]}}\n</tool_call>",
       "",
       {{"a", R"({"x":1})"}, {"b", R"({"y":[1,2]})"}}},
      {"bad_json",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
       {}},
      {"missing_name",
       "<tool_call>{\"arguments\": {}}</tool_call>",
       "<tool_call>{\"arguments\": {}}</tool_call>",
       {}},
      {"unterminated", "Text <tool_call>{\"name\": \"f\"", "Text <tool_call>{\"name\": \"f\"", {}},
      {"args_string",
       "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}</tool_call>",
       "",
       {{"f", R"({"x":1})"}}},
      {"no_args", "<tool_call>{\"name\":\"f\"}</tool_call>", "", {{"f", "{}"}}},
      {"parameters_alias",
       "<tool_call>{\"name\":\"f\",\"parameters\":{\"k\":\"v\"}}</tool_call>",
       "",
       {{"f", R"({"k":"v"})"}}},
      {"args_number",
       "<tool_call>{\"name\":\"f\",\"arguments\":5}</tool_call>",
       "<tool_call>{\"name\":\"f\",\"arguments\":5}</tool_call>",
       {}},
      {"text_after",
       "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\nDone.",
       "Done.",
       {{"f", "{}"}}},
      {"lt_in_text", "a < b and <tool", "a < b and <tool", {}},
      {"open_tag_prefix_at_end", "x <tool_call", "x <tool_call", {}},
      {"xml_basic",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</"
       "tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris"})"}},
       true},
      {"xml_schema_int",
       "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
       "",
       {{"get_weather", R"({"days":3})"}},
       true},
      {"xml_schema_string_keeps_digits",
       "<tool_call>\n<function=get_weather>\n<parameter=zip>\n12345\n</parameter>\n</function>\n</tool_call>",
       "",
       {{"get_weather", R"({"zip":"12345"})"}},
       true},
      {"xml_schema_type_list",
       "<tool_call>\n<function=get_weather>\n<parameter=limit>\n7\n</parameter>\n</function>\n</tool_call>",
       "",
       {{"get_weather", R"({"limit":7})"}},
       true},
      {"xml_schema_number_unparsable",
       "<tool_call>\n<function=get_weather>\n<parameter=ratio>\nabc\n</parameter>\n</function>\n</tool_call>",
       "",
       {{"get_weather", R"({"ratio":"abc"})"}},
       true},
      {"xml_no_schema_values",
       "<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=b>\ntrue\n</parameter>\n"
       "<parameter=s>\nhello\n</parameter>\n<parameter=o>\n{\"a\": 1}\n</parameter>\n<parameter=l>\n[1,2]\n"
       "</parameter>\n<parameter=z>\nnull\n</parameter>\n</function>\n</tool_call>",
       "",
       {{"f", R"({"n":42,"b":true,"s":"hello","o":{"a":1},"l":[1,2],"z":"null"})"}}},
      {"xml_multiline_value",
       "<tool_call>\n<function=write>\n<parameter=text>\nline1\nline2\n</parameter>\n</function>\n</"
       "tool_call>",
       "",
       {{"write", R"({"text":"line1\nline2"})"}}},
      {"xml_missing_function_close",
       "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
       "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
       {}},
      {"xml_missing_param_close",
       "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\nx\n</parameter>\n</function>\n</"
       "tool_call>",
       "",
       {{"f", R"({"a":1,"b":"x"})"}}},
      {"xml_no_params",
       "<tool_call>\n<function=ping>\n</function>\n</tool_call>",
       "",
       {{"ping", "{}"}},
       true},
      {"xml_junk_after",
       "<tool_call>\n<function=f>\n</function>\njunk\n</tool_call>",
       "<tool_call>\n<function=f>\n</function>\njunk\n</tool_call>",
       {}},
      {"mixed_formats",
       "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n<function=b>\n"
       "<parameter=q>\nx y\n</parameter>\n</function>\n</tool_call>",
       "Sure.",
       {{"a", "{}"}, {"b", R"({"q":"x y"})"}}},
      {"bad_then_good",
       "<tool_call>bad</tool_call>\n<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>",
       "<tool_call>bad</tool_call>",
       {{"g", "{}"}}},
      {"unicode_args",
       "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Z\u00fcrich\"}}</tool_call>",
       "",
       {{"get_weather", "{\"city\":\"Z\u00fcrich\"}"}}},
      {"nested_open",
       "<tool_call><tool_call>{\"name\":\"f\"}</tool_call>",
       "<tool_call><tool_call>{\"name\":\"f\"}</tool_call>",
       {}},
      {"whitespace_only", "  \n", "  \n", {}},
      {"trailing_spaces_no_calls", "Hi  ", "Hi  ", {}},
      {"call_then_text_then_call",
       "<tool_call>{\"name\":\"a\"}</tool_call>\nand\n<tool_call>{\"name\":\"b\"}</tool_call>\n",
       "and",
       {{"a", "{}"}, {"b", "{}"}}},
  };
}

std::function<std::string()> Counter() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

void CheckResult(const Case& c, const ToolParseResult& r, const std::string& how) {
  SCOPED_TRACE(std::string(c.name) + " " + how);
  EXPECT_EQ(r.content, c.content);
  ASSERT_EQ(r.calls.size(), c.calls.size());
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, c.calls[i].first);
    EXPECT_EQ(r.calls[i].arguments, c.calls[i].second);
    EXPECT_EQ(r.calls[i].id, "call_" + std::to_string(i));
  }
}

ToolParseResult Streamed(const Case& c, const std::vector<size_t>& cuts) {
  ToolCallParser p(c.use_tools ? Tools() : ojson(), Counter());
  ToolParseResult r;
  int expected_index = 0;
  auto take = [&](std::vector<ToolStreamEvent> evs) {
    for (auto& e : evs) {
      if (e.is_call) {
        EXPECT_EQ(e.index, expected_index++);
        r.calls.push_back(e.call);
      } else {
        r.content += e.content;
      }
    }
  };
  size_t prev = 0;
  for (size_t cut : cuts) {
    take(p.Push(std::string_view(c.text).substr(prev, cut - prev)));
    prev = cut;
  }
  take(p.Push(std::string_view(c.text).substr(prev)));
  take(p.Finish());
  return r;
}

TEST(ServerToolParser, TableOneShot) {
  for (const Case& c : Cases())
    CheckResult(c, ParseToolCalls(c.text, c.use_tools ? Tools() : ojson(), Counter()), "one-shot");
}

TEST(ServerToolParser, StreamingSplitAtEveryPosition) {
  for (const Case& c : Cases()) {
    for (size_t i = 0; i <= c.text.size(); ++i)
      CheckResult(c, Streamed(c, {i}), "split at " + std::to_string(i));
    std::vector<size_t> bytes;
    for (size_t i = 1; i < c.text.size(); ++i) bytes.push_back(i);
    CheckResult(c, Streamed(c, bytes), "byte by byte");
  }
}

TEST(ServerToolParser, ContentStreamsBeforeTheCallCloses) {
  ToolCallParser p(nullptr, Counter());
  auto evs = p.Push("Let me check.\n\n<tool_call>\n{\"name\": \"get_w");
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_FALSE(evs[0].is_call);
  EXPECT_EQ(evs[0].content, "Let me check.");
  evs = p.Push("eather\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_TRUE(evs[0].is_call);
  EXPECT_EQ(evs[0].call.name, "get_weather");
  EXPECT_EQ(p.num_calls(), 1);
}

TEST(ServerToolParser, PartialTagIsHeldBackThenReleased) {
  ToolCallParser p(nullptr, Counter());
  auto evs = p.Push("x <tool_ca");
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].content, "x");  // " <tool_ca" might still open a call
  evs = p.Push("t is a cat");
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].content, " <tool_cat is a cat");
}

// A call's arguments are parsed with nlohmann, and dumping (or copying) a JSON value recurses once
// a nesting level: a model writing 100k '[' (a degenerate sampling loop, or output a prompt
// steers) overflowed the I/O thread's stack and ended the process. A JSON call nested deeper than
// kMaxJsonDepth is malformed, so plain content; an XML parameter value that deep stays a string,
// as does any value that is not JSON. Nesting within the limit still parses.
TEST(ServerToolParser, DeeplyNestedArgumentsDoNotOverflowTheStack) {
  const int depth = 100000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  const std::string as_object = "{\"name\": \"ping\", \"arguments\": {\"x\": " + deep + "}}";
  const std::string as_string = "{\"name\": \"ping\", \"arguments\": " + ojson("{\"x\": " + deep + "}").dump() + "}";
  for (const std::string& body : {as_object, as_string}) {
    const std::string text = "<tool_call>\n" + body + "\n</tool_call>";
    ToolParseResult r = ParseToolCalls(text, Tools(), Counter());
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, text);
  }
  ToolParseResult r = ParseToolCalls(
      "<tool_call>\n<function=ping>\n<parameter=x>\n" + deep + "\n</parameter>\n</function>\n</tool_call>", Tools(),
      Counter());
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(ojson::parse(r.calls[0].arguments)["x"], deep);
  const std::string nested = std::string(100, '[') + std::string(100, ']');
  r = ParseToolCalls("<tool_call>{\"name\": \"ping\", \"arguments\": {\"x\": " + nested + "}}</tool_call>", Tools(),
                     Counter());
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(ojson::parse(r.calls[0].arguments)["x"], ojson::parse(nested));
}

TEST(ServerToolParser, CallIdFormat) {
  std::string id = NewToolCallId();
  EXPECT_TRUE(std::regex_match(id, std::regex("call_[A-Za-z0-9]{24}"))) << id;
  EXPECT_NE(NewToolCallId(), NewToolCallId());
}

}  // namespace
}  // namespace tessera

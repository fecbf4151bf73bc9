// tessera tests: the server's side of structured output with the fake engine (whose CompileGrammar
// uses a byte vocabulary): response_format json_object / json_schema and vLLM's structured_outputs
// reach the engine as a compiled grammar of the right language; bad schemas, unsupported keywords and
// malformed fields are 400s naming the param; strict tools under a forced tool_choice constrain the
// call and the server closes it; under tool_choice auto the engine gets the call's grammar with the
// trigger (<tool_call>) and the tokens it forces, and what cannot be done so is refused.
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "server/openai_protocol.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"

namespace tessera {
namespace {

using namespace testing_server;

class ServerStructuredOutput : public FakeServerTest {
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
  // Whether the grammar the engine received accepts `text` as a whole output.
  static bool Accepts(const GenerationRequest& r, const std::string& text) {
    if (!r.grammar) return false;
    grammar::GrammarMatcher m(r.grammar);
    return m.AcceptBytes(text) && m.CanTerminate();
  }
  static ojson Schema(ojson schema) {
    return {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"schema", schema}, {"strict", true}}}};
  }
};

const ojson kPerson = {{"type", "object"},
                       {"properties", {{"name", {{"type", "string"}}}, {"age", {{"type", "integer"}, {"minimum", 0}}}}},
                       {"required", {"name", "age"}},
                       {"additionalProperties", false}};

TEST_F(ServerStructuredOutput, JsonSchemaReachesTheEngineOnBothEndpoints) {
  Start();
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    ojson body = std::string(path) == "/v1/completions" ? Cmpl() : Chat();
    body["response_format"] = Schema(kPerson);
    auto r = Post(path, body);
    ASSERT_EQ(r.status, 200) << r.body;
    GenerationRequest got = engine.last();
    ASSERT_TRUE(got.grammar) << path;
    EXPECT_TRUE(Accepts(got, R"({"name": "Ann", "age": 3})"));
    EXPECT_FALSE(Accepts(got, R"({"name": "Ann", "age": -3})"));
    EXPECT_FALSE(Accepts(got, R"({"name": "Ann"})"));
    EXPECT_FALSE(Accepts(got, "Hello"));
  }
  // strict false is enforced too.
  ojson rf = Schema(kPerson);
  rf["json_schema"]["strict"] = false;
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"response_format", rf}})).status, 200);
  EXPECT_TRUE(Accepts(engine.last(), R"({"name":"x","age":0})"));
  EXPECT_FALSE(Accepts(engine.last(), R"({"age":0})"));
}

TEST_F(ServerStructuredOutput, JsonObjectAndTextFormats) {
  Start();
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"response_format", {{"type", "json_object"}}}})).status, 200);
  EXPECT_TRUE(Accepts(engine.last(), R"({"any": [1, 2, {"x": null}]})"));
  EXPECT_FALSE(Accepts(engine.last(), "[1]"));
  ASSERT_EQ(Post("/v1/completions", Cmpl({{"response_format", {{"type", "json_object"}}}})).status, 200);
  EXPECT_TRUE(engine.last().grammar);
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"response_format", {{"type", "text"}}}})).status, 200);
  EXPECT_FALSE(engine.last().grammar);
  ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
  EXPECT_FALSE(engine.last().grammar);
}

TEST_F(ServerStructuredOutput, VllmStructuredOutputsFields) {
  Start();
  auto run = [&](ojson so) {
    auto r = Post("/v1/chat/completions", Chat({{"structured_outputs", so}}));
    EXPECT_EQ(r.status, 200) << r.body;
    return engine.last();
  };
  auto g = run({{"regex", "[a-c]{2}-[0-9]+"}});
  EXPECT_TRUE(Accepts(g, "ab-12"));
  EXPECT_FALSE(Accepts(g, "ab-"));
  g = run({{"choice", {"yes", "no"}}});
  EXPECT_TRUE(Accepts(g, "no"));
  EXPECT_FALSE(Accepts(g, "maybe"));
  g = run({{"grammar", "start: \"x\"+ \"!\""}});
  EXPECT_TRUE(Accepts(g, "xxx!"));
  EXPECT_FALSE(Accepts(g, "!"));
  g = run({{"json", kPerson}});
  EXPECT_TRUE(Accepts(g, R"({"name":"a","age":1})"));
  g = run({{"json", kPerson.dump()}});  // vLLM also takes the schema as JSON text
  EXPECT_TRUE(Accepts(g, R"({"name":"a","age":1})"));
  g = run({{"json_object", true}});
  EXPECT_TRUE(Accepts(g, R"({})"));
  // Completions too.
  auto r = Post("/v1/completions", Cmpl({{"structured_outputs", {{"choice", {"A", "B"}}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(Accepts(engine.last(), "B"));
}

TEST_F(ServerStructuredOutput, BadSchemasAndFieldsAre400sNamingTheProblem) {
  Start();
  struct Case {
    ojson extra;
    std::string param, says;
  };
  const std::vector<Case> cases = {
      {{{"response_format", Schema({{"type", "number"}, {"multipleOf", 3}})}},
       "response_format.json_schema.schema",
       "multipleOf"},
      {{{"response_format", Schema({{"type", "strnig"}})}}, "response_format.json_schema.schema", "strnig"},
      {{{"response_format", Schema({{"type", "string"}, {"pattern", "(a"}})}},
       "response_format.json_schema.schema",
       "pattern"},
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format.json_schema", "json_schema"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", kPerson}}}}}},
       "response_format.json_schema.name",
       "name"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}},
       "response_format.json_schema.schema",
       "required"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", kPerson}, {"strict", "yes"}}}}}},
       "response_format.json_schema.strict",
       "boolean"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", kPerson}, {"extra", 1}}}}}},
       "response_format.json_schema.extra",
       "unknown"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format.type", "xml"},
      {{{"response_format", "json"}}, "response_format", "object"},
      {{{"response_format", {{"type", "json_object"}, {"schema", kPerson}}}}, "response_format.schema", "unknown"},
      {{{"structured_outputs", {{"regex", "a"}, {"choice", {"b"}}}}}, "structured_outputs", "exactly one"},
      {{{"structured_outputs", ojson::object()}}, "structured_outputs", "exactly one"},
      {{{"structured_outputs", {{"regex", "(a"}}}}, "structured_outputs.regex", "regex"},
      {{{"structured_outputs", {{"regex", "(?=a)"}}}}, "structured_outputs.regex", "lookaround"},
      {{{"structured_outputs", {{"choice", ojson::array()}}}}, "structured_outputs.choice", "non-empty"},
      {{{"structured_outputs", {{"choice", {1, 2}}}}}, "structured_outputs.choice", "strings"},
      {{{"structured_outputs", {{"grammar", "start: undefined_rule"}}}}, "structured_outputs.grammar", "undefined_rule"},
      {{{"structured_outputs", {{"json", "{not json"}}}}, "structured_outputs.json", "JSON Schema"},
      {{{"structured_outputs", {{"whitespace_pattern", " *"}, {"json_object", true}}}},
       "structured_outputs.whitespace_pattern",
       "not supported"},
      {{{"structured_outputs", {{"regexp", "a"}}}}, "structured_outputs.regexp", "unknown"},
      {{{"structured_outputs", {{"regex", "a"}}}, {"response_format", {{"type", "json_object"}}}},
       "structured_outputs",
       "combined"},
  };
  for (const Case& c : cases) {
    auto r = Post("/v1/chat/completions", Chat(c.extra));
    std::string msg = ExpectApiError(r, 400, c.param);
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.extra.dump() << " -> " << msg;
  }
  EXPECT_EQ(engine.num_submitted(), 0u);
}

TEST_F(ServerStructuredOutput, NotAvailableIsA400) {
  engine.structured_output = false;
  Start();
  auto r = Post("/v1/chat/completions", Chat({{"response_format", {{"type", "json_object"}}}}));
  std::string msg = ExpectApiError(r, 400, "response_format");
  EXPECT_NE(msg.find("not available"), std::string::npos) << msg;
}

ojson WeatherTool(bool strict) {
  ojson params = {{"type", "object"},
                  {"properties",
                   {{"city", {{"type", "string"}}}, {"unit", {{"$ref", "#/$defs/unit"}}}}},
                  {"required", {"city", "unit"}},
                  {"additionalProperties", false},
                  {"$defs", {{"unit", {{"enum", {"c", "f"}}}}}}};
  return {{"type", "function"},
          {"function", {{"name", "get_weather"}, {"parameters", params}, {"strict", strict}}}};
}
ojson TimeTool() {
  return {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", {{"type", "object"}}}}}};
}

TEST_F(ServerStructuredOutput, StrictNamedToolCallIsConstrainedAndClosedByTheServer) {
  engine.script = {"{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}"};
  Start();
  ojson body = Chat({{"tools", {WeatherTool(true), TimeTool()}},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  auto r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  GenerationRequest got = engine.last();
  ASSERT_TRUE(got.grammar);
  EXPECT_TRUE(Accepts(got, R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}})"));
  EXPECT_FALSE(Accepts(got, R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "k"}})"));
  EXPECT_FALSE(Accepts(got, R"({"name": "get_time", "arguments": {}})"));
  // The opening stops at "<tool_call>\n": the grammar writes the name.
  std::string prompt_tail;
  for (size_t i = got.prompt.size() - 12; i < got.prompt.size(); ++i) prompt_tail += static_cast<char>(got.prompt[i]);
  EXPECT_EQ(prompt_tail, "<tool_call>\n");
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << r.body;
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(ojson::parse(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            ojson({{"city", "Paris"}, {"unit", "c"}}));
}

TEST_F(ServerStructuredOutput, StrictToolsUnderRequiredAndWhereNothingIsForced) {
  Start();
  ojson tools = {WeatherTool(true), TimeTool()};
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"tools", tools}, {"tool_choice", "required"}})).status, 200);
  GenerationRequest got = engine.last();
  ASSERT_TRUE(got.grammar);
  EXPECT_TRUE(Accepts(got, R"({"name": "get_time", "arguments": {"tz": "UTC"}})"));  // not strict: any object
  EXPECT_TRUE(Accepts(got, R"({"name": "get_weather", "arguments": {"city": "X", "unit": "f"}})"));
  EXPECT_FALSE(Accepts(got, R"({"name": "get_weather", "arguments": {"city": "X"}})"));
  EXPECT_FALSE(Accepts(got, R"({"name": "other", "arguments": {}})"));
  // Nothing is constrained in a forced call of a tool that is not strict.
  ASSERT_EQ(Post("/v1/chat/completions",
                 Chat({{"tools", {WeatherTool(false)}}, {"tool_choice", "required"}}))
                .status,
            200);
  EXPECT_FALSE(engine.last().grammar);
  // Errors: strict not a boolean, a bad schema in the strict tool, strict call + response_format.
  ojson bad = WeatherTool(true);
  bad["function"]["strict"] = "yes";
  ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", {bad}}, {"tool_choice", "required"}})), 400,
                 "tools[0].function.strict");
  bad = WeatherTool(true);
  bad["function"]["parameters"]["properties"]["city"]["multipleOf"] = 2;
  std::string msg = ExpectApiError(
      Post("/v1/chat/completions",
           Chat({{"tools", {bad}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}})),
      400, "tools[0].function.parameters");
  EXPECT_NE(msg.find("multipleOf"), std::string::npos) << msg;
  ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", {WeatherTool(true)}},
                                                    {"tool_choice", "required"},
                                                    {"response_format", {{"type", "json_object"}}}})),
                 400, "response_format");
}

TEST_F(ServerStructuredOutput, StrictToolsUnderAutoGiveTheEngineATriggeredGrammar) {
  prompts.added_tokens = {{"<tool_call>", 300}, {"</tool_call>", 301}};
  // The engine (here its script) writes the call, closing included: the server adds nothing.
  engine.script = {"Sure.", "<tool_call>", "\n{\"name\": \"get_weather\", ",
                   "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}", "\n</tool_call>"};
  Start();
  ojson tools = {WeatherTool(true), TimeTool()};
  auto r = Post("/v1/chat/completions", Chat({{"tools", tools}}));
  ASSERT_EQ(r.status, 200) << r.body;
  GenerationRequest got = engine.last();
  ASSERT_TRUE(got.grammar);
  ASSERT_TRUE(got.grammar_trigger);
  EXPECT_EQ(got.grammar_trigger->trigger_ids, std::vector<int32_t>({300}));
  EXPECT_EQ(got.grammar_trigger->opening, std::vector<int32_t>({'\n'}));
  EXPECT_EQ(got.grammar_trigger->closing, std::vector<int32_t>({'\n', 301}));
  // A mixed list: every call names one of the tools; only the strict tool's arguments are checked.
  EXPECT_TRUE(Accepts(got, R"({"name": "get_weather", "arguments": {"city": "X", "unit": "f"}})"));
  EXPECT_FALSE(Accepts(got, R"({"name": "get_weather", "arguments": {"city": "X"}})"));
  EXPECT_TRUE(Accepts(got, R"({"name": "get_time", "arguments": {"tz": "UTC"}})"));
  EXPECT_FALSE(Accepts(got, R"({"name": "other", "arguments": {}})"));
  // Nothing is forced into the prompt: the call is the model's choice.
  EXPECT_NE(got.prompt.back(), '\n');
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << r.body;
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Sure.") << r.body;
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(ojson::parse(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            ojson({{"city", "Paris"}, {"unit", "c"}}));
  // A schema the compiler refuses names the tool's parameters.
  ojson bad = WeatherTool(true);
  bad["function"]["parameters"]["properties"]["city"]["multipleOf"] = 2;
  std::string msg =
      ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", {bad}}})), 400, "tools[0].function.parameters");
  EXPECT_NE(msg.find("multipleOf"), std::string::npos) << msg;
  // No strict tool, or tool_choice none: nothing is constrained.
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"tools", {TimeTool()}}})).status, 200);
  EXPECT_FALSE(engine.last().grammar);
  ASSERT_EQ(Post("/v1/chat/completions", Chat({{"tools", tools}, {"tool_choice", "none"}})).status, 200);
  EXPECT_FALSE(engine.last().grammar);
}

TEST_F(ServerStructuredOutput, StrictToolsUnderAutoRefusals) {
  Start();  // the fake tokenizer has no <tool_call> token: 11 bytes
  const size_t before = engine.num_submitted();
  ojson tools = {TimeTool(), WeatherTool(true)};
  std::string msg = ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", tools}})), 400, "tools[1].function.strict");
  EXPECT_NE(msg.find("one token"), std::string::npos) << msg;
  // Constrained twice (the whole reply and each call): refused.
  msg = ExpectApiError(
      Post("/v1/chat/completions", Chat({{"tools", tools}, {"response_format", {{"type", "json_object"}}}})), 400,
      "response_format");
  EXPECT_NE(msg.find("tool_choice auto"), std::string::npos) << msg;
  ExpectApiError(
      Post("/v1/chat/completions", Chat({{"tools", tools}, {"structured_outputs", {{"regex", "a+"}}}})), 400,
      "structured_outputs");
  ojson bad = WeatherTool(true);
  bad["function"]["strict"] = 1;
  ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", {bad}}})), 400, "tools[0].function.strict");
  EXPECT_EQ(engine.num_submitted(), before);
}

TEST_F(ServerStructuredOutput, StrictToolsWithAnXmlCallTemplateAreRefused) {
  prompts.xml_tool_calls = true;
  prompts.added_tokens = {{"<tool_call>", 300}, {"</tool_call>", 301}};
  Start();
  std::string msg = ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", {WeatherTool(true)}}})), 400,
                                   "tools[0].function.strict");
  EXPECT_NE(msg.find("XML"), std::string::npos) << msg;
  ExpectApiError(Post("/v1/chat/completions", Chat({{"tools", {WeatherTool(true)}}, {"tool_choice", "required"}})),
                 400, "tools");
  // Not strict: the calls are parsed as usual.
  EXPECT_EQ(Post("/v1/chat/completions", Chat({{"tools", {WeatherTool(false)}}})).status, 200);
}

}  // namespace
}  // namespace tessera

// tessera tests: Gemma 4's published chat template (tests/data/templates/gemma4, the template
// DiffusionGemma ships) rendered by tessera's Jinja engine must equal Python Jinja2's rendering byte
// for byte: golden.json holds Jinja2's renders (tools/make_gemma4_template_golden.py) of
// conversations with a system / developer turn, multi-turn chat, tool declarations, tool calls with
// arguments of every JSON type, tool responses, reasoning, enable_thinking on and off,
// add_generation_prompt on and off, and a case the template rejects.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/template/chat_template.h"

namespace tessera {
namespace {

using nlohmann::ordered_json;

ChatTemplateInputs Inputs(const ordered_json& input) {
  ChatTemplateInputs in;
  in.messages = input["messages"];
  in.tools = input["tools"];
  in.add_generation_prompt = input["add_generation_prompt"].get<bool>();
  in.extra_kwargs = input["kwargs"];
  in.bos_token = input["bos_token"].get<std::string>();
  in.eos_token = input["eos_token"].get<std::string>();
  return in;
}

TEST(ChatTemplateGemma4, MatchesJinja2ByteForByte) {
  const std::string source = testing::ReadFile(testing::DataPath("templates/gemma4/chat_template.jinja"));
  ASSERT_EQ(source.size(), 18683u) << "not the published template (README.md gives its SHA-256)";
  ordered_json golden = ordered_json::parse(testing::ReadFile(testing::DataPath("templates/gemma4/golden.json")));
  const ordered_json& cases = golden["cases"];
  ASSERT_GE(cases.size(), 20u);
  ChatTemplate tpl(source);
  int rendered = 0, rejected = 0;
  for (const ordered_json& c : cases) {
    const std::string name = c["name"].get<std::string>();
    std::string got, error;
    try {
      got = tpl.Render(Inputs(c["input"]));
    } catch (const Error& e) {
      error = e.what();
    }
    if (c.contains("rendered")) {
      ++rendered;
      EXPECT_EQ(error, "") << name;
      EXPECT_EQ(got, c["rendered"].get<std::string>()) << name;
    } else {
      ++rejected;
      // Jinja2's "TemplateError: <message>": the template's raise_exception message comes through.
      const std::string want = c["error"].get<std::string>();
      const std::string message = want.substr(want.find(": ") + 2);
      EXPECT_EQ(error, message) << name;
    }
  }
  EXPECT_GE(rendered, 20);
  EXPECT_EQ(rejected, 1);
}

// The generation prompt decides where the model's reply starts, which the output parsers rely on
// (chat_format.h): after a tool response with thinking on, inside an opened thought channel.
TEST(ChatTemplateGemma4, GenerationPromptShapes) {
  ordered_json golden = ordered_json::parse(testing::ReadFile(testing::DataPath("templates/gemma4/golden.json")));
  auto rendered = [&](const std::string& name) {
    for (const ordered_json& c : golden["cases"])
      if (c["name"] == name) return c["rendered"].get<std::string>();
    ADD_FAILURE() << "no case " << name;
    return std::string();
  };
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  EXPECT_TRUE(ends_with(rendered("plain"), "<|turn>model\n<|channel>thought\n<channel|>"));
  EXPECT_TRUE(ends_with(rendered("thinking_on"), "<|turn>model\n"));
  EXPECT_TRUE(ends_with(rendered("tool_call_and_response"), "<tool_response|>"));
  EXPECT_TRUE(ends_with(rendered("tool_call_and_response_thinking"), "<tool_response|><|channel>thought\n"));
}

}  // namespace
}  // namespace tessera

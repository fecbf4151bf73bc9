// tessera tests: TokenizerPromptBuilder with the real Qwen3 tokenizer and chat template. The
// expected prompt text was rendered by Python's Jinja2 (HF's settings: trim_blocks, lstrip_blocks,
// tojson = json.dumps(ensure_ascii=False)) from the same OpenAI-shaped request after the server's
// normalization (arguments as an object, null content as "").
#include <gtest/gtest.h>

#include <filesystem>

#include "server/openai_protocol.h"
#include "server/prompt_builder.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

TEST(ServerPromptBuilder, Qwen3ChatWithToolsMatchesJinja2) {
  std::string dir = testing::NpmTokenizerDir("tokenizer-qwen3");
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    GTEST_SKIP() << "no Qwen3 tokenizer at " << dir << " (run scripts/fetch_test_data.sh)";
  auto tok = Tokenizer::FromDir(dir);
  TokenizerPromptBuilder builder(*tok);
  ojson body = ojson::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "chat_template_kwargs": {"enable_thinking": false}})");
  EngineModelInfo info;
  info.name = "m";
  ParsedRequest req = ParseChatRequest(body, info, {});
  std::vector<int32_t> ids = builder.BuildChat(req.messages, req.tools, req.chat_template_kwargs);
  const std::string expected =
      "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with "
      "the "
      "user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get weather\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
      "\"string\"}}}}}\n</tools>\n\n"
      "For each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n"
      "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  EXPECT_EQ(builder.Decode(ids), expected);
  // The template wrote the special tokens: they are single ids, not spelled out.
  EXPECT_EQ(ids.front(), *tok->TokenToId("<|im_start|>"));
  EXPECT_EQ(builder.Encode("Hello"), tok->Encode("Hello", true));
  EXPECT_EQ(builder.EncodeContinuation("<tool_call>\n"), tok->Encode("<tool_call>\n", false));
}

}  // namespace
}  // namespace tessera

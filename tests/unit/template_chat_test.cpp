// tessera tests: ChatTemplate on the real chat templates of the npm tokenizer packages (Qwen3,
// Llama 3, DeepSeek-V3, gpt-oss) against Python's Jinja2 over a set of conversations, and against
// the goldens that transformers' apply_chat_template produced (tests/data/fixtures/tokenizers).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/template/chat_template.h"

namespace tessera::testing {
nlohmann::ordered_json RenderWithReference(const nlohmann::ordered_json& cases, const std::string& tag);
}

namespace tessera {
namespace {

using nlohmann::ordered_json;

std::string TokenString(const ordered_json& tok) {
  if (tok.is_string()) return tok.get<std::string>();
  if (tok.is_object() && tok.contains("content")) return tok["content"].get<std::string>();
  return "";
}

struct Config {
  std::string tpl, bos, eos;
};

// The chat template of a tokenizer_config.json (string, or HF's list of named templates: "default").
std::optional<Config> LoadConfig(const std::string& path) {
  ordered_json cfg = ordered_json::parse(testing::ReadFile(path));
  Config c;
  c.bos = TokenString(cfg.value("bos_token", ordered_json()));
  c.eos = TokenString(cfg.value("eos_token", ordered_json()));
  ordered_json t = cfg.value("chat_template", ordered_json());
  if (t.is_string()) {
    c.tpl = t.get<std::string>();
  } else if (t.is_array()) {
    for (const auto& e : t)
      if (e.value("name", "") == "default") c.tpl = e.value("template", "");
  }
  std::string jinja_file = std::filesystem::path(path).parent_path() / "chat_template.jinja";
  if (c.tpl.empty() && std::filesystem::exists(jinja_file)) c.tpl = testing::ReadFile(jinja_file);
  if (c.tpl.empty()) return std::nullopt;
  return c;
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
   "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "description": "Web search",
   "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}
])";

struct Conversation {
  const char* name;
  const char* messages;
  bool tools = false;
  bool add_generation_prompt = true;
  const char* extra = "{}";
};

const Conversation kConversations[] = {
    {"plain", R"([{"role": "user", "content": "What is a mixture of experts?"}])"},
    {"system_multi_turn",
     R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "  Deploy me, 请.  "}])"},
    {"no_generation_prompt",
     R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}])", false, false},
    {"tools_given", R"([{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "Weather in Paris?"}])",
     true},
    {"tool_calls_and_results",
     R"([{"role": "user", "content": "Weather in Paris and Rome?"},
         {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
         {"role": "tool", "content": "18C sunny"}, {"role": "tool", "content": "22C cloudy"},
         {"role": "assistant", "content": "Paris 18C, Rome 22C."}, {"role": "user", "content": "Thanks"}])",
     true},
    {"tool_calls_dict_args_null_content",
     R"([{"role": "user", "content": "Search cats"},
         {"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"q": "cats", "n": 3}}}]},
         {"role": "tool", "content": "{\"hits\": [\"a\", \"b\"]}"}])",
     true},
    {"reasoning_content",
     R"([{"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "4", "reasoning_content": "Adding two and two."},
         {"role": "user", "content": "3+3?"},
         {"role": "assistant", "content": "<think>\nsix\n</think>\n\n6"}])",
     false, false},
    {"enable_thinking_false", R"([{"role": "user", "content": "Quick answer please"}])", false, true,
     R"({"enable_thinking": false})"},
    {"unicode_and_newlines",
     R"([{"role": "system", "content": "Réponds en français.\n\nSois bref."}, {"role": "user", "content": "日本語 😀\nline2\n"}])"},
};

ordered_json Context(const Config& cfg, const Conversation& conv) {
  // Mirrors what transformers passes to the template (and what ChatTemplate::Render builds).
  ordered_json ctx;
  ctx["messages"] = ordered_json::parse(conv.messages);
  ctx["tools"] = conv.tools ? ordered_json::parse(kTools) : ordered_json();
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = conv.add_generation_prompt;
  ctx["bos_token"] = cfg.bos;
  ctx["eos_token"] = cfg.eos;
  ordered_json extra = ordered_json::parse(conv.extra);
  for (const auto& [k, v] : extra.items()) ctx[k] = v;
  return ctx;
}

void CheckPackage(const std::string& package) {
  std::string dir = testing::NpmTokenizerDir(package);
  if (!std::filesystem::exists(dir + "/tokenizer_config.json"))
    GTEST_SKIP() << dir << " missing: run scripts/fetch_test_data.sh";
  std::optional<Config> cfg = LoadConfig(dir + "/tokenizer_config.json");
  if (!cfg) GTEST_SKIP() << package << " ships no chat template (tokenizer_config.json has no chat_template)";
  ordered_json cases = ordered_json::array();
  for (const auto& conv : kConversations) cases.push_back({{"template", cfg->tpl}, {"context", Context(*cfg, conv)}});
  ordered_json ref = testing::RenderWithReference(cases, package);
  ASSERT_EQ(ref.size(), cases.size());
  ChatTemplate tpl(cfg->tpl);
  int rendered = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Conversation& conv = kConversations[i];
    ChatTemplateInputs in;
    in.messages = ordered_json::parse(conv.messages);
    in.tools = conv.tools ? ordered_json::parse(kTools) : ordered_json();
    in.add_generation_prompt = conv.add_generation_prompt;
    in.extra_kwargs = ordered_json::parse(conv.extra);
    in.bos_token = cfg->bos;
    in.eos_token = cfg->eos;
    std::string got, error;
    try {
      got = tpl.Render(in);
    } catch (const Error& e) {
      error = e.what();
    }
    if (ref[i].contains("ok")) {
      ++rendered;
      EXPECT_EQ(error, "") << package << " / " << conv.name;
      EXPECT_EQ(got, ref[i]["ok"].get<std::string>()) << package << " / " << conv.name;
    } else {
      EXPECT_NE(error, "") << package << " / " << conv.name << ": Jinja2 raised " << ref[i]["error"];
    }
  }
  EXPECT_GE(rendered, 3) << package << ": most conversations should render";
}

TEST(ChatTemplateReference, Qwen3) { CheckPackage("tokenizer-qwen3"); }
TEST(ChatTemplateReference, Llama3) { CheckPackage("tokenizer-llama3"); }
TEST(ChatTemplateReference, DeepSeekV3) { CheckPackage("tokenizer-deepseek_v3"); }
TEST(ChatTemplateReference, GptOss) { CheckPackage("tokenizer-gptoss"); }

// Goldens rendered by transformers' apply_chat_template.
void CheckGoldens(const ordered_json& chats, const Config& cfg, const std::string& what) {
  ASSERT_TRUE(chats.is_array() && !chats.empty()) << what;
  ChatTemplate tpl(cfg.tpl);
  for (size_t i = 0; i < chats.size(); ++i) {
    const ordered_json& input = chats[i]["input"];
    ChatTemplateInputs in;
    in.messages = input["messages"];
    in.tools = input.value("tools", ordered_json());
    in.add_generation_prompt = input.value("add_generation_prompt", false);
    ordered_json extra = ordered_json::object();
    for (const auto& [k, v] : input.items())
      if (k != "messages" && k != "tools" && k != "add_generation_prompt") extra[k] = v;
    in.extra_kwargs = extra;
    in.bos_token = cfg.bos;
    in.eos_token = cfg.eos;
    EXPECT_EQ(tpl.Render(in), chats[i]["rendered"].get<std::string>()) << what << " chat #" << i;
  }
}

TEST(ChatTemplateGolden, Qwen3MatchesTransformers) {
  std::string cfg_path = testing::NpmTokenizerDir("tokenizer-qwen3") + "/tokenizer_config.json";
  if (!std::filesystem::exists(cfg_path)) GTEST_SKIP() << cfg_path << " missing: run scripts/fetch_test_data.sh";
  std::optional<Config> cfg = LoadConfig(cfg_path);
  ASSERT_TRUE(cfg);
  ordered_json golden = ordered_json::parse(testing::ReadFile(testing::DataPath("fixtures/tokenizers/qwen3_golden.json")));
  CheckGoldens(golden["qwen3"]["chat"], *cfg, "qwen3_golden.json");
}

TEST(ChatTemplateGolden, BytesFixtureMatchesTransformers) {
  std::optional<Config> cfg = LoadConfig(testing::DataPath("fixtures/tokenizers/bytes/tokenizer_config.json"));
  ASSERT_TRUE(cfg);
  ordered_json golden = ordered_json::parse(testing::ReadFile(testing::DataPath("fixtures/tokenizers/bytes/golden.json")));
  CheckGoldens(golden["chat"], *cfg, "bytes/golden.json");
}

TEST(ChatTemplate, ExtraKwargsOverrideAndRaise) {
  ChatTemplate tpl(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}"
      "{{ bos_token }}{{ messages[0].content }}{% if add_generation_prompt %}>{% endif %}{{ custom }}");
  ChatTemplateInputs in;
  in.messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.extra_kwargs = {{"custom", "!"}};
  EXPECT_EQ(tpl.Render(in), "<s>hi>!");
  in.messages = ordered_json::parse(R"([{"role": "assistant", "content": "hi"}])");
  try {
    tpl.Render(in);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "first message must be from the user");
  }
}

TEST(ChatTemplate, SyntaxErrorIsInvalidArgumentWithLocation) {
  try {
    ChatTemplate tpl("{% for m in messages %}\n{{ m.content }\n");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera

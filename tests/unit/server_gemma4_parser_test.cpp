// tessera tests: Gemma 4's output parsers on hand-made model outputs: tool calls
// (<|tool_call>call:NAME{...}<tool_call|>) into OpenAI calls with JSON arguments, the thinking channel
// (<|channel>thought\n...<channel|>) into reasoning, both chained (ChatOutputParser), malformed
// output falling back to content unchanged, and streaming split at every byte boundary giving what
// the one-shot parse gives. The expected arguments are written by hand here, and checked against
// Google's own writer of the format: every call the published chat template rendered in
// tests/data/templates/gemma4/golden.json must parse back to the arguments it was given.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_format.h"
#include "server/gemma4_tool_parser.h"
#include "server/openai_protocol.h"
#include "server/prompt_builder.h"
#include "server/reasoning_parser.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using ojson = nlohmann::ordered_json;

const std::string Q = "<|\"|>";  // Gemma 4's string delimiter

std::function<std::string()> Counter() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

// The whole output through a parser in the given pieces: content, reasoning and calls.
struct Collected {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
  std::vector<int> indices;
};
void Take(Collected& c, std::vector<ToolStreamEvent> evs) {
  for (auto& e : evs) {
    if (e.is_call) {
      c.calls.push_back(e.call);
      c.indices.push_back(e.index);
    } else {
      (e.is_reasoning ? c.reasoning : c.content) += e.content;
    }
  }
}
Collected Feed(ToolStreamParser& p, const std::vector<std::string>& pieces) {
  Collected c;
  for (const auto& s : pieces) Take(c, p.Push(s));
  Take(c, p.Finish());
  return c;
}

void ExpectSame(const Collected& a, const Collected& b, const std::string& what) {
  EXPECT_EQ(a.content, b.content) << what;
  EXPECT_EQ(a.reasoning, b.reasoning) << what;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << what;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << what;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << what;
    EXPECT_EQ(a.calls[i].id, b.calls[i].id) << what;
  }
  EXPECT_EQ(a.indices, b.indices) << what;
}

// Streaming equals one-shot, split in two at every byte and fed byte by byte.
template <typename Make>
void ExpectSplitInvariant(const std::string& text, Make make, const std::string& what) {
  auto once = make();
  Collected ref = Feed(*once, {text});
  for (size_t i = 0; i <= text.size(); ++i) {
    auto p = make();
    ExpectSame(Feed(*p, {text.substr(0, i), text.substr(i)}), ref, what + " split at " + std::to_string(i));
  }
  std::vector<std::string> bytes;
  for (char ch : text) bytes.emplace_back(1, ch);
  auto p = make();
  ExpectSame(Feed(*p, bytes), ref, what + " byte by byte");
}

// ---- the argument syntax ----

TEST(Gemma4Arguments, EveryJsonType) {
  const std::string args = "query:" + Q + "say \"hi\" \\ then\nnew line {braces} [brackets], commas: and <tags>" + Q +
                           ",limit:10,ratio:2.5,neg:-3e-05,big:12345678901,exact:false,yes:true,missing:null,"
                           "filters:{year:2024,tags:[" +
                           Q + "a" + Q + "," + Q + "b c" + Q +
                           "],nested:{deep:{deeper:[1,2.5,[true,null]]}}},"
                           "points:[{x:1.5,y:-2},{x:0,y:0.25}],empty_obj:{},empty_arr:[],blank:" +
                           Q + Q;
  auto got = ParseGemma4Arguments(args);
  ASSERT_TRUE(got.has_value());
  const ojson want = ojson::parse(R"({
    "query": "say \"hi\" \\ then\nnew line {braces} [brackets], commas: and <tags>",
    "limit": 10, "ratio": 2.5, "neg": -3e-05, "big": 12345678901, "exact": false, "yes": true, "missing": null,
    "filters": {"year": 2024, "tags": ["a", "b c"], "nested": {"deep": {"deeper": [1, 2.5, [true, null]]}}},
    "points": [{"x": 1.5, "y": -2}, {"x": 0, "y": 0.25}], "empty_obj": {}, "empty_arr": [], "blank": ""})");
  EXPECT_EQ(*got, want);  // values, types and the model's key order
  EXPECT_TRUE((*got)["limit"].is_number_integer());
  EXPECT_TRUE((*got)["ratio"].is_number_float());
}

TEST(Gemma4Arguments, TolerancesAsVllm) {
  // Whitespace between tokens, quoted keys, a trailing comma, bare words as strings, None / nil.
  auto got = ParseGemma4Arguments(" a : 1 ,\n " + Q + "b c" + Q + ":" + Q + "x" + Q + ", mode: fast , n:None,m:NIL,");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, ojson::parse(R"({"a": 1, "b c": "x", "mode": "fast", "n": null, "m": null})"));
  EXPECT_EQ(*ParseGemma4Arguments(""), ojson::object());
  EXPECT_EQ(*ParseGemma4Arguments("  \n"), ojson::object());
  // Not JSON numbers: kept as the words they are.
  EXPECT_EQ(*ParseGemma4Arguments("a:007,b:1.,c:inf,d:+5"),
            ojson::parse(R"({"a": "007", "b": "1.", "c": "inf", "d": "+5"})"));
  // A string keeps everything, markers of other syntaxes included; keys may repeat (the last wins).
  EXPECT_EQ(*ParseGemma4Arguments("k:" + Q + "<tool_call|>}]" + Q + ",k:2"), ojson::parse(R"({"k": 2})"));
}

TEST(Gemma4Arguments, MalformedIsRejected) {
  for (const std::string& bad : std::vector<std::string>{
           "a:" + Q + "unterminated",    // string never closed
           "a:{b:1",                     // object never closed
           "a:[1,2",                     // array never closed
           "a:1}",                       // a closing brace too many
           "a:[1,2]]",                   // a closing bracket too many
           "a",                          // no colon
           ":1",                         // empty key
           "a{:1",                       // structure in a key
           "a:",                         // no value
           "a:1 b:2",                    // no comma
           "a:[1 2]",                    // no comma in an array
           "a:" + Q + "x" + Q + "y",     // text after a string
           "a:b" + Q + "c" + Q,          // a delimiter inside a bare word
           "a:{b:" + Q + "x" + Q + "]",  // mismatched brackets
       }) {
    EXPECT_FALSE(ParseGemma4Arguments(bad).has_value()) << bad;
  }
  // Nesting deeper than kMaxJsonDepth (the JSON dump would recurse once a level) is refused.
  std::string deep = "a:", deep_ok = "a:";
  for (int i = 0; i < kMaxJsonDepth; ++i) deep += "[";
  for (int i = 0; i < kMaxJsonDepth; ++i) deep += "]";
  for (int i = 0; i < kMaxJsonDepth - 2; ++i) deep_ok += "[";
  for (int i = 0; i < kMaxJsonDepth - 2; ++i) deep_ok += "]";
  EXPECT_FALSE(ParseGemma4Arguments(deep).has_value());
  EXPECT_TRUE(ParseGemma4Arguments(deep_ok).has_value());
  std::string huge = "a:";
  for (int i = 0; i < 100000; ++i) huge += "{b:";
  EXPECT_FALSE(ParseGemma4Arguments(huge).has_value());
}

TEST(Gemma4CallBody, NameAndArguments) {
  auto c = ParseGemma4CallBody("call:get_weather{city:" + Q + "Paris" + Q + "}");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->name, "get_weather");
  EXPECT_EQ(c->arguments, R"({"city":"Paris"})");
  c = ParseGemma4CallBody("call:ping{}");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->arguments, "{}");
  c = ParseGemma4CallBody("call:module.get-weather_2{}");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->name, "module.get-weather_2");
  for (const std::string& bad :
       std::vector<std::string>{"get_weather{}", "call:{}", "call:get weather{}", "call:f", "call:f{a:1", "call:f{}x",
                                "call:f{}}", "call:<f>{}", "call:f(a=1)"})
    EXPECT_FALSE(ParseGemma4CallBody(bad).has_value()) << bad;
}

// Google's chat template writes calls from JSON arguments; our parser must read back exactly those.
TEST(Gemma4CallBody, ReadsBackWhatTheChatTemplateWrote) {
  ojson golden = ojson::parse(testing::ReadFile(testing::DataPath("templates/gemma4/golden.json")));
  int checked = 0;
  for (const ojson& c : golden["cases"]) {
    if (!c.contains("rendered")) continue;
    const std::string text = c["rendered"].get<std::string>();
    std::vector<ojson> want;
    for (const ojson& m : c["input"]["messages"])
      if (m.contains("tool_calls"))
        for (const ojson& tc : m["tool_calls"]) want.push_back(tc["function"]);
    ToolParseResult r = ParseGemma4ToolCalls(text, Counter());
    ASSERT_EQ(r.calls.size(), want.size()) << c["name"];
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, want[i]["name"]) << c["name"];
      // The template writes keys sorted (dictsort): compare as unordered JSON.
      EXPECT_EQ(nlohmann::json::parse(r.calls[i].arguments), nlohmann::json(want[i]["arguments"])) << c["name"];
      ++checked;
    }
  }
  EXPECT_GE(checked, 8);
}

// ---- the streaming tool-call parser ----

TEST(Gemma4ToolParser, SingleCallWithContentAround) {
  const std::string text =
      "Let me check.\n\n<|tool_call>call:get_weather{city:" + Q + "Paris" + Q + ",days:3}<tool_call|>";
  ToolParseResult r = ParseGemma4ToolCalls(text, Counter());
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].id, "call_0");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris","days":3})");
}

TEST(Gemma4ToolParser, MultipleCallsWithoutSeparators) {
  const std::string text = "<|tool_call>call:get_weather{city:" + Q + "Paris" + Q + "}<tool_call|>" +
                           "<|tool_call>call:get_weather{city:" + Q + "Rome" + Q + "}<tool_call|>\n" +
                           "<|tool_call>call:ping{}<tool_call|>";
  ToolParseResult r = ParseGemma4ToolCalls(text, Counter());
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 3u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(r.calls[1].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(r.calls[2].name, "ping");
  EXPECT_EQ(r.calls[2].id, "call_2");
}

TEST(Gemma4ToolParser, MalformedCallsFallBackToContent) {
  const std::vector<std::string> bad = {
      "<|tool_call>get_weather{city:" + Q + "Paris" + Q + "}<tool_call|>",  // no "call:"
      "<|tool_call>call:get weather{}<tool_call|>",                         // a space in the name
      "<|tool_call>call:f{a:" + Q + "unterminated}<tool_call|>",            // string not closed
      "<|tool_call>call:f{a:{b:1}<tool_call|>",                             // brace not closed
      "<|tool_call>call:f{a:1}}<tool_call|>",                               // a brace too many
      "<|tool_call>call:f{a:1} trailing<tool_call|>",                       // text after the arguments
      "<|tool_call>{\"name\": \"f\", \"arguments\": {}}<tool_call|>",       // JSON is not the syntax
      "<|tool_call>call:f{a:1}",                                            // never closed (max_tokens)
  };
  for (const std::string& text : bad) {
    const std::string full = "Before. " + text;
    ToolParseResult r = ParseGemma4ToolCalls(full, Counter());
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, full) << text;  // unchanged, markers included
    ExpectSplitInvariant(
        full, [] { return std::make_unique<Gemma4ToolCallParser>(Counter()); }, text);
  }
  // A bad call does not stop the good one after it.
  ToolParseResult r = ParseGemma4ToolCalls(bad[1] + "<|tool_call>call:ping{}<tool_call|>", Counter());
  EXPECT_EQ(r.content, bad[1]);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "ping");
}

TEST(Gemma4ToolParser, StreamingEqualsOneShotAtEveryByte) {
  const std::vector<std::string> texts = {
      "Sure.\n<|tool_call>call:get_weather{city:" + Q + "Saint-Étienne" + Q + ",unit:" + Q + "celsius" + Q +
          "}<tool_call|>",
      "<|tool_call>call:search_docs{query:" + Q + "a \"quoted\" \\path\\ and\nnew {line}" + Q +
          ",filters:{year:2024,tags:[" + Q + "x" + Q + "]},limit:2.5,exact:true,none:null}<tool_call|>" +
          "<|tool_call>call:ping{}<tool_call|> and after",
      "no calls at all, but < and <| and <|tool and a stray <tool_call|>",
      "text <|tool_cal",  // a partial marker at the very end is content
  };
  for (const std::string& t : texts)
    ExpectSplitInvariant(
        t, [] { return std::make_unique<Gemma4ToolCallParser>(Counter()); }, t);
  ToolParseResult r = ParseGemma4ToolCalls(texts[3], Counter());
  EXPECT_EQ(r.content, texts[3]);
}

TEST(Gemma4ToolParser, ForcedOpeningThenTheModelsArguments) {
  // tool_choice named: the server writes the call's opening into the prompt and feeds it first.
  ojson body = ojson::parse(R"({"model": "m", "messages": [{"role": "user", "content": "Weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather"}}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})");
  EngineModelInfo info;
  info.name = "m";
  info.max_model_len = 4096;
  info.vocab_size = 1000;
  ParsedRequest req = ParseChatRequest(body, info, DiffusionParams{});
  const std::string open = ForcedToolCallPrefix(req, ChatFormat::kGemma4);
  EXPECT_EQ(open, "<|tool_call>call:get_weather{");
  ChatOutputParser p(ChatFormat::kGemma4, true, req.tools, false, Counter());
  EXPECT_TRUE(p.Push(open).empty());
  Collected c = Feed(p, {"city:" + Q + "Oslo" + Q + "}<tool_call|>"});
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].arguments, R"({"city":"Oslo"})");
  body["tool_choice"] = "required";
  EXPECT_EQ(ForcedToolCallPrefix(ParseChatRequest(body, info, DiffusionParams{}), ChatFormat::kGemma4),
            "<|tool_call>call:");
  body["tool_choice"] = "auto";
  EXPECT_EQ(ForcedToolCallPrefix(ParseChatRequest(body, info, DiffusionParams{}), ChatFormat::kGemma4), "");
}

// ---- the thinking channel ----

TEST(Gemma4Reasoning, ChannelWithLabel) {
  ReasoningSplit r =
      SplitReasoning("<|channel>thought\nStep 1.\nStep 2.\n<channel|>\nThe answer is 4.", Gemma4ReasoningMarkers());
  EXPECT_EQ(r.reasoning, "Step 1.\nStep 2.");
  EXPECT_EQ(r.content, "The answer is 4.");
}

TEST(Gemma4Reasoning, Variants) {
  const ReasoningMarkers m = Gemma4ReasoningMarkers();
  // No label: the channel's text as is.
  EXPECT_EQ(SplitReasoning("<|channel>pondering<channel|>ok", m).reasoning, "pondering");
  // The label only right at the start of the channel.
  EXPECT_EQ(SplitReasoning("<|channel>thoughtful\nx<channel|>ok", m).reasoning, "thoughtful\nx");
  // An empty thought (the non-thinking generation prompt's shape): no reasoning.
  ReasoningSplit r = SplitReasoning("<|channel>thought\n<channel|>Hello", m);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Hello");
  // Unterminated (max_tokens): all reasoning; a partial label too.
  EXPECT_EQ(SplitReasoning("<|channel>thought\nstill going", m).reasoning, "still going");
  r = SplitReasoning("<|channel>thou", m);
  EXPECT_EQ(r.reasoning, "thou");
  EXPECT_EQ(r.content, "");
  // The prompt opened the channel (after a tool response, thinking on).
  r = SplitReasoning("more thinking\n<channel|>Done.", m, /*in_channel=*/true);
  EXPECT_EQ(r.reasoning, "more thinking");
  EXPECT_EQ(r.content, "Done.");
  // Text before the channel stays content; two channels; a stray close is content.
  r = SplitReasoning("Hmm. <|channel>thought\nA<channel|>B <|channel>thought\nC<channel|> D <channel|>", m);
  EXPECT_EQ(r.reasoning, "AC");
  EXPECT_EQ(r.content, "Hmm. B D <channel|>");
  // No channel: everything is content, untouched.
  r = SplitReasoning("  plain\n text  ", m);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "  plain\n text  ");
}

TEST(Gemma4Reasoning, StreamingEqualsOneShotAtEveryByte) {
  for (bool in_channel : {false, true}) {
    for (const std::string& t : std::vector<std::string>{
             "<|channel>thought\nStep 1.\n\n<channel|>\n\nAnswer <b>4</b>.",
             "pre <|channel>thou<|channel>ght\n x <channel|><|channel>thought\n<channel|>",
             "a <channel| b <|channe c<channel|> d",
             "<|channel>thought\n  spaced  \n",
         })
      ExpectSplitInvariant(
          t,
          [in_channel] { return std::make_unique<ChatOutputParser>(ChatFormat::kGemma4, false, ojson(), in_channel); },
          t + (in_channel ? " (in channel)" : ""));
  }
}

// ---- both together ----

TEST(Gemma4Output, ThinkingThenCalls) {
  const std::string text = "<|channel>thought\nThe user wants the weather; call the tool.\n<channel|>" +
                           std::string("<|tool_call>call:get_weather{city:") + Q + "Paris" + Q +
                           "}<tool_call|><|tool_call>call:get_weather{city:" + Q + "Rome" + Q + "}<tool_call|>";
  ChatOutput o = ParseChatOutput(ChatFormat::kGemma4, text, true, ojson(), false, Counter());
  EXPECT_EQ(o.reasoning, "The user wants the weather; call the tool.");
  EXPECT_EQ(o.content, "");
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(o.calls[1].arguments, R"({"city":"Rome"})");
  ExpectSplitInvariant(
      text, [] { return std::make_unique<ChatOutputParser>(ChatFormat::kGemma4, true, ojson(), false, Counter()); },
      "thinking then calls");
  // A call that starts before the channel is closed ends the thinking (as vLLM's parser decides).
  const std::string unclosed = "<|channel>thought\nI'll call it.<|tool_call>call:ping{}<tool_call|>";
  o = ParseChatOutput(ChatFormat::kGemma4, unclosed, true, ojson(), false, Counter());
  EXPECT_EQ(o.reasoning, "I'll call it.");
  EXPECT_EQ(o.content, "");
  ASSERT_EQ(o.calls.size(), 1u);
  ExpectSplitInvariant(
      unclosed, [] { return std::make_unique<ChatOutputParser>(ChatFormat::kGemma4, true, ojson(), false, Counter()); },
      "unclosed thinking then a call");
  // Without tools in the request, calls are not parsed: content, markers and all.
  o = ParseChatOutput(ChatFormat::kGemma4, text, false, ojson(), false, Counter());
  EXPECT_EQ(o.reasoning, "The user wants the weather; call the tool.");
  EXPECT_TRUE(o.calls.empty());
  EXPECT_EQ(o.content, text.substr(text.find("<|tool_call>")));
}

TEST(Gemma4Output, AfterAToolResponseThinkingOn) {
  // The template's generation prompt ends in "<|channel>thought\n": the reply starts in the channel.
  const std::string text = "The tool says 18C.\n<channel|>It is 18C in Paris.";
  ChatOutput o = ParseChatOutput(ChatFormat::kGemma4, text, true, ojson(), /*in_reasoning=*/true, Counter());
  EXPECT_EQ(o.reasoning, "The tool says 18C.");
  EXPECT_EQ(o.content, "It is 18C in Paris.");
  EXPECT_TRUE(o.calls.empty());
}

TEST(Gemma4Output, QwenFormatsAreUnchanged) {
  // Hermes has no thinking split: <think> and Gemma markers stay content; its calls still parse.
  const std::string text =
      "<think>hm</think><|channel>x<channel|><tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  ChatOutput o = ParseChatOutput(ChatFormat::kHermes, text, true, ojson(), false, Counter());
  EXPECT_EQ(o.reasoning, "");
  EXPECT_EQ(o.content, "<think>hm</think><|channel>x<channel|>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_FALSE(ChatOutputParser::Needed(ChatFormat::kHermes, false));
  EXPECT_TRUE(ChatOutputParser::Needed(ChatFormat::kGemma4, false));
}

// ---- format detection and the prompt side ----

TEST(ChatFormat, DetectedFromTheTemplate) {
  EXPECT_EQ(DetectChatFormat(testing::ReadFile(testing::DataPath("templates/gemma4/chat_template.jinja"))),
            ChatFormat::kGemma4);
  EXPECT_EQ(DetectChatFormat("{{ '<|im_start|>' }}<tool_call>"), ChatFormat::kHermes);
  EXPECT_EQ(DetectChatFormat("<tool_call>\n<function=example_function_name>"), ChatFormat::kQwen3Coder);
  EXPECT_EQ(DetectChatFormat(""), ChatFormat::kHermes);
  EXPECT_STREQ(ChatFormatName(ChatFormat::kGemma4), "gemma4");
}

TEST(ChatFormat, MarkerIdsAndAnOpenChannelInThePrompt) {
  const std::map<std::string, int32_t> vocab = {{"<|tool_call>", 48}, {"<tool_call|>", 49}, {"<|\"|>", 52},
                                                {"<|channel>", 100},  {"<channel|>", 101},  {"<|turn>", 105},
                                                {"<turn|>", 106}};
  MarkerEncoder encode = [&](const std::string& m) {
    auto it = vocab.find(m);
    return it == vocab.end() ? std::vector<int32_t>{1, 2} : std::vector<int32_t>{it->second};
  };
  EXPECT_EQ(OutputMarkerIds(ChatFormat::kGemma4, encode), (std::vector<int32_t>{48, 49, 52, 100, 101}));
  EXPECT_TRUE(OutputMarkerIds(ChatFormat::kHermes, encode).empty());
  // ...<|turn>model\n<|channel>thought\n<channel|>  (thinking off): closed
  EXPECT_FALSE(PromptOpensReasoning(ChatFormat::kGemma4, {105, 7, 100, 8, 101}, encode));
  // ...<tool_response|><|channel>thought\n  (after a tool response, thinking on): open
  EXPECT_TRUE(PromptOpensReasoning(ChatFormat::kGemma4, {105, 7, 100, 8, 101, 60, 100, 8, 9}, encode));
  // ...<|turn>model\n  (thinking on, a new turn): closed
  EXPECT_FALSE(PromptOpensReasoning(ChatFormat::kGemma4, {100, 8, 105, 7}, encode));
  // A forced call opened after the channel: closed
  EXPECT_FALSE(PromptOpensReasoning(ChatFormat::kGemma4, {100, 8, 48, 5}, encode));
  EXPECT_FALSE(PromptOpensReasoning(ChatFormat::kHermes, {100}, encode));
  EXPECT_FALSE(PromptOpensReasoning(ChatFormat::kGemma4, {}, encode));
}

TEST(ChatFormat, ThePromptBuilderTellsItFromTheTemplate) {
  const std::string dir = testing::NpmTokenizerDir("tokenizer-qwen3");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << dir << " missing: run scripts/fetch_test_data.sh";
  std::unique_ptr<Tokenizer> tok = Tokenizer::FromDir(dir);
  TokenizerPromptBuilder gemma(*tok, testing::ReadFile(testing::DataPath("templates/gemma4/chat_template.jinja")));
  EXPECT_EQ(gemma.chat_format(), ChatFormat::kGemma4);
  EXPECT_FALSE(gemma.UsesXmlToolCalls());
  EXPECT_FALSE(gemma.BuildChat(ojson::parse(R"([{"role": "user", "content": "hi"}])"), nullptr, nullptr).empty());
  TokenizerPromptBuilder qwen(*tok);
  EXPECT_EQ(qwen.chat_format(), ChatFormat::kHermes);
}

}  // namespace
}  // namespace tessera

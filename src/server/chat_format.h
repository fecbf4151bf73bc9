// tessera server: what a model family's output looks like beyond its chat template, so that the
// server can turn it into OpenAI fields: how it writes tool calls (-> `tool_calls`), whether it thinks
// in a channel (-> `reasoning_content`), which special tokens the output text must keep for that,
// and how tool_choice opens a forced call. The family is told by its chat template's markers, as the
// server told Qwen3-Coder's XML calls apart before (a template is what the model was trained on):
//   kHermes      <tool_call>{"name": ..., "arguments": {...}}</tool_call>   Qwen3, Qwen3.5 (the default)
//   kQwen3Coder  <tool_call><function=NAME><parameter=P>...</tool_call>     a template that teaches <function=
//   kGemma4      <|tool_call>call:NAME{...}<tool_call|>, thinking in       a template with <|turn> and
//                <|channel>thought\n...<channel|>                          <|tool_call> or <|channel>
//                                                                          (Gemma 4, DiffusionGemma)
// ChatOutputParser is one choice's output parser: the thinking split first (kGemma4), then the tool
// calls of the content (when the request has tools), as vLLM's --reasoning-parser and
// --tool-call-parser gemma4 do.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace tessera {

enum class ChatFormat { kHermes, kQwen3Coder, kGemma4 };

const char* ChatFormatName(ChatFormat f);  // vLLM's parser names: "hermes", "qwen3_coder", "gemma4"
ChatFormat DetectChatFormat(std::string_view chat_template);
bool HasReasoningChannel(ChatFormat f);

// Encodes a marker's text without special tokens added (PromptBuilder::EncodeContinuation).
using MarkerEncoder = std::function<std::vector<int32_t>(const std::string&)>;

// The ids of the format's markers that are one token each: they must stay in the output text
// (GenerationRequest::keep_special_ids) although special tokens are otherwise dropped.
std::vector<int32_t> OutputMarkerIds(ChatFormat f, const MarkerEncoder& encode);

// Whether the prompt leaves the model inside its thinking channel (Gemma 4's template opens
// "<|channel>thought\n" after a tool response when thinking is on): the last channel marker of the
// prompt opens one, and no turn or call came after it.
bool PromptOpensReasoning(ChatFormat f, const std::vector<int32_t>& prompt, const MarkerEncoder& encode);

// The tool-call parser of the format.
std::unique_ptr<ToolStreamParser> MakeToolParser(ChatFormat f, const nlohmann::ordered_json& tools,
                                                 std::function<std::string()> make_id = NewToolCallId);

// One choice's output: reasoning events (is_reasoning), content and calls, incremental as the tool
// parsers (the events never depend on how the text was split).
class ChatOutputParser final : public ToolStreamParser {
 public:
  // parse_tools: the request has tools to call (tool_choice other than none); in_reasoning:
  // PromptOpensReasoning.
  ChatOutputParser(ChatFormat f, bool parse_tools, const nlohmann::ordered_json& tools, bool in_reasoning,
                   std::function<std::string()> make_id = NewToolCallId);
  // Whether the format and request need any parsing (else the text is all content).
  static bool Needed(ChatFormat f, bool parse_tools) { return parse_tools || HasReasoningChannel(f); }
  std::vector<ToolStreamEvent> Push(std::string_view text) override;
  std::vector<ToolStreamEvent> Finish() override;
  int num_calls() const override { return tools_ ? tools_->num_calls() : 0; }

 private:
  void Content(std::vector<ToolStreamEvent> evs, std::vector<ToolStreamEvent>& out);
  void Pieces(const std::vector<ReasoningPiece>& pieces, std::vector<ToolStreamEvent>& out);

  std::unique_ptr<ReasoningParser> reasoning_;  // null: no thinking channel in this format
  std::unique_ptr<ToolStreamParser> tools_;     // null: calls are not parsed (content as is)
};

struct ChatOutput {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};
// The parser fed `text` once, then finished.
ChatOutput ParseChatOutput(ChatFormat f, std::string_view text, bool parse_tools, const nlohmann::ordered_json& tools,
                           bool in_reasoning = false, std::function<std::string()> make_id = NewToolCallId);

}  // namespace tessera

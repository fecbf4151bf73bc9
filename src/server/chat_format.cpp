// tessera server: a model family's output conventions, and the per-choice output parser that chains
// the thinking split and the tool-call parser (see chat_format.h).
#include "server/chat_format.h"

#include "server/gemma4_tool_parser.h"

namespace tessera {
namespace {

// Gemma 4's markers, as its chat template writes them.
constexpr const char* kGemmaToolCall = "<|tool_call>";
constexpr const char* kGemmaToolCallEnd = "<tool_call|>";
constexpr const char* kGemmaQuote = "<|\"|>";
constexpr const char* kGemmaChannel = "<|channel>";
constexpr const char* kGemmaChannelEnd = "<channel|>";
constexpr const char* kGemmaTurn = "<|turn>";
constexpr const char* kGemmaTurnEnd = "<turn|>";

// The id of a marker that is one token, else -1.
int32_t MarkerId(const MarkerEncoder& encode, const std::string& marker) {
  std::vector<int32_t> ids = encode(marker);
  return ids.size() == 1 ? ids[0] : -1;
}

}  // namespace

const char* ChatFormatName(ChatFormat f) {
  switch (f) {
    case ChatFormat::kHermes:
      return "hermes";
    case ChatFormat::kQwen3Coder:
      return "qwen3_coder";
    case ChatFormat::kGemma4:
      return "gemma4";
  }
  return "hermes";
}

ChatFormat DetectChatFormat(std::string_view chat_template) {
  auto has = [&](std::string_view s) { return chat_template.find(s) != std::string_view::npos; };
  if (has(kGemmaTurn) && (has(kGemmaToolCall) || has(kGemmaChannel))) return ChatFormat::kGemma4;
  // Qwen3-Coder's template teaches the XML form in its tool instructions.
  if (has("<function=")) return ChatFormat::kQwen3Coder;
  return ChatFormat::kHermes;
}

bool HasReasoningChannel(ChatFormat f) { return f == ChatFormat::kGemma4; }

std::vector<int32_t> OutputMarkerIds(ChatFormat f, const MarkerEncoder& encode) {
  std::vector<int32_t> ids;
  if (f != ChatFormat::kGemma4) return ids;  // Qwen's markers are added tokens that are not special
  for (const char* m : {kGemmaToolCall, kGemmaToolCallEnd, kGemmaQuote, kGemmaChannel, kGemmaChannelEnd}) {
    int32_t id = MarkerId(encode, m);
    if (id >= 0) ids.push_back(id);
  }
  return ids;
}

bool PromptOpensReasoning(ChatFormat f, const std::vector<int32_t>& prompt, const MarkerEncoder& encode) {
  if (!HasReasoningChannel(f)) return false;
  const int32_t open = MarkerId(encode, kGemmaChannel);
  if (open < 0) return false;
  std::vector<int32_t> closing;
  for (const char* m : {kGemmaChannelEnd, kGemmaToolCall, kGemmaTurn, kGemmaTurnEnd})
    if (int32_t id = MarkerId(encode, m); id >= 0) closing.push_back(id);
  for (auto it = prompt.rbegin(); it != prompt.rend(); ++it) {
    if (*it == open) return true;
    for (int32_t c : closing)
      if (*it == c) return false;
  }
  return false;
}

std::unique_ptr<ToolStreamParser> MakeToolParser(ChatFormat f, const nlohmann::ordered_json& tools,
                                                 std::function<std::string()> make_id) {
  if (f == ChatFormat::kGemma4) return std::make_unique<Gemma4ToolCallParser>(std::move(make_id));
  return std::make_unique<ToolCallParser>(tools, std::move(make_id));
}

ChatOutputParser::ChatOutputParser(ChatFormat f, bool parse_tools, const nlohmann::ordered_json& tools,
                                   bool in_reasoning, std::function<std::string()> make_id) {
  if (HasReasoningChannel(f)) reasoning_ = std::make_unique<ReasoningParser>(Gemma4ReasoningMarkers(), in_reasoning);
  if (parse_tools) tools_ = MakeToolParser(f, tools, std::move(make_id));
}

void ChatOutputParser::Content(std::vector<ToolStreamEvent> evs, std::vector<ToolStreamEvent>& out) {
  for (ToolStreamEvent& e : evs) {
    if (!e.is_call && e.content.empty()) continue;
    if (!e.is_call && !out.empty() && !out.back().is_call && !out.back().is_reasoning) {
      out.back().content += e.content;
      continue;
    }
    out.push_back(std::move(e));
  }
}

void ChatOutputParser::Pieces(const std::vector<ReasoningPiece>& pieces, std::vector<ToolStreamEvent>& out) {
  for (const ReasoningPiece& p : pieces) {
    if (p.reasoning) {
      if (!out.empty() && out.back().is_reasoning) {
        out.back().content += p.text;
      } else {
        ToolStreamEvent ev;
        ev.is_reasoning = true;
        ev.content = p.text;
        out.push_back(std::move(ev));
      }
    } else if (tools_) {
      Content(tools_->Push(p.text), out);
    } else {
      ToolStreamEvent ev;
      ev.content = p.text;
      Content({std::move(ev)}, out);
    }
  }
}

std::vector<ToolStreamEvent> ChatOutputParser::Push(std::string_view text) {
  std::vector<ToolStreamEvent> out;
  if (reasoning_) {
    Pieces(reasoning_->Push(text), out);
  } else if (tools_) {
    Content(tools_->Push(text), out);
  } else {
    ToolStreamEvent ev;
    ev.content = std::string(text);
    Content({std::move(ev)}, out);
  }
  return out;
}

std::vector<ToolStreamEvent> ChatOutputParser::Finish() {
  std::vector<ToolStreamEvent> out;
  if (reasoning_) Pieces(reasoning_->Finish(), out);
  if (tools_) Content(tools_->Finish(), out);
  return out;
}

ChatOutput ParseChatOutput(ChatFormat f, std::string_view text, bool parse_tools, const nlohmann::ordered_json& tools,
                           bool in_reasoning, std::function<std::string()> make_id) {
  ChatOutputParser parser(f, parse_tools, tools, in_reasoning, std::move(make_id));
  ChatOutput r;
  auto take = [&r](std::vector<ToolStreamEvent> evs) {
    for (ToolStreamEvent& e : evs) {
      if (e.is_call)
        r.calls.push_back(std::move(e.call));
      else
        (e.is_reasoning ? r.reasoning : r.content) += e.content;
    }
  };
  take(parser.Push(text));
  take(parser.Finish());
  return r;
}

}  // namespace tessera

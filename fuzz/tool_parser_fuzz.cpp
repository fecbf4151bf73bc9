// tessera fuzz: the model-output parsers on arbitrary model output: the tool-call parser
// (src/server/tool_parser.h), Qwen/Hermes JSON and Qwen3-Coder XML forms, and Gemma 4's chained
// thinking split and tool-call parser (chat_format.h's ChatOutputParser, gemma4_tool_parser.h). The
// model's text is not under our control (a small model writes broken calls all the time), and the
// parser runs on the session's strand: it must not throw at all, so nothing is caught here.
//
// Besides memory errors it checks what the headers promise: the events do not depend on how the
// text was split into pieces (tokens), and every call's arguments are a JSON object.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/chat_format.h"
#include "server/tool_parser.h"

namespace {

using ojson = nlohmann::ordered_json;

// The request's tools: one function per XML parameter type the parser converts.
const ojson& Tools() {
  static const ojson t = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "lat": {"type": "number"},
                     "metric": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}},
                     "opts": {"type": "object"}, "any": {}}}}},
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"x": {"type": ["integer", "null"]}, "s": {"anyOf": [{"type": "string"}, {"type": "number"}]}}}}}
  ])");
  return t;
}

// `gemma4`: Gemma 4's output parser (thinking split, then calls; a prompt that opened the channel
// when `in_reasoning`); else Qwen's. Reasoning text is kept apart from the content.
tessera::ToolParseResult Run(std::string_view text, size_t piece, const ojson& tools, bool gemma4, bool in_reasoning,
                             std::string* reasoning) {
  int n = 0;
  auto make_id = [&n] { return "call_" + std::to_string(n++); };
  std::unique_ptr<tessera::ToolStreamParser> owned;
  if (gemma4)
    owned =
        std::make_unique<tessera::ChatOutputParser>(tessera::ChatFormat::kGemma4, true, tools, in_reasoning, make_id);
  else
    owned = std::make_unique<tessera::ToolCallParser>(tools, make_id);
  tessera::ToolStreamParser& p = *owned;
  tessera::ToolParseResult r;
  auto take = [&r, reasoning](const std::vector<tessera::ToolStreamEvent>& evs) {
    for (const auto& ev : evs) {
      if (ev.is_call)
        r.calls.push_back(ev.call);
      else if (ev.is_reasoning)
        *reasoning += ev.content;
      else
        r.content += ev.content;
    }
  };
  for (size_t at = 0; at < text.size(); at += piece) take(p.Push(text.substr(at, piece)));
  take(p.Finish());
  if (p.num_calls() != static_cast<int>(r.calls.size())) abort();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // First byte: the piece length of the split run (1..32 bytes), whether the request had tools
  // (Qwen) or the prompt opened the thinking channel (Gemma 4), and the format (bit 7).
  const size_t piece = 1 + (data[0] & 31);
  const bool gemma4 = (data[0] & 128) != 0;
  const bool bit6 = (data[0] & 64) != 0;
  const ojson& tools = (bit6 && !gemma4) ? ojson() : Tools();
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  std::string whole_reasoning, split_reasoning;
  tessera::ToolParseResult whole = Run(text, text.size() + 1, tools, gemma4, bit6, &whole_reasoning);
  tessera::ToolParseResult split = Run(text, piece, tools, gemma4, bit6, &split_reasoning);
  if (whole.content != split.content || whole.calls.size() != split.calls.size()) abort();
  if (whole_reasoning != split_reasoning) abort();
  if (!gemma4 && !whole_reasoning.empty()) abort();  // Qwen's formats have no thinking split
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    const tessera::ToolCall& a = whole.calls[i];
    if (a.name != split.calls[i].name || a.arguments != split.calls[i].arguments) abort();
    // The OpenAI field is a JSON object as text: clients json.loads it.
    ojson args = ojson::parse(a.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) abort();
  }
  // The one-shot form is the incremental parser fed once (tool_parser.h, chat_format.h): same answer.
  int n = 0;
  auto make_id = [&n] { return "call_" + std::to_string(n++); };
  if (gemma4) {
    tessera::ChatOutput once = tessera::ParseChatOutput(tessera::ChatFormat::kGemma4, text, true, tools, bit6, make_id);
    if (once.content != whole.content || once.reasoning != whole_reasoning || once.calls.size() != whole.calls.size())
      abort();
  } else {
    tessera::ToolParseResult once = tessera::ParseToolCalls(text, tools, make_id);
    if (once.content != whole.content || once.calls.size() != whole.calls.size()) abort();
  }
  return 0;
}

// tessera fuzz: the tool-call output parser (src/server/tool_parser.h), Qwen/Hermes JSON and
// Qwen3-Coder XML forms, on arbitrary model output. The model's text is not under our control
// (a small model writes broken calls all the time), and the parser runs on the session's strand:
// it must not throw at all, so nothing is caught here.
//
// Besides memory errors it checks what tool_parser.h promises: the events do not depend on how
// the text was split into pieces (tokens), and every call's arguments are a JSON object.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

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

tessera::ToolParseResult Run(std::string_view text, size_t piece, const ojson& tools) {
  int n = 0;
  tessera::ToolCallParser p(tools, [&n] { return "call_" + std::to_string(n++); });
  tessera::ToolParseResult r;
  auto take = [&r](const std::vector<tessera::ToolStreamEvent>& evs) {
    for (const auto& ev : evs) {
      if (ev.is_call)
        r.calls.push_back(ev.call);
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
  // First byte: the piece length of the split run (1..64 bytes) and whether the request had tools.
  const size_t piece = 1 + (data[0] & 63);
  const ojson& tools = (data[0] & 64) ? ojson() : Tools();
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  tessera::ToolParseResult whole = Run(text, text.size() + 1, tools);
  tessera::ToolParseResult split = Run(text, piece, tools);
  if (whole.content != split.content || whole.calls.size() != split.calls.size()) abort();
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    const tessera::ToolCall& a = whole.calls[i];
    if (a.name != split.calls[i].name || a.arguments != split.calls[i].arguments) abort();
    // The OpenAI field is a JSON object as text: clients json.loads it.
    ojson args = ojson::parse(a.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) abort();
  }
  // The one-shot form is the incremental parser fed once (tool_parser.h): same answer.
  int n = 0;
  tessera::ToolParseResult once = tessera::ParseToolCalls(text, tools, [&n] { return "call_" + std::to_string(n++); });
  if (once.content != whole.content || once.calls.size() != whole.calls.size()) abort();
  return 0;
}

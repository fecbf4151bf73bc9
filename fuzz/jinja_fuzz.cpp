// tessera fuzz: the Jinja engine (src/tokenizer/template): template text and a JSON context split
// from one input at the first NUL byte, parsed then rendered. Chat templates come with the model,
// but the context is the client's (messages, tools, chat_template_kwargs), and a model directory
// is a file anyone can hand the server: parsing and rendering must end in text or tessera::Error,
// which is what both the jinja::Template contract and ChatTemplate's callers promise.
//
// The render limits are lowered from the defaults (64 MiB of output, 10M loop iterations) so that a
// runaway loop ends in the limit's Error within libFuzzer's timeout; the code paths are the same.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"
#include "server/openai_protocol.h"  // JsonNestingExceeds: the server refuses deeper request JSON first
#include "tokenizer/template/jinja.h"

namespace {

using ojson = nlohmann::ordered_json;

// The context when the input has none (or no valid JSON object): what a chat request gives.
const ojson& DefaultContext() {
  static const ojson c = ojson::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "What is the weather in Paris?"},
                 {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
                   {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
                 {"role": "tool", "content": "{\"temp\": 21}"},
                 {"role": "user", "content": [{"type": "text", "text": "thanks"}]}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>"})");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  std::string source(in.substr(0, nul));
  ojson context = DefaultContext();
  if (nul != std::string_view::npos && !tessera::JsonNestingExceeds(in.substr(nul + 1), tessera::kMaxJsonDepth)) {
    ojson c = ojson::parse(in.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (c.is_object()) context = std::move(c);
  }
  tessera::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 100'000;
  try {
    tessera::jinja::Template t(source, limits);
    (void)t.Render(context);
  } catch (const tessera::Error&) {
    // syntax errors, undefined operations, raise_exception(), the limits: the template's Error
  }
  return 0;
}

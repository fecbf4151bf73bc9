// tessera fuzz: the OpenAI request decoder (src/server/request_json.cpp, openai_protocol.cpp,
// structured_request.cpp): a client's body -> JSON -> ParsedRequest for /v1/chat/completions or
// /v1/completions, tools, tool_choice, response_format / structured_outputs included, as
// Session::PrepareGeneration runs it before the template.
//
// What counts as a finding: the decoder must refuse a bad body with ApiError (a 4xx naming the
// parameter) or Error(kInvalidArgument), which Session::SendFailure turns into a 400. Anything
// else it throws (a tessera::Error of another kind, an nlohmann type_error, std::out_of_range...)
// reaches the client as a 500 "internal error" for the client's own mistake: here it escapes and
// libFuzzer reports it, along with crashes and sanitizer reports.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "server/openai_protocol.h"

namespace {

using tessera::ApiError;
using tessera::DiffusionParams;
using tessera::EngineModelInfo;
using tessera::ErrorKind;
using tessera::ParsedRequest;

EngineModelInfo MakeInfo(bool diffusion) {
  EngineModelInfo info;
  info.name = "fuzz-model";
  info.max_model_len = 4096;
  info.vocab_size = 1000;
  info.diffusion = diffusion;
  if (diffusion) {
    info.default_diffusion.block_size = 4;
    info.default_diffusion.steps = 4;
    info.default_diffusion.mask_token_id = 999;
  }
  return info;
}

void Decode(std::string_view body_text, bool chat, bool diffusion, bool xml_tools) {
  static const EngineModelInfo ar = MakeInfo(false), dm = MakeInfo(true);
  const EngineModelInfo& info = diffusion ? dm : ar;
  tessera::ojson body = tessera::ParseRequestJson(body_text);
  ParsedRequest req = chat ? tessera::ParseChatRequest(body, info, info.default_diffusion)
                           : tessera::ParseCompletionRequest(body, info, info.default_diffusion);
  // What the session does next with the parsed request, short of the template and the engine.
  (void)tessera::ForcedToolCallPrefix(req, xml_tools);
  const int64_t prompt_tokens = req.prompt_is_ids ? static_cast<int64_t>(req.prompt_ids.size()) : 17;
  tessera::CheckPromptLength(req, prompt_tokens, info.max_model_len);
  if (req.n < 1 || req.n > tessera::kMaxChoicesPerRequest) abort();  // the decoder bounds n
  if (req.sampling.max_tokens < 0) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // First byte: bit 0 chat / completions, bit 1 a diffusion model, bit 2 XML tool calls (Qwen3-Coder).
  const bool chat = (data[0] & 1) == 0, diffusion = (data[0] & 2) != 0, xml = (data[0] & 4) != 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    Decode(body, chat, diffusion, xml);
  } catch (const ApiError& e) {
    if (e.status >= 500) abort();  // a client's body never earns a 5xx
  } catch (const tessera::Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument) throw;  // SendFailure: 500
  }
  return 0;
}

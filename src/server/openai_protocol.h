// tessera server: the OpenAI wire protocol: request validation (chat completions and legacy
// completions, plus the `diffusion` extension; openai_protocol.cpp), OpenAI's error shape, and the
// JSON of responses, stream chunks and usage (openai_response.cpp). No I/O here: http_server.cpp
// moves these objects over sockets.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_api.h"
#include "engine/request.h"
#include "grammar/grammar_compiler.h"
#include "server/chat_format.h"
#include "server/tool_parser.h"

namespace tessera {

using ojson = nlohmann::ordered_json;

// An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string message, std::string param = "", std::string code = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        message(std::move(message)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, message, param, code;  // param / code "" -> null
  double retry_after_s = 0;                // 429: Retry-After header
  std::string allow;                       // 405: Allow header (the methods the route takes)
};
ApiError InvalidRequest(const std::string& message, const std::string& param = "",
                        const std::string& code = "");
std::string ErrorJson(const ApiError& e);

// Request JSON nests at most this deep. Copying, comparing, dumping a JSON value and turning it
// into chat-template values all recurse once a level: a few hundred KB of '[' would otherwise
// overflow an I/O thread's stack and end the process. Real requests (tool schemas included) stay
// far below.
constexpr int kMaxJsonDepth = 128;
// Whether `text` opens more than max_depth arrays / objects at once (brackets inside strings do
// not count). Linear, no recursion; meant to run before the parser.
bool JsonNestingExceeds(std::string_view text, int max_depth);
// A request body as JSON (request_json.cpp); ApiError 400 when nested deeper than kMaxJsonDepth
// or invalid (the message says where and why: bad UTF-8, lone surrogate, syntax, a number beyond a
// double's range with its field path as the param).
ojson ParseRequestJson(std::string_view text);
const char* HttpReasonPhrase(int status);

// tool_choice: kAuto parses <tool_call> blocks out of the output (with strict tools, each call the
// model opens is constrained: StructuredConstraint::lazy). kNone neither gives the tools to
// the chat template nor parses (vLLM's behaviour with --exclude-tools-when-tool-choice-none; the
// model cannot call what it was not shown). kRequired / kNamed: the reply is opened with the call
// (ForcedToolCallPrefix); when the tools concerned are `strict`, what follows is constrained to the
// call's JSON (StructuredConstraint::tool_call), otherwise it is parsed as usual.
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// Most choices (`n`) one request may ask for.
constexpr int64_t kMaxChoicesPerRequest = 16;

// Structured output (docs/STRUCTURED_OUTPUT.md): what a request constrains its output to, compiled
// on the prompt threads (EngineApi::CompileGrammar); compile errors are 400s naming `param`.
struct StructuredConstraint {
  grammar::GrammarFormat format = grammar::GrammarFormat::kJson;
  std::string text;   // the schema / regex / grammar text; for kChoice a JSON array of strings
  std::string param;  // "response_format", "structured_outputs", "tools[i].function.parameters"
  // A call of strict tools: the constraint is the call's {"name", "arguments"} object. Forced
  // (required / named): the server closes the call (</tool_call>) once the model completed it.
  bool tool_call = false;
  // tool_choice auto: the calls are optional; each call the model opens is constrained (the
  // engine's GrammarTrigger, filled from the tokenizer at prompt building) and closed by the engine.
  bool lazy = false;
  std::string strict_param;  // lazy: "tools[i].function.strict" of the first strict tool (refusals)
};

struct ParsedRequest {
  bool chat = true;
  std::string model;
  // chat
  ojson messages = ojson::array();  // normalized: content a string (text parts joined), tool-call
                                    // arguments objects (as chat templates expect)
  ojson tools;                      // null when none
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed
  ojson chat_template_kwargs = ojson::object();
  // completions
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // both
  bool stream = false, include_usage = false;
  bool continuous_usage = false;            // stream_options.continuous_usage_stats: usage in every chunk
  int64_t n = 1;                            // choices
  bool echo = false;                        // completions: the prompt's text opens each choice's text
  bool parallel_tool_calls = true;          // false: a choice keeps its first tool call only
  std::optional<float> router_temperature;  // MoE models; unset: the engine's default
  SamplingParams sampling;
  bool max_tokens_given = false;
  bool logprobs = false;  // chat: logprobs=true; completions: logprobs=N given
  std::optional<DiffusionParams> diffusion;
  std::optional<CanvasSamplerParams> canvas;  // canvas-diffusion models: the `diffusion` object's knobs
  bool stream_steps = false;
  std::optional<StructuredConstraint> constraint;  // response_format / structured_outputs / strict tools
  std::string user;
  int priority = 0;  // the engine's queue order under --scheduling-policy priority (lower first)

  // Whether the generated text goes through the tool-call parser / the template gets the tools.
  bool ParseTools() const { return chat && !tools.is_null() && tool_choice != ToolChoice::kNone; }
};

// tool_choice "required" or a named function: the reply is opened for the model with the start of
// a call (and the function's name), appended to the prompt and fed to the tool-call parser first,
// so that the model can only continue inside a call, in the model's own call syntax (Gemma 4:
// "<|tool_call>call:" and the name with its "{"). "" for auto / none.
std::string ForcedToolCallPrefix(const ParsedRequest& req, ChatFormat format);
inline std::string ForcedToolCallPrefix(const ParsedRequest& req, bool xml_tool_calls) {
  return ForcedToolCallPrefix(req, xml_tool_calls ? ChatFormat::kQwen3Coder : ChatFormat::kHermes);
}

// Structured output (structured_request.cpp): response_format / structured_outputs into
// req.constraint; then, once tools and tool_choice are parsed, the calls of strict tools (forced,
// or under tool_choice auto the calls the model chooses to make).
void ParseStructuredOutput(const ojson& body, ParsedRequest& req);
void ParseStrictToolCall(ParsedRequest& req);

// Throw ApiError (400 naming the param; 404 model_not_found for another model name).
ParsedRequest ParseChatRequest(const ojson& body, const EngineModelInfo& model,
                               const DiffusionParams& diffusion_defaults);
ParsedRequest ParseCompletionRequest(const ojson& body, const EngineModelInfo& model,
                                     const DiffusionParams& diffusion_defaults);
// Once the prompt is tokenized: 400 when it does not fit; sets max_tokens when not given.
void CheckPromptLength(ParsedRequest& req, int64_t prompt_tokens, int64_t max_model_len);

// ---- responses ----
std::string NewResponseId(const char* prefix);  // "chatcmpl-" / "cmpl-" + 24 hex digits
int64_t UnixNow();
const char* FinishReasonText(FinishReason r, bool tool_calls);  // "stop" "length" "tool_calls"
ojson UsageJson(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);
// token id -> its text (for logprobs)
using TokenTextFn = std::function<std::string(int32_t)>;
ojson ChatLogprobsJson(const std::vector<TokenLogprob>& lps, const TokenTextFn& text);
ojson CompletionLogprobsJson(const std::vector<TokenLogprob>& lps, const TokenTextFn& text,
                             int64_t text_offset);

struct ResponseHeader {
  std::string id, model;
  int64_t created = 0;
};
// One choice of a whole (non-streamed) response.
struct ChatChoice {
  int64_t index = 0;
  std::string content;
  std::vector<ToolCall> calls;
  const char* finish_reason = nullptr;
  ojson logprobs;         // null when not asked for
  std::string reasoning;  // the model's thinking (message.reasoning_content, left out when empty)
};
struct CompletionChoice {
  int64_t index = 0;
  std::string text;
  const char* finish_reason = nullptr;
  ojson logprobs;
};
ojson ChatCompletionJson(const ResponseHeader& h, const std::vector<ChatChoice>& choices, const ojson& usage);
ojson CompletionJson(const ResponseHeader& h, const std::vector<CompletionChoice>& choices, const ojson& usage);
// One chunk of choice `index`. delta: {"role": ...}/{"content": ...}/{"tool_calls": [...]};
// finish_reason nullptr -> null. usage: nullopt leaves the field out; null (include_usage) or the
// usage so far (continuous_usage_stats) is sent as given.
ojson ChatChunkJson(const ResponseHeader& h, int64_t index, const ojson& delta, const char* finish_reason,
                    const ojson& logprobs, const std::optional<ojson>& usage);
ojson CompletionChunkJson(const ResponseHeader& h, int64_t index, const std::string& text, const char* finish_reason,
                          const ojson& logprobs, const std::optional<ojson>& usage);
// The final include_usage chunk: choices [] and usage.
ojson UsageChunkJson(const ResponseHeader& h, bool chat, const ojson& usage);
// The `event: diffusion_step` payload; with `text`, also "block_text": each cell's text, null where
// still masked.
ojson DiffusionStepJson(const DiffusionStepView& s, int32_t mask_token_id = -1, const TokenTextFn& text = nullptr);
ojson ModelsJson(const EngineModelInfo& model, int64_t created);

// "data: <json>\n\n"; events other than the default get "event: <name>\n" first.
std::string SseData(const ojson& j, const char* event = nullptr);
constexpr const char* kSseDone = "data: [DONE]\n\n";
// JSON text of j; invalid UTF-8 from a model becomes U+FFFD instead of throwing.
std::string DumpJson(const ojson& j);

}  // namespace tessera

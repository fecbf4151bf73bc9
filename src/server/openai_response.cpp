// tessera server: the JSON the OpenAI protocol answers with: response ids, finish reasons, usage,
// log-probabilities, whole responses and stream chunks (one entry per choice, each with its
// `index`), diffusion step events and the model list. Declared in openai_protocol.h.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

#include "engine/diffusion_defaults.h"
#include "server/openai_protocol.h"

namespace tessera {

std::string NewResponseId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* FinishReasonText(FinishReason r, bool tool_calls) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return tool_calls ? "tool_calls" : "stop";
    case FinishReason::kCancelled:
      return "abort";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return tool_calls ? "tool_calls" : "stop";
}

ojson UsageJson(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  ojson u = ojson::object();
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

namespace {
ojson Bytes(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

ojson ChatLogprobsJson(const std::vector<TokenLogprob>& lps, const TokenTextFn& text) {
  ojson content = ojson::array();
  for (const auto& lp : lps) {
    std::string t = text(lp.token);
    ojson e = {{"token", t}, {"logprob", lp.logprob}, {"bytes", Bytes(t)}};
    ojson top = ojson::array();
    for (const auto& [id, l] : lp.top) {
      std::string tt = text(id);
      top.push_back({{"token", tt}, {"logprob", l}, {"bytes", Bytes(tt)}});
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return ojson{{"content", content}, {"refusal", nullptr}};  // refusal: as OpenAI sends it (never ours)
}

ojson CompletionLogprobsJson(const std::vector<TokenLogprob>& lps, const TokenTextFn& text, int64_t text_offset) {
  ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const auto& lp : lps) {
    std::string t = text(lp.token);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    ojson top = ojson::object();
    for (const auto& [id, l] : lp.top) top[text(id)] = l;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(t.size());
  }
  return ojson{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

namespace {
ojson Header(const ResponseHeader& h, const char* object) {
  ojson j = ojson::object();
  j["id"] = h.id;
  j["object"] = object;
  j["created"] = h.created;
  j["model"] = h.model;
  return j;
}
ojson Reason(const char* r) { return r == nullptr ? ojson(nullptr) : ojson(r); }
void PutUsage(ojson& j, const std::optional<ojson>& usage) {
  if (usage) j["usage"] = *usage;
}
}  // namespace

ojson ChatCompletionJson(const ResponseHeader& h, const std::vector<ChatChoice>& choices, const ojson& usage) {
  ojson j = Header(h, "chat.completion");
  ojson list = ojson::array();
  for (const ChatChoice& c : choices) {
    ojson msg = ojson::object();
    msg["role"] = "assistant";
    msg["content"] = c.content.empty() && !c.calls.empty() ? ojson(nullptr) : ojson(c.content);
    msg["refusal"] = nullptr;
    if (!c.reasoning.empty()) msg["reasoning_content"] = c.reasoning;
    if (!c.calls.empty()) {
      ojson tc = ojson::array();
      for (const auto& call : c.calls)
        tc.push_back({{"id", call.id},
                      {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      msg["tool_calls"] = std::move(tc);
    }
    ojson choice = ojson::object();
    choice["index"] = c.index;
    choice["message"] = std::move(msg);
    choice["logprobs"] = c.logprobs;
    choice["finish_reason"] = Reason(c.finish_reason);
    list.push_back(std::move(choice));
  }
  j["choices"] = std::move(list);
  j["usage"] = usage;
  return j;
}

ojson ChatChunkJson(const ResponseHeader& h, int64_t index, const ojson& delta, const char* finish_reason,
                    const ojson& logprobs, const std::optional<ojson>& usage) {
  ojson j = Header(h, "chat.completion.chunk");
  ojson choice = ojson::object();
  choice["index"] = index;
  choice["delta"] = delta;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = Reason(finish_reason);
  j["choices"] = ojson::array({choice});
  PutUsage(j, usage);
  return j;
}

ojson CompletionJson(const ResponseHeader& h, const std::vector<CompletionChoice>& choices, const ojson& usage) {
  ojson j = Header(h, "text_completion");
  ojson list = ojson::array();
  for (const CompletionChoice& c : choices)
    list.push_back(
        {{"index", c.index}, {"text", c.text}, {"logprobs", c.logprobs}, {"finish_reason", Reason(c.finish_reason)}});
  j["choices"] = std::move(list);
  j["usage"] = usage;
  return j;
}

ojson CompletionChunkJson(const ResponseHeader& h, int64_t index, const std::string& text, const char* finish_reason,
                          const ojson& logprobs, const std::optional<ojson>& usage) {
  ojson j = Header(h, "text_completion");
  ojson choice = {{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", Reason(finish_reason)}};
  j["choices"] = ojson::array({choice});
  PutUsage(j, usage);
  return j;
}

ojson UsageChunkJson(const ResponseHeader& h, bool chat, const ojson& usage) {
  ojson j = Header(h, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ojson::array();
  j["usage"] = usage;
  return j;
}

ojson DiffusionStepJson(const DiffusionStepView& s, int32_t mask_token_id, const TokenTextFn& text) {
  ojson j = {{"block_start", s.block_start},
             {"step", s.step},
             {"block_tokens", s.block_tokens},
             {"unmasked", s.unmasked},
             {"conf", s.conf}};
  if (text) {  // each cell's text (null while masked), so viewers need no tokenizer
    ojson cells = ojson::array();
    for (int32_t t : s.block_tokens) cells.push_back(t == mask_token_id ? ojson(nullptr) : ojson(text(t)));
    j["block_text"] = std::move(cells);
  }
  return j;
}

ojson ModelsJson(const EngineModelInfo& model, int64_t created) {
  ojson m = {{"id", model.name},
             {"object", "model"},
             {"created", created},
             {"owned_by", "tessera"},
             {"max_model_len", model.max_model_len}};
  // Extension: the weights' format (quantization as published or at load), as vLLM's model card
  // names it; "bf16" for float checkpoints.
  if (!model.weight_format.empty()) m["quantization"] = model.weight_format;
  // Extension: how a block-diffusion model decodes by default (clients such as the chat page fill
  // their settings from it); absent for autoregressive models.
  if (model.diffusion) {
    const DiffusionParams& d = model.default_diffusion;
    m["diffusion"] = {{"block_size", d.block_size},
                      {"steps", d.steps},
                      {"policy", DiffusionPolicyName(d.policy)},
                      {"threshold", std::round(static_cast<double>(d.threshold) * 1e6) / 1e6},  // 0.9, not 0.89999997
                      {"mask_token_id", d.mask_token_id}};
  }
  // Extension: a canvas-diffusion model's sampler defaults (generation_config.json), which the
  // `diffusion` object of a request overrides field by field.
  if (model.canvas_length > 0) {
    const CanvasSamplerParams& c = model.canvas_defaults;
    m["canvas"] = {{"canvas_length", c.canvas_length},
                   {"max_denoising_steps", c.max_denoising_steps},
                   {"entropy_bound", c.entropy_bound},
                   {"t_min", c.t_min},
                   {"t_max", c.t_max},
                   {"stability_threshold", c.stability_threshold},
                   {"confidence_threshold", c.confidence_threshold}};
  }
  return ojson{{"object", "list"}, {"data", ojson::array({m})}};
}

std::string SseData(const ojson& j, const char* event) {
  std::string out;
  if (event != nullptr) out = fmt::format("event: {}\n", event);
  out += "data: " + DumpJson(j) + "\n\n";
  return out;
}

}  // namespace tessera

// tessera server: OpenAI request validation: every top-level field of a request is known (the table
// below says what each does), takes effect, or is refused with a 400 naming it. The response JSON
// is in openai_response.cpp.
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string_view>

#include "engine/diffusion_defaults.h"

namespace tessera {
namespace {

[[noreturn]] void Bad(const std::string& param, const std::string& message) {
  throw InvalidRequest(message, param);
}

const char* TypeName(const ojson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

// Field accessors: absent or null -> nullopt; wrong type -> 400 naming the param.
const ojson* Field(const ojson& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> GetBool(const ojson& body, const char* name) {
  const ojson* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) Bad(name, fmt::format("'{}' must be a boolean, got {}", name, TypeName(*v)));
  return v->get<bool>();
}

std::optional<double> GetNumber(const ojson& body, const char* name, double lo, double hi) {
  const ojson* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number() || v->is_boolean())
    Bad(name, fmt::format("'{}' must be a number, got {}", name, TypeName(*v)));
  double d = v->get<double>();
  if (!(d >= lo && d <= hi)) Bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, d));
  return d;
}

std::optional<int64_t> GetInt(const ojson& body, const char* name, int64_t lo, int64_t hi) {
  const ojson* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  int64_t i = 0;
  // Unsigned first: is_number_integer() is true for unsigned values too, and 2^64-1 read as int64
  // would pass for -1.
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi))
      Bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, u));
    i = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    i = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e18) {
    i = static_cast<int64_t>(v->get<double>());
  } else {
    Bad(name, fmt::format("'{}' must be an integer, got {}", name, TypeName(*v)));
  }
  if (i < lo || i > hi) Bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, i));
  return i;
}

std::optional<std::string> GetString(const ojson& body, const char* name) {
  const ojson* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) Bad(name, fmt::format("'{}' must be a string, got {}", name, TypeName(*v)));
  return v->get<std::string>();
}

// Whether obj is an object whose `key` is the string `want`. (obj.value(key, "") throws a
// type_error, a 500, when the client sent another type there.)
bool HasString(const ojson& obj, const char* key, const char* want) {
  if (!obj.is_object()) return false;
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && it->get<std::string>() == want;
}

// min_tokens beyond the completion's own limit could never be met (vLLM refuses it the same way).
void CheckMinTokens(const ParsedRequest& r) {
  if (r.max_tokens_given && r.sampling.min_tokens > r.sampling.max_tokens)
    Bad("min_tokens", fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", r.sampling.min_tokens,
                                  r.sampling.max_tokens));
}

void CheckModel(const ojson& body, ParsedRequest& r, const EngineModelInfo& model) {
  auto name = GetString(body, "model");
  r.model = model.name;
  if (name && *name != model.name)
    throw ApiError(404, "invalid_request_error",
                   fmt::format("The model '{}' does not exist (this server serves '{}')", *name, model.name),
                   "model", "model_not_found");
}

// The top-level fields each endpoint knows. A field outside its list is refused as OpenAI does
// ("Unrecognized request argument"), so that nothing a client asks for is silently ignored. Fields
// marked metadata are accepted and change nothing in the generation (README, Serving).
struct KnownField {
  const char* name;
  bool chat, completions;
};
constexpr KnownField kKnownFields[] = {
    // OpenAI, taking effect.
    {"model", true, true},
    {"messages", true, false},
    {"prompt", false, true},
    {"stream", true, true},
    {"stream_options", true, true},
    {"temperature", true, true},
    {"top_p", true, true},
    {"seed", true, true},
    {"presence_penalty", true, true},
    {"frequency_penalty", true, true},
    {"logit_bias", true, true},
    {"stop", true, true},
    {"n", true, true},
    {"max_tokens", true, true},
    {"max_completion_tokens", true, false},
    {"logprobs", true, true},
    {"top_logprobs", true, false},
    {"tools", true, false},
    {"tool_choice", true, false},
    {"parallel_tool_calls", true, false},
    {"response_format", true, true},  // text, json_object, json_schema (structured_request.cpp)
    {"echo", false, true},
    {"suffix", false, true},      // refused unless empty
    {"best_of", false, true},     // refused unless 1 (with n = 1)
    {"modalities", true, false},  // ["text"] only
    // OpenAI, metadata without effect on the output.
    {"user", true, true},
    {"metadata", true, false},
    {"store", true, false},
    {"safety_identifier", true, false},
    {"prompt_cache_key", true, false},
    {"service_tier", true, false},  // "auto" / "default" only
    // Extensions (vLLM's names where vLLM has the field).
    {"top_k", true, true},
    {"min_p", true, true},
    {"min_tokens", true, true},
    {"repetition_penalty", true, true},
    {"ignore_eos", true, true},
    {"stop_token_ids", true, true},
    {"priority", true, true},
    {"chat_template_kwargs", true, false},
    {"diffusion", true, true},
    {"router_temperature", true, true},
    {"structured_outputs", true, true},  // vLLM's: json, regex, choice, grammar, json_object
};

// Known OpenAI fields tessera cannot honour: a 400 that says why rather than "unrecognized".
constexpr std::pair<const char*, const char*> kUnsupportedFields[] = {
    {"audio", "audio output is not supported"},
    {"prediction", "predicted outputs are not supported"},
    {"reasoning_effort",
     "'reasoning_effort' is not supported (Qwen3 templates take "
     "chat_template_kwargs.enable_thinking)"},
    {"verbosity", "'verbosity' is not supported"},
    {"web_search_options", "web search is not supported"},
    {"functions", "'functions' is deprecated and not supported: use 'tools'"},
    {"function_call", "'function_call' is deprecated and not supported: use 'tool_choice'"},
};

void CheckKnownFields(const ojson& body, bool chat) {
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    for (const KnownField& f : kKnownFields)
      if (key == f.name) known = chat ? f.chat : f.completions;
    if (known) continue;
    for (const auto& [name, why] : kUnsupportedFields)
      if (key == name && !value.is_null()) Bad(key, why);
    if (value.is_null()) continue;  // an explicit null is "not given", as everywhere else
    Bad(key, fmt::format("Unrecognized request argument supplied: {}", key));
  }
}

// OpenAI's logit_bias: {"token id": bias}, ids as decimal strings, biases in [-100, 100].
void ParseLogitBias(const ojson& body, SamplingParams& s, int64_t vocab) {
  const ojson* lb = Field(body, "logit_bias");
  if (lb == nullptr) return;
  if (!lb->is_object()) Bad("logit_bias", fmt::format("'logit_bias' must be an object, got {}", TypeName(*lb)));
  std::map<int32_t, float> bias;
  for (const auto& [key, value] : lb->items()) {
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) id = std::stoll(key);
    if (!digits || id >= vocab)
      Bad("logit_bias",
          fmt::format("'logit_bias' keys must be token ids in [0, {}), got {}", vocab, DumpJson(ojson(key))));
    if (!value.is_number() || value.is_boolean())
      Bad("logit_bias", fmt::format("'logit_bias' of token {} must be a number, got {}", id, TypeName(value)));
    const double v = value.get<double>();
    if (!(v >= -100 && v <= 100))
      Bad("logit_bias", fmt::format("'logit_bias' of token {} must be in [-100, 100], got {}", id, v));
    bias[static_cast<int32_t>(id)] = static_cast<float>(v);
  }
  s.logit_bias.assign(bias.begin(), bias.end());
}

// OpenAI fields that carry metadata only: checked for their type, then left alone.
void CheckMetadataFields(const ojson& body) {
  (void)GetString(body, "user");
  (void)GetString(body, "safety_identifier");
  (void)GetString(body, "prompt_cache_key");
  (void)GetBool(body, "store");
  if (const ojson* md = Field(body, "metadata")) {
    if (!md->is_object() || md->size() > 16)
      Bad("metadata", "'metadata' must be an object of at most 16 string values");
    for (const auto& [k, v] : md->items())
      if (!v.is_string() || k.size() > 64 || v.get_ref<const std::string&>().size() > 512)
        Bad("metadata", "'metadata' keys must be at most 64 characters and values strings of at most 512");
  }
  if (auto tier = GetString(body, "service_tier"); tier && *tier != "auto" && *tier != "default")
    Bad("service_tier",
        fmt::format("'service_tier' '{}' is not offered: this server has one tier (auto, default)", *tier));
  if (const ojson* m = Field(body, "modalities")) {
    if (!m->is_array()) Bad("modalities", "'modalities' must be an array");
    for (const auto& x : *m)
      if (!x.is_string() || x.get<std::string>() != "text") Bad("modalities", "only the 'text' modality is supported");
  }
}

// A 400 about a field of the `diffusion` object, re-thrown with the object's name in its param and
// message ('steps' -> 'diffusion.steps').
ApiError InDiffusion(const ApiError& e) {
  std::string message = e.message;
  if (!e.param.empty())
    if (size_t at = message.find("'" + e.param + "'"); at != std::string::npos) message.insert(at + 1, "diffusion.");
  return ApiError(400, "invalid_request_error", message, e.param.empty() ? "diffusion" : "diffusion." + e.param);
}

// The knobs of a canvas-diffusion model's sampler (DiffusionGemma: generation_config.json's, and the
// canvas length), each a field of the `diffusion` object.
constexpr const char* kCanvasFields[] = {"canvas_length",        "max_denoising_steps", "entropy_bound",
                                         "t_min",                "t_max",               "stability_threshold",
                                         "confidence_threshold"};
bool IsCanvasField(const std::string& k) {
  for (const char* f : kCanvasFields)
    if (k == f) return true;
  return false;
}

// The `diffusion` object of a canvas-diffusion model: the request's sampler knobs over the model's
// defaults, each in range (and t_min < t_max, as transformers requires), and `stream_steps` (each
// denoising step as a `diffusion_step` event: the canvas's argmax). The masked-diffusion fields do not
// apply to this family and are refused, each by name.
void ParseCanvasDiffusion(const ojson& d, ParsedRequest& r, const EngineModelInfo& model) {
  for (const auto& [k, v] : d.items()) {
    if (v.is_null()) continue;  // not sent
    if (k == "block_size" || k == "steps")
      Bad("diffusion." + k, fmt::format("'diffusion.{}' applies to masked block-diffusion models; this model's "
                                        "canvas sampler takes 'diffusion.{}'",
                                        k, k == "steps" ? "max_denoising_steps" : "canvas_length"));
    if (k == "policy" || k == "threshold")
      Bad("diffusion." + k, fmt::format("'diffusion.{}' applies to masked block-diffusion models, not to this "
                                        "model's canvas sampler",
                                        k));
    if (!IsCanvasField(k) && k != "stream_steps") Bad("diffusion." + k, fmt::format("unknown field 'diffusion.{}'", k));
  }
  CanvasSamplerParams& c = r.canvas.emplace(model.canvas_defaults);
  auto positive = [&](const char* name, double lo_excl, double hi) -> std::optional<double> {
    auto v = GetNumber(d, name, lo_excl, hi);
    if (v && !(*v > lo_excl)) Bad(name, fmt::format("'{}' must be in ({}, {}], got {}", name, lo_excl, hi, *v));
    return v;
  };
  try {
    if (auto v = GetInt(d, "canvas_length", 1, model.canvas_length)) c.canvas_length = *v;
    if (auto v = GetInt(d, "max_denoising_steps", 1, 4096)) c.max_denoising_steps = *v;
    if (auto v = positive("entropy_bound", 0.0, 1e6)) c.entropy_bound = *v;
    if (auto v = GetNumber(d, "t_min", 0.0, 100.0)) c.t_min = *v;
    if (auto v = positive("t_max", 0.0, 100.0)) c.t_max = *v;
    if (auto v = GetInt(d, "stability_threshold", 0, 4096)) c.stability_threshold = *v;
    if (auto v = positive("confidence_threshold", 0.0, 100.0)) c.confidence_threshold = *v;
    if (auto v = GetBool(d, "stream_steps")) r.stream_steps = *v;
    if (!(c.t_min < c.t_max))
      Bad(Field(d, "t_min") ? "t_min" : "t_max",
          fmt::format("'t_min' ({}) must be below 't_max' ({}): the steps anneal from t_max down to t_min", c.t_min,
                      c.t_max));
  } catch (const ApiError& e) {
    throw InDiffusion(e);
  }
}

// The `diffusion` object: a masked block-diffusion model's decoding settings, or a canvas-diffusion
// model's sampler knobs; refused for autoregressive models.
void ParseDiffusionObject(const ojson& body, ParsedRequest& r, const EngineModelInfo& model,
                          const DiffusionParams& ddef) {
  const ojson* d = Field(body, "diffusion");
  if (model.diffusion) r.diffusion = ddef;
  if (d == nullptr) return;
  if (!d->is_object()) Bad("diffusion", fmt::format("'diffusion' must be an object, got {}", TypeName(*d)));
  if (model.canvas_length > 0) return ParseCanvasDiffusion(*d, r, model);
  if (!model.diffusion) Bad("diffusion", "'diffusion' is only accepted by diffusion models");
  for (const auto& [k, v] : d->items()) {
    if (IsCanvasField(k) && !v.is_null())
      Bad("diffusion." + k, fmt::format("'diffusion.{}' applies to canvas-diffusion models (DiffusionGemma) only", k));
    if (k != "block_size" && k != "steps" && k != "policy" && k != "threshold" && k != "stream_steps")
      Bad("diffusion." + k, fmt::format("unknown field 'diffusion.{}'", k));
  }
  DiffusionParams& dp = *r.diffusion;
  try {
    if (auto v = GetInt(*d, "block_size", 1, 4096)) dp.block_size = *v;
    if (auto v = GetInt(*d, "steps", 1, 4096)) dp.steps = *v;
    if (auto v = GetNumber(*d, "threshold", 0.0, 1.0)) {
      if (*v <= 0) Bad("threshold", "'threshold' must be in (0, 1]");
      dp.threshold = static_cast<float>(*v);
    }
    if (auto v = GetString(*d, "policy")) {
      if (*v == "static")
        dp.policy = DiffusionPolicy::kStatic;
      else if (*v == "threshold")
        dp.policy = DiffusionPolicy::kThreshold;
      else if (*v == "editing")
        dp.policy = DiffusionPolicy::kEditing;
      else
        Bad("policy", fmt::format("'policy' must be static, threshold or editing, got '{}'", *v));
    }
    if (auto v = GetBool(*d, "stream_steps")) r.stream_steps = *v;
  } catch (const ApiError& e) {
    throw InDiffusion(e);
  }
  // The engine refuses a block longer than the context too, but only once it takes the request:
  // for a stream that is after the 200.
  if (model.max_model_len > 0 && dp.block_size > model.max_model_len)
    Bad("diffusion.block_size", fmt::format("'diffusion.block_size' ({}) must not exceed the model's context ({})",
                                            dp.block_size, model.max_model_len));
  if (dp.block_size > 0 && dp.steps > dp.block_size)
    Bad("diffusion.steps", fmt::format("'diffusion.steps' ({}) must not exceed 'diffusion.block_size' ({})",
                                       dp.steps, dp.block_size));
}

// Fields shared by both endpoints: sampling, stop, stream, n, user, diffusion.
void ParseCommon(const ojson& body, ParsedRequest& r, const EngineModelInfo& model,
                 const DiffusionParams& ddef) {
  SamplingParams& s = r.sampling;
  if (model.sampling_defaults.temperature) s.temperature = *model.sampling_defaults.temperature;
  if (model.sampling_defaults.top_p) s.top_p = *model.sampling_defaults.top_p;
  if (model.sampling_defaults.top_k) s.top_k = *model.sampling_defaults.top_k;
  if (auto v = GetBool(body, "stream")) r.stream = *v;
  if (const ojson* so = Field(body, "stream_options")) {
    if (!so->is_object()) Bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) Bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    for (const auto& [k, v] : so->items())
      if (k != "include_usage" && k != "continuous_usage_stats")
        Bad("stream_options", fmt::format("unknown field 'stream_options.{}'", k));
    for (const char* key : {"include_usage", "continuous_usage_stats"})
      if (const ojson* f = Field(*so, key)) {
        if (!f->is_boolean())
          Bad(fmt::format("stream_options.{}", key),
              fmt::format("'stream_options.{}' must be a boolean, got {}", key, TypeName(*f)));
        (std::string_view(key) == "include_usage" ? r.include_usage : r.continuous_usage) = f->get<bool>();
      }
    // The running usage rides on the usage field include_usage adds (vLLM's rule): alone it would
    // do nothing.
    if (r.continuous_usage && !r.include_usage)
      Bad("stream_options.continuous_usage_stats", "'stream_options.continuous_usage_stats' requires 'include_usage'");
  }
  if (auto v = GetNumber(body, "temperature", 0.0, 2.0)) s.temperature = static_cast<float>(*v);
  if (auto v = GetNumber(body, "top_p", 0.0, 1.0)) {
    if (*v <= 0) Bad("top_p", "'top_p' must be in (0, 1]");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = GetInt(body, "top_k", -1, 1 << 30)) s.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  if (auto v = GetNumber(body, "min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  if (auto v = GetInt(body, "seed", INT64_MIN, INT64_MAX)) s.seed = static_cast<uint64_t>(*v);
  if (auto v = GetNumber(body, "presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = GetNumber(body, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = GetNumber(body, "repetition_penalty", 0.0, 100.0)) {
    if (*v <= 0) Bad("repetition_penalty", "'repetition_penalty' must be > 0");
    s.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = GetBool(body, "ignore_eos")) s.ignore_eos = *v;
  if (auto v = GetInt(body, "min_tokens", 0, 1 << 30)) s.min_tokens = *v;
  if (auto v = GetInt(body, "priority", INT32_MIN, INT32_MAX)) r.priority = static_cast<int>(*v);
  if (const ojson* st = Field(body, "stop")) {
    if (st->is_string()) {
      if (!st->get<std::string>().empty()) s.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      if (st->size() > 16) Bad("stop", "'stop' may hold at most 16 strings");
      for (const auto& x : *st) {
        if (!x.is_string()) Bad("stop", "'stop' must be a string or a list of strings");
        if (!x.get<std::string>().empty()) s.stop.push_back(x.get<std::string>());
      }
    } else {
      Bad("stop", fmt::format("'stop' must be a string or a list of strings, got {}", TypeName(*st)));
    }
  }
  if (auto n = GetInt(body, "n", INT64_MIN, INT64_MAX)) {
    if (*n < 1 || *n > kMaxChoicesPerRequest)
      Bad("n", fmt::format("'n' must be in [1, {}], got {}", kMaxChoicesPerRequest, *n));
    r.n = *n;
  }
  if (const ojson* ids = Field(body, "stop_token_ids")) {
    if (!ids->is_array() || ids->size() > 64) Bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    for (const auto& x : *ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= model.vocab_size)
        Bad("stop_token_ids", fmt::format("'stop_token_ids' must hold token ids in [0, {})", model.vocab_size));
      s.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  ParseLogitBias(body, s, model.vocab_size);
  // The engine's range (kMinRouterTemperature, kMaxRouterTemperature), as doubles: 0.05f widened is
  // a hair above 0.05.
  static_assert(kMinRouterTemperature == 0.05f && kMaxRouterTemperature == 20.f);
  if (auto v = GetNumber(body, "router_temperature", 0.05, 20.0)) {
    if (model.num_experts <= 0) Bad("router_temperature", "'router_temperature' is only accepted by MoE models");
    r.router_temperature = static_cast<float>(*v);
  }
  if (auto v = GetString(body, "user")) r.user = *v;
  CheckMetadataFields(body);
  ParseStructuredOutput(body, r);

  ParseDiffusionObject(body, r, model, ddef);
}

std::string ContentText(const ojson& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    Bad(param, fmt::format("'{}' must be a string or an array of content parts", param));
  std::string out;
  bool first = true;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    std::string pp = fmt::format("{}[{}]", param, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      Bad(pp, fmt::format("'{}' must be an object with a 'type'", pp));
    std::string type = part["type"].get<std::string>();
    if (type != "text")
      Bad(pp + ".type", fmt::format("content part type '{}' is not supported (only 'text')", type));
    if (!part.contains("text") || !part["text"].is_string())
      Bad(pp + ".text", fmt::format("'{}.text' must be a string", pp));
    if (!first) out += "\n";
    out += part["text"].get<std::string>();
    first = false;
  }
  return out;
}

ojson NormalizeMessage(const ojson& m, size_t i) {
  std::string p = fmt::format("messages[{}]", i);
  if (!m.is_object()) Bad(p, fmt::format("'{}' must be an object", p));
  if (!m.contains("role") || !m["role"].is_string())
    Bad(p + ".role", fmt::format("'{}.role' must be a string", p));
  std::string role = m["role"].get<std::string>();
  if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
    Bad(p + ".role",
        fmt::format("'{}.role' '{}' is not one of system, developer, user, assistant, tool", p, role));
  ojson out = ojson::object();
  out["role"] = role;
  bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
  auto c = m.find("content");
  if (c == m.end() || c->is_null()) {
    if (role != "assistant") Bad(p + ".content", fmt::format("'{}.content' is required", p));
    out["content"] = "";  // templates test `'x' in content`; null would make them fail (as vLLM)
  } else {
    out["content"] = ContentText(*c, p + ".content");
  }
  if (m.contains("name") && !m["name"].is_null()) {
    if (!m["name"].is_string()) Bad(p + ".name", fmt::format("'{}.name' must be a string", p));
    out["name"] = m["name"];
  }
  if (role == "assistant") {
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
      out["reasoning_content"] = m["reasoning_content"];
    if (has_calls) {
      const ojson& calls = m["tool_calls"];
      if (!calls.is_array()) Bad(p + ".tool_calls", fmt::format("'{}.tool_calls' must be an array", p));
      ojson norm = ojson::array();
      for (size_t j = 0; j < calls.size(); ++j) {
        std::string cp = fmt::format("{}.tool_calls[{}]", p, j);
        const ojson& tc = calls[j];
        if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
          Bad(cp + ".function", fmt::format("'{}.function' must be an object", cp));
        const ojson& fn = tc["function"];
        if (!fn.contains("name") || !fn["name"].is_string())
          Bad(cp + ".function.name", fmt::format("'{}.function.name' must be a string", cp));
        ojson args = ojson::object();
        if (fn.contains("arguments") && !fn["arguments"].is_null()) {
          if (fn["arguments"].is_object()) {
            args = fn["arguments"];
          } else if (fn["arguments"].is_string()) {
            // Templates iterate the arguments as a mapping; OpenAI sends them as JSON text.
            const std::string& text = fn["arguments"].get_ref<const std::string&>();
            if (JsonNestingExceeds(text, kMaxJsonDepth))
              Bad(cp + ".function.arguments",
                  fmt::format("'{}.function.arguments' is nested deeper than {} levels", cp, kMaxJsonDepth));
            args = ojson::parse(text, nullptr, false);
            if (args.is_discarded() || !args.is_object())
              Bad(cp + ".function.arguments",
                  fmt::format("'{}.function.arguments' is not a JSON object", cp));
          } else {
            Bad(cp + ".function.arguments", fmt::format("'{}.function.arguments' must be a string", cp));
          }
        }
        ojson t = ojson::object();
        t["id"] = tc.contains("id") && tc["id"].is_string() ? tc["id"] : ojson("");
        t["type"] = "function";
        t["function"] = {{"name", fn["name"]}, {"arguments", args}};
        norm.push_back(std::move(t));
      }
      out["tool_calls"] = std::move(norm);
    }
  } else if (has_calls) {
    Bad(p + ".tool_calls", fmt::format("'{}.tool_calls' is only allowed on assistant messages", p));
  }
  if (role == "tool") {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
      Bad(p + ".tool_call_id", fmt::format("'{}.tool_call_id' must be a string", p));
    out["tool_call_id"] = m["tool_call_id"];
  }
  return out;
}

// OpenAI's rule for a function name, ^[a-zA-Z0-9_-]{1,64}$ (answered 400 otherwise). The name goes
// into the prompt (the template's tool list, the forced opening "<function=NAME>"), so a name with
// '>', a newline or a quote must not get that far.
void CheckFunctionName(const std::string& name, const std::string& param) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name)  // ASCII only, whatever the locale
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-');
  if (!ok)
    Bad(param, fmt::format("'{}' must be 1 to 64 letters, digits, '_' or '-' (^[a-zA-Z0-9_-]{{1,64}}$), got {}",
                           param, name.size() > 64 ? fmt::format("{} bytes", name.size()) : DumpJson(ojson(name))));
}

void ParseTools(const ojson& body, ParsedRequest& r) {
  if (const ojson* tools = Field(body, "tools")) {
    if (!tools->is_array()) Bad("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      std::string p = fmt::format("tools[{}]", i);
      if (!HasString(t, "type", "function"))
        Bad(p + ".type", fmt::format("'{}.type' must be 'function'", p));
      if (!t.contains("function") || !t["function"].is_object())
        Bad(p + ".function", fmt::format("'{}.function' must be an object", p));
      const ojson& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        Bad(p + ".function.name", fmt::format("'{}.function.name' must be a non-empty string", p));
      CheckFunctionName(f["name"].get<std::string>(), p + ".function.name");
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        Bad(p + ".function.parameters", fmt::format("'{}.function.parameters' must be an object", p));
    }
    if (!tools->empty()) r.tools = *tools;
  }
  const ojson* tc = Field(body, "tool_choice");
  if (tc == nullptr) return;
  if (tc->is_string()) {
    std::string v = tc->get<std::string>();
    if (v == "auto")
      r.tool_choice = ToolChoice::kAuto;
    else if (v == "none")
      r.tool_choice = ToolChoice::kNone;
    else if (v == "required")
      r.tool_choice = ToolChoice::kRequired;
    else
      Bad("tool_choice", fmt::format("'tool_choice' must be auto, none, required or an object, got '{}'", v));
  } else if (tc->is_object()) {
    if (!HasString(*tc, "type", "function") || !tc->contains("function") || !(*tc)["function"].is_object() ||
        !(*tc)["function"].contains("name") || !(*tc)["function"]["name"].is_string())
      Bad("tool_choice",
          "'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    r.tool_choice = ToolChoice::kNamed;
    r.tool_choice_name = (*tc)["function"]["name"].get<std::string>();
    CheckFunctionName(r.tool_choice_name, "tool_choice.function.name");
  } else {
    Bad("tool_choice", fmt::format("'tool_choice' must be a string or an object, got {}", TypeName(*tc)));
  }
  if ((r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) && r.tools.is_null())
    Bad("tool_choice", "'tool_choice' requires 'tools'");
  if (r.tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_choice_name;
    if (!found)
      Bad("tool_choice",
          fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.tool_choice_name));
  }
}

}  // namespace

std::string ForcedToolCallPrefix(const ParsedRequest& req, ChatFormat format) {
  if (!req.ParseTools()) return "";
  const bool strict_forced = req.constraint && req.constraint->tool_call && !req.constraint->lazy;
  const bool forced_call = req.tool_choice == ToolChoice::kRequired || strict_forced;
  if (format == ChatFormat::kGemma4) {
    if (req.tool_choice == ToolChoice::kNamed) return "<|tool_call>call:" + req.tool_choice_name + "{";
    return forced_call ? "<|tool_call>call:" : "";
  }
  // A strict call is written whole under its grammar ({"name": ..., "arguments": ...}).
  if (forced_call) return "<tool_call>\n";
  if (req.tool_choice != ToolChoice::kNamed) return "";
  if (format == ChatFormat::kQwen3Coder) return "<tool_call>\n<function=" + req.tool_choice_name + ">\n";
  return "<tool_call>\n{\"name\": " + ojson(req.tool_choice_name).dump() + ", \"arguments\": ";
}

ApiError InvalidRequest(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, "invalid_request_error", message, param, code);
}

std::string DumpJson(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string ErrorJson(const ApiError& e) {
  ojson err = ojson::object();
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? ojson(nullptr) : ojson(e.param);
  err["code"] = e.code.empty() ? ojson(nullptr) : ojson(e.code);
  return DumpJson(ojson{{"error", err}});
}

const char* HttpReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

ParsedRequest ParseChatRequest(const ojson& body, const EngineModelInfo& model, const DiffusionParams& ddef) {
  if (!body.is_object()) Bad("", "the request body must be a JSON object");
  ParsedRequest r;
  r.chat = true;
  CheckModel(body, r, model);
  const ojson* msgs = Field(body, "messages");
  if (msgs == nullptr) Bad("messages", "'messages' is required");
  if (!msgs->is_array()) Bad("messages", fmt::format("'messages' must be an array, got {}", TypeName(*msgs)));
  if (msgs->empty()) Bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < msgs->size(); ++i) r.messages.push_back(NormalizeMessage((*msgs)[i], i));
  CheckKnownFields(body, true);
  ParseTools(body, r);
  if (auto v = GetBool(body, "parallel_tool_calls")) r.parallel_tool_calls = *v;
  ParseCommon(body, r, model, ddef);
  auto max_tokens = GetInt(body, "max_completion_tokens", 1, INT64_MAX);
  auto legacy = GetInt(body, "max_tokens", 1, INT64_MAX);
  if (!max_tokens) max_tokens = legacy;
  if (max_tokens) {
    r.sampling.max_tokens = *max_tokens;
    r.max_tokens_given = true;
  }
  CheckMinTokens(r);
  ParseStrictToolCall(r);
  if (auto lp = GetBool(body, "logprobs")) r.logprobs = *lp;
  if (auto top = GetInt(body, "top_logprobs", 0, 20)) {
    if (!r.logprobs) Bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    r.sampling.top_logprobs = static_cast<int>(*top);
  } else if (r.logprobs) {
    r.sampling.top_logprobs = 0;
  }
  // Diffusion: a token's log-probability is its confidence when it was unmasked; the other candidates
  // of that step are not kept.
  if (r.logprobs && model.diffusion && r.sampling.top_logprobs > 0)
    Bad("top_logprobs",
        "'top_logprobs' is not available for diffusion models (each token's own 'logprob', its "
        "confidence when it was unmasked, is): use top_logprobs 0");
  if (const ojson* kw = Field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) Bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = *kw;
  }
  return r;
}

ParsedRequest ParseCompletionRequest(const ojson& body, const EngineModelInfo& model,
                                     const DiffusionParams& ddef) {
  if (!body.is_object()) Bad("", "the request body must be a JSON object");
  ParsedRequest r;
  r.chat = false;
  CheckModel(body, r, model);
  const ojson* p = Field(body, "prompt");
  if (p == nullptr) Bad("prompt", "'prompt' is required");
  auto take_ids = [&](const ojson& arr) {
    for (const auto& x : arr) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= model.vocab_size)
        Bad("prompt", fmt::format("'prompt' token ids must be integers in [0, {})", model.vocab_size));
      r.prompt_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    r.prompt_is_ids = true;
  };
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    take_ids(*p);
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt_text = (*p)[0].get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) {
    take_ids((*p)[0]);
  } else if (p->is_array() && p->size() > 1) {
    Bad("prompt", "only one prompt per request is supported");
  } else {
    Bad("prompt", "'prompt' must be a string, a list of token ids, or a list with one of those");
  }
  if ((r.prompt_is_ids && r.prompt_ids.empty()) || (!r.prompt_is_ids && r.prompt_text.empty()))
    Bad("prompt", "'prompt' must not be empty");
  CheckKnownFields(body, false);
  ParseCommon(body, r, model, ddef);
  if (auto v = GetInt(body, "max_tokens", 1, INT64_MAX)) {
    r.sampling.max_tokens = *v;
    r.max_tokens_given = true;
  } else {
    r.sampling.max_tokens = 16;  // OpenAI's default for completions
    r.max_tokens_given = true;
  }
  CheckMinTokens(r);
  if (auto suffix = GetString(body, "suffix"); suffix && !suffix->empty())
    Bad("suffix", "'suffix' (insertion) is not supported");
  // best_of picks the n most likely of best_of candidates; tessera returns every choice it draws.
  if (auto best = GetInt(body, "best_of", INT64_MIN, INT64_MAX)) {
    if (*best != 1) Bad("best_of", "'best_of' other than 1 is not supported: ask for 'n' choices instead");
    if (r.n > 1) Bad("best_of", fmt::format("'best_of' (1) must be at least 'n' ({})", r.n));
  }
  if (auto lp = GetInt(body, "logprobs", 0, 5)) {
    if (model.diffusion && *lp > 0)
      Bad("logprobs",
          "'logprobs' above 0 (alternatives) is not available for diffusion models (each token's own "
          "logprob, its confidence when it was unmasked, is): use logprobs 0");
    r.logprobs = true;
    r.sampling.top_logprobs = static_cast<int>(*lp);
  }
  if (auto echo = GetBool(body, "echo")) {
    // Echo with logprobs would need the prompt's own log-probabilities, which no forward keeps.
    if (*echo && r.logprobs) Bad("echo", "'echo' together with 'logprobs' is not supported");
    r.echo = *echo;
  }
  return r;
}

void CheckPromptLength(ParsedRequest& req, int64_t prompt_tokens, int64_t max_model_len) {
  const char* param = req.chat ? "messages" : "prompt";
  if (prompt_tokens <= 0) Bad(param, "the prompt is empty after tokenization");
  if (max_model_len <= 0) return;
  if (prompt_tokens >= max_model_len)
    throw InvalidRequest(fmt::format("This model's maximum context length is {} tokens. However, your "
                                     "request has {} input tokens.",
                                     max_model_len, prompt_tokens),
                         param, "context_length_exceeded");
  if (!req.max_tokens_given) {
    req.sampling.max_tokens = max_model_len - prompt_tokens;
    return;
  }
  // Compared as max_tokens > room: prompt_tokens + max_tokens overflows for max_tokens near 2^63
  // (both are positive here, so their sum fits in uint64 for the message).
  if (req.sampling.max_tokens > max_model_len - prompt_tokens) {
    uint64_t total = static_cast<uint64_t>(prompt_tokens) + static_cast<uint64_t>(req.sampling.max_tokens);
    throw InvalidRequest(fmt::format("This model's maximum context length is {} tokens. However, you "
                                     "requested {} tokens ({} in the prompt, {} for the completion).",
                                     max_model_len, total, prompt_tokens, req.sampling.max_tokens),
                         req.chat ? "max_tokens" : "max_tokens", "context_length_exceeded");
  }
}

}  // namespace tessera

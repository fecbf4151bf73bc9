// tessera server: YAML configuration parsing, env interpolation, CLI flag mapping, validation and
// the masked effective-config dump. One table (kEntries) drives all of them, so a key added there
// is parsed, flagged, validated for type and printed without further code.
#include "server/server_config.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/text.h"
#include "server/content_filter.h"
#include "server/security.h"

namespace tessera {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The values a key takes, checked by ValidateServerConfig from the table: a number in [lo, hi] (lo
// itself excluded when lo_open), a string one of `choices` ('|'-separated; none: any value).
struct Check {
  double lo = -kInf, hi = kInf;
  bool lo_open = false;
  const char* choices = nullptr;
};
constexpr Check kAny{};
constexpr Check AtLeast(double lo) { return {lo, kInf, false, nullptr}; }
constexpr Check Within(double lo, double hi) { return {lo, hi, false, nullptr}; }
constexpr Check kShare{0, 1, true, nullptr};  // (0, 1]
constexpr Check OneOf(const char* choices) { return {-kInf, kInf, false, choices}; }

struct Entry {
  ConfigKeyInfo info;
  void* (*field)(ServerConfig&);
  Check check;
};

#define TESSERA_KEY(sec, key, flag, kind, secret, check, help)               \
  Entry {                                                                    \
    ConfigKeyInfo{#sec "." #key, flag, ConfigValueKind::kind, secret, help}, \
        [](ServerConfig& c) -> void* { return &c.sec.key; }, check           \
  }

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      TESSERA_KEY(model, path, "--model", kString, false, kAny, "checkpoint directory (default: the demo model)"),
      TESSERA_KEY(model, name, "--served-model-name", kString, false, kAny, "name served in the API"),
      TESSERA_KEY(model, tokenizer, "--tokenizer", kString, false, kAny, "tokenizer directory"),
      TESSERA_KEY(model, dtype, "--dtype", kString, false, OneOf("auto|bf16|bfloat16|f16|float16|f32|float32"),
                  "auto|bf16|f16|f32"),
      TESSERA_KEY(model, device, "--device", kString, false, kAny, "cpu|cuda|cuda:N"),
      TESSERA_KEY(model, load_format, "--load-format", kString, false, OneOf("auto|safetensors|dummy"),
                  "auto|safetensors|dummy"),
      TESSERA_KEY(model, kv_cache_dtype, "--kv-cache-dtype", kString, false, OneOf("f32|bf16"),
                  "KV cache element type: f32 (default) or bf16: half the KV bytes, twice the tokens; needs "
                  "--device cuda"),
      TESSERA_KEY(model, quantization, "--quantization", kString, false, OneOf("none|fp8|int8|int4"),
                  "quantize a bf16 checkpoint's Linear weights at load: none, fp8, int8 or int4"),
      TESSERA_KEY(model, activation_precision, "--activation-precision", kString, false, OneOf("f32|bf16"),
                  "what the GPU's tensor-core products multiply: f32 (default, exact) or bf16 (activations "
                  "rounded to bf16; needs --device cuda)"),
      TESSERA_KEY(model, max_model_len, "--max-model-len", kInt, false, AtLeast(0), "prompt + output tokens"),
      TESSERA_KEY(model, chat_template, "--chat-template", kString, false, kAny, "template file"),
      TESSERA_KEY(model, diffusion, "--diffusion", kBool, false, kAny,
                  "serve a qwen3_moe / qwen3_5_moe backbone as a block-diffusion model"),
      TESSERA_KEY(model, compute_threads, "--compute-threads", kInt, false, Within(0, 1024),
                  "CPU threads of the model (0 = all cores)"),
      TESSERA_KEY(model, tensor_parallel_size, "--tensor-parallel-size", kInt, false, Within(1, 64),
                  "GPUs (ranks) to shard over"),
      TESSERA_KEY(server, host, "--host", kString, false, kAny, "listen address"),
      TESSERA_KEY(server, port, "--port", kInt, false, Within(0, 65535), "listen port (0 = ephemeral)"),
      TESSERA_KEY(server, threads, "--threads", kInt, false, Within(1, 256), "HTTP I/O threads"),
      TESSERA_KEY(server, prompt_threads, "--prompt-threads", kInt, false, Within(1, 256),
                  "threads that parse request bodies and build prompts (template, tokenizer)"),
      TESSERA_KEY(server, metrics_require_key, "--metrics-require-key", kBool, false, kAny,
                  "/metrics needs an API key"),
      TESSERA_KEY(server, access_log, "--access-log", kString, false, kAny, "'-' stderr, '' off, or a file"),
      TESSERA_KEY(server, log_requests, "--log-requests", kBool, false, kAny, "log prompts and completions"),
      TESSERA_KEY(server, request_timeout_s, "--request-timeout", kDouble, false, AtLeast(0),
                  "seconds before a request is cancelled (0 = none)"),
      TESSERA_KEY(server, write_timeout_s, "--write-timeout", kDouble, false, AtLeast(0),
                  "seconds a client may take to read one piece of a response before it is dropped (0 = none)"),
      TESSERA_KEY(server, header_timeout_s, "--header-timeout", kDouble, false, AtLeast(0),
                  "seconds a request's header may take to arrive whole, from its first byte (a new connection: "
                  "from accept); then 408 and close (0 = none)"),
      TESSERA_KEY(server, body_timeout_s, "--body-timeout", kDouble, false, AtLeast(0),
                  "seconds a request's body may take to arrive whole after its header; then 408 and close (0 = none)"),
      TESSERA_KEY(server, max_body_bytes, "--max-body-bytes", kBytes, false, AtLeast(1024), "request body limit"),
      TESSERA_KEY(server, max_connections, "--max-connections", kInt, false, AtLeast(0),
                  "open connections in all; more get 503 and are closed (0 = unlimited)"),
      TESSERA_KEY(server, max_connections_per_client, "--max-connections-per-client", kInt, false, AtLeast(0),
                  "open connections per client address; more get 429 and are closed (0 = unlimited)"),
      TESSERA_KEY(server, health_port, "--health-port", kInt, false, Within(0, 65535),
                  "second port on --host serving only /health and /metrics, outside the connection limits (0 = off)"),
      TESSERA_KEY(engine, max_num_seqs, "--max-num-seqs", kInt, false, AtLeast(1), "sequences per step"),
      TESSERA_KEY(engine, max_num_batched_tokens, "--max-num-batched-tokens", kInt, false, AtLeast(1),
                  "tokens per step"),
      TESSERA_KEY(engine, enable_prefix_caching, "--enable-prefix-caching", kBool, false, kAny,
                  "reuse KV pages of shared prefixes"),
      TESSERA_KEY(engine, enable_chunked_prefill, "--enable-chunked-prefill", kBool, false, kAny,
                  "split long prefills over steps"),
      TESSERA_KEY(engine, num_state_snapshots, "--num-state-snapshots", kInt, false, AtLeast(0),
                  "hybrid models: recurrent-state snapshots kept for prefix caching, each one sequence's state "
                  "(0 = max_num_seqs / 4)"),
      TESSERA_KEY(engine, kv_cache_memory, "--kv-cache-memory", kBytes, false, AtLeast(0),
                  "KV cache budget (bytes, or 4GiB...; total over all ranks; 0 = auto: GPU from "
                  "--gpu-memory-utilization, CPU 4GiB)"),
      TESSERA_KEY(engine, gpu_memory_utilization, "--gpu-memory-utilization", kDouble, false, kShare,
                  "share of each GPU's memory for weights, activations and KV (0..1]"),
      TESSERA_KEY(engine, scheduling_policy, "--scheduling-policy", kString, false,
                  OneOf("fcfs|shortest_prompt_first|priority"), "fcfs|shortest_prompt_first|priority"),
      TESSERA_KEY(engine, share_prefix_cache_across_keys, "--share-prefix-cache-across-keys", kBool, false, kAny,
                  "let API keys hit each other's cached prefixes"),
      TESSERA_KEY(engine, router_temperature, "--router-temperature", kDouble, false, Within(0.05, 20),
                  "MoE router temperature for requests without router_temperature: router logits / T before "
                  "softmax and top-k (1 = as trained)"),
      TESSERA_KEY(diffusion, block_size, "--diffusion-block-size", kInt, false, AtLeast(0), "0 = model default"),
      TESSERA_KEY(diffusion, steps, "--diffusion-steps", kInt, false, AtLeast(0), "0 = model default"),
      TESSERA_KEY(diffusion, policy, "--diffusion-policy", kString, false, OneOf("|static|threshold|editing"),
                  "static|threshold|editing"),
      TESSERA_KEY(diffusion, threshold, "--diffusion-threshold", kDouble, false, kShare, "confidence threshold"),
      TESSERA_KEY(diffusion, mask_token_id, "--mask-token-id", kInt, false, AtLeast(-1),
                  "mask token id (-1 = config.json or the tokenizer)"),
      TESSERA_KEY(security, api_keys, "--api-key", kStringList, true, kAny, "accepted API keys"),
      TESSERA_KEY(security, api_key_file, "--api-key-file", kString, false, kAny, "file of API keys, one a line"),
      TESSERA_KEY(security, allow_cidrs, "--allow-cidr", kStringList, false, kAny, "client networks allowed (CIDR)"),
      TESSERA_KEY(limits, max_concurrent_requests, "--max-concurrent-requests", kInt, false, AtLeast(1),
                  "requests running at once"),
      TESSERA_KEY(limits, max_queue, "--max-queue", kInt, false, AtLeast(0), "requests waiting for a slot"),
      TESSERA_KEY(limits, requests_per_minute, "--requests-per-minute", kDouble, false, AtLeast(0),
                  "per key (0 = unlimited)"),
      TESSERA_KEY(limits, tokens_per_minute, "--tokens-per-minute", kDouble, false, AtLeast(0),
                  "per key (0 = unlimited)"),
      // content_safety.rules is a list of mappings (ParseContentRules), set in the YAML file only.
      TESSERA_KEY(content_safety, enabled, "--content-safety", kBool, false, kAny,
                  "apply the content-safety rules and classifier (docs/CONTENT_SAFETY.md)"),
      TESSERA_KEY(content_safety, input_block, "--content-safety-input-block", kString, false,
                  OneOf("error|refusal"),
                  "a blocked prompt gets a 400 content_filter error, or a 200 refusal_message reply"),
      TESSERA_KEY(content_safety, refusal_message, "--content-safety-refusal-message", kString, false, kAny,
                  "reply to a blocked prompt when input_block is refusal"),
      TESSERA_KEY(content_safety, mask_with, "--content-safety-mask-with", kString, false, kAny,
                  "text put in place of a masked match (rules without their own replacement)"),
      TESSERA_KEY(content_safety, classifier_url, "--content-safety-classifier-url", kString, false, kAny,
                  "http:// URL of an OpenAI /v1/moderations compatible endpoint, checked on prompts ('' = none)"),
      TESSERA_KEY(content_safety, classifier_model, "--content-safety-classifier-model", kString, false, kAny,
                  "the moderation request's model ('' = left out)"),
      TESSERA_KEY(content_safety, classifier_api_key, "--content-safety-classifier-api-key", kString, true, kAny,
                  "bearer key sent to the classifier"),
      TESSERA_KEY(content_safety, classifier_timeout_s, "--content-safety-classifier-timeout", kDouble, false,
                  Within(0.01, 120), "seconds the classifier may take (connect, send and answer)"),
      TESSERA_KEY(content_safety, classifier_failure, "--content-safety-classifier-failure", kString, false,
                  OneOf("open|closed"),
                  "classifier down, slow or answering nonsense: open serves the request, closed answers 503"),
      TESSERA_KEY(content_safety, classifier_action, "--content-safety-classifier-action", kString, false,
                  OneOf("block|flag"), "what a flagged prompt gets: blocked like a block rule, or only counted"),
  };
  return entries;
}
#undef TESSERA_KEY

const Entry* FindEntry(std::string_view path) {
  for (const Entry& e : Entries())
    if (path == e.info.path) return &e;
  return nullptr;
}

int64_t ParseInt(const std::string& text, std::string_view path) {
  std::string t = TrimSpace(text);
  if (t.empty()) Fail(ErrorKind::kInvalidArgument, "config key '{}': expected an integer, got ''", path);
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(t, &pos, 10);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != t.size())
    Fail(ErrorKind::kInvalidArgument, "config key '{}': expected an integer, got '{}'", path, text);
  return v;
}

double ParseDouble(const std::string& text, std::string_view path) {
  std::string t = TrimSpace(text);
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(t, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (t.empty() || pos != t.size() || !std::isfinite(v))
    Fail(ErrorKind::kInvalidArgument, "config key '{}': expected a number, got '{}'", path, text);
  return v;
}

bool ParseBool(const std::string& text, std::string_view path) {
  std::string t = TrimSpace(text);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  Fail(ErrorKind::kInvalidArgument, "config key '{}': expected true or false, got '{}'", path, text);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur, ',')) {
    std::string t = TrimSpace(cur);
    if (!t.empty()) out.push_back(t);
  }
  return out;
}

void SetFromText(ServerConfig& cfg, const Entry& e, const std::string& text) {
  void* p = e.field(cfg);
  switch (e.info.kind) {
    case ConfigValueKind::kString:
      *static_cast<std::string*>(p) = text;
      break;
    case ConfigValueKind::kInt:
      *static_cast<int64_t*>(p) = ParseInt(text, e.info.path);
      break;
    case ConfigValueKind::kDouble:
      *static_cast<double*>(p) = ParseDouble(text, e.info.path);
      break;
    case ConfigValueKind::kBool:
      *static_cast<bool*>(p) = ParseBool(text, e.info.path);
      break;
    case ConfigValueKind::kBytes:
      *static_cast<int64_t*>(p) = ParseByteSize(text, e.info.path);
      break;
    case ConfigValueKind::kStringList:
      *static_cast<std::vector<std::string>*>(p) = SplitList(text);
      break;
  }
}

std::string FormatDouble(double v) {
  std::string s = fmt::format("{}", v);
  return s;
}

std::string GetText(const ServerConfig& cfg, const Entry& e, bool mask) {
  void* p = e.field(const_cast<ServerConfig&>(cfg));
  switch (e.info.kind) {
    case ConfigValueKind::kString: {
      const auto& s = *static_cast<std::string*>(p);
      return mask && !s.empty() ? "***" : s;
    }
    case ConfigValueKind::kInt:
    case ConfigValueKind::kBytes:
      return std::to_string(*static_cast<int64_t*>(p));
    case ConfigValueKind::kDouble:
      return FormatDouble(*static_cast<double*>(p));
    case ConfigValueKind::kBool:
      return *static_cast<bool*>(p) ? "true" : "false";
    case ConfigValueKind::kStringList: {
      std::string out;
      for (const auto& s : *static_cast<std::vector<std::string>*>(p)) {
        if (!out.empty()) out += ",";
        out += mask ? "***" : s;
      }
      return out;
    }
  }
  return "";
}

// A mapping key as text. YAML allows a list or a mapping as a key ("? [a, b]: 1"), which
// Node::as<std::string> refuses with a bare YAML::BadConversion naming neither file nor key (the
// config fuzzer's first find): a key must be a plain name.
std::string KeyName(const YAML::Node& key, const std::string& source, const std::string& where) {
  if (!key.IsScalar())
    Fail(ErrorKind::kInvalidArgument, "{}: a key {} is a {}, not a plain name", source, where,
         key.IsMap() ? "mapping" : key.IsSequence() ? "list" : "null");
  return key.Scalar();
}

// content_safety.rules: a list of mappings, each key checked (an unknown or misspelt key would
// otherwise leave a rule silently weaker than its author meant).
std::vector<ContentRuleConfig> ParseContentRules(const YAML::Node& node, const std::string& source) {
  std::vector<ContentRuleConfig> rules;
  if (node.IsNull()) return rules;
  if (!node.IsSequence())
    Fail(ErrorKind::kInvalidArgument, "{}: 'content_safety.rules' must be a list of rules (mappings)", source);
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& r = node[i];
    const std::string where = fmt::format("content_safety.rules[{}]", i);
    if (!r.IsMap()) Fail(ErrorKind::kInvalidArgument, "{}: '{}' must be a mapping", source, where);
    ContentRuleConfig rule;
    auto scalar = [&](const YAML::Node& v, const std::string& key) {
      if (!v.IsScalar())
        Fail(ErrorKind::kInvalidArgument, "{}: '{}.{}' must be a single value", source, where, key);
      return InterpolateEnv(v.Scalar(), where + "." + key);
    };
    auto list = [&](const YAML::Node& v, const std::string& key) {
      std::vector<std::string> out;
      if (v.IsNull()) return out;
      if (v.IsScalar()) return std::vector<std::string>{scalar(v, key)};
      if (!v.IsSequence())
        Fail(ErrorKind::kInvalidArgument, "{}: '{}.{}' must be a list of strings", source, where, key);
      for (const auto& item : v) {
        std::string s = scalar(item, key);
        if (s.empty()) Fail(ErrorKind::kInvalidArgument, "{}: '{}.{}' has an empty entry", source, where, key);
        out.push_back(std::move(s));
      }
      return out;
    };
    for (const auto& kv : r) {
      const std::string key = KeyName(kv.first, source, "in '" + where + "'");
      const YAML::Node& v = kv.second;
      const std::string path = where + "." + key;
      if (key == "name")
        rule.name = scalar(v, key);
      else if (key == "category")
        rule.category = scalar(v, key);
      else if (key == "applies_to")
        rule.applies_to = scalar(v, key);
      else if (key == "action")
        rule.action = scalar(v, key);
      else if (key == "words")
        rule.words = list(v, key);
      else if (key == "patterns")
        rule.patterns = list(v, key);
      else if (key == "case_insensitive")
        rule.case_insensitive = ParseBool(scalar(v, key), path);
      else if (key == "whole_words")
        rule.whole_words = ParseBool(scalar(v, key), path);
      else if (key == "max_match_bytes")
        rule.max_match_bytes = ParseInt(scalar(v, key), path);
      else if (key == "replacement")
        rule.replacement = v.IsNull() ? "" : scalar(v, key);
      else
        Fail(ErrorKind::kInvalidArgument,
             "{}: unknown key '{}' (a rule has name, category, applies_to, action, words, patterns, "
             "case_insensitive, whole_words, max_match_bytes, replacement)",
             source, path);
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

}  // namespace

const std::vector<ConfigKeyInfo>& ConfigKeys() {
  static const std::vector<ConfigKeyInfo> keys = [] {
    std::vector<ConfigKeyInfo> k;
    for (const Entry& e : Entries()) k.push_back(e.info);
    return k;
  }();
  return keys;
}

int64_t ParseByteSize(std::string_view text, std::string_view what) {
  std::string t = TrimSpace(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  std::string num = t.substr(0, i), unit = TrimSpace(std::string_view(t).substr(i));
  double v = 0;
  size_t pos = 0;
  try {
    v = std::stod(num, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (num.empty() || pos != num.size())
    Fail(ErrorKind::kInvalidArgument, "config key '{}': bad byte size '{}' (want e.g. 4GiB)", what, text);
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 0;
  if (u.empty() || u == "b")
    mult = 1;
  else if (u == "k" || u == "kb")
    mult = 1e3;
  else if (u == "kib")
    mult = 1024.0;
  else if (u == "m" || u == "mb")
    mult = 1e6;
  else if (u == "mib")
    mult = 1024.0 * 1024;
  else if (u == "g" || u == "gb")
    mult = 1e9;
  else if (u == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (u == "t" || u == "tb")
    mult = 1e12;
  else if (u == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    Fail(ErrorKind::kInvalidArgument, "config key '{}': unknown size unit '{}' in '{}'", what, unit, text);
  double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes > 9.0e18)
    Fail(ErrorKind::kInvalidArgument, "config key '{}': byte size '{}' too large", what, text);
  return static_cast<int64_t>(std::llround(bytes));
}

std::string InterpolateEnv(std::string_view text, std::string_view what) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "$${") == 0) {
      out += "${";
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "${") != 0) {
      out += text[i++];
      continue;
    }
    size_t close = text.find('}', i + 2);
    if (close == std::string_view::npos)
      Fail(ErrorKind::kInvalidArgument, "config key '{}': unterminated '${{' in '{}'", what, text);
    std::string_view inner = text.substr(i + 2, close - i - 2);
    std::string_view name = inner;
    std::optional<std::string_view> def;
    if (size_t d = inner.find(":-"); d != std::string_view::npos) {
      name = inner.substr(0, d);
      def = inner.substr(d + 2);
    }
    bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) valid = valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!valid)
      Fail(ErrorKind::kInvalidArgument, "config key '{}': bad variable name '{}' in '{}'", what, name, text);
    const char* v = std::getenv(std::string(name).c_str());
    if (v != nullptr && (*v != '\0' || !def)) {
      out += v;
    } else if (def) {
      out += *def;
    } else {
      Fail(ErrorKind::kInvalidArgument,
           "config key '{}': environment variable '{}' is not set (use ${{{}:-default}})", what, name, name);
    }
    i = close + 1;
  }
  return out;
}

ServerConfig ParseServerConfig(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    Fail(ErrorKind::kInvalidArgument, "{}: YAML error: {}", source, e.what());
  }
  ServerConfig cfg;
  if (root.IsNull()) return cfg;
  if (!root.IsMap()) Fail(ErrorKind::kInvalidArgument, "{}: the top level must be a mapping", source);
  static const char* kSections[] = {"model", "server", "engine", "diffusion", "security", "limits", "content_safety"};
  for (const auto& sec : root) {
    std::string sname = KeyName(sec.first, source, "at the top level");
    bool known = false;
    for (const char* s : kSections) known = known || sname == s;
    if (!known)
      Fail(ErrorKind::kInvalidArgument,
           "{}: unknown key '{}' (sections: model, server, engine, diffusion, security, limits, content_safety)",
           source,
           sname);
    if (sec.second.IsNull()) continue;
    if (!sec.second.IsMap()) Fail(ErrorKind::kInvalidArgument, "{}: '{}' must be a mapping", source, sname);
    for (const auto& kv : sec.second) {
      std::string path = sname + "." + KeyName(kv.first, source, "in '" + sname + "'");
      if (path == "content_safety.rules") {
        cfg.content_safety.rules = ParseContentRules(kv.second, source);
        continue;
      }
      const Entry* e = FindEntry(path);
      if (e == nullptr) Fail(ErrorKind::kInvalidArgument, "{}: unknown key '{}'", source, path);
      const YAML::Node& v = kv.second;
      if (e->info.kind == ConfigValueKind::kStringList) {
        auto* list = static_cast<std::vector<std::string>*>(e->field(cfg));
        list->clear();
        if (v.IsNull()) continue;
        if (v.IsScalar()) {
          *list = SplitList(InterpolateEnv(v.Scalar(), path));
          if (list->empty()) list->push_back("");  // "" or an unset variable: kept for the checks to name
          continue;
        }
        if (!v.IsSequence())
          Fail(ErrorKind::kInvalidArgument, "{}: key '{}' must be a list of strings", source, path);
        for (const auto& item : v) {
          if (!item.IsScalar())
            Fail(ErrorKind::kInvalidArgument, "{}: key '{}' must be a list of strings", source, path);
          list->push_back(InterpolateEnv(item.Scalar(), path));  // empty too: the checks name it
        }
        continue;
      }
      if (v.IsNull()) {
        if (e->info.kind == ConfigValueKind::kString) {
          *static_cast<std::string*>(e->field(cfg)) = "";
          continue;
        }
        Fail(ErrorKind::kInvalidArgument, "{}: key '{}' has no value", source, path);
      }
      if (!v.IsScalar())
        Fail(ErrorKind::kInvalidArgument, "{}: key '{}' must be a single value, not a {}", source, path,
             v.IsMap() ? "mapping" : "list");
      SetFromText(cfg, *e, InterpolateEnv(v.Scalar(), path));
    }
  }
  return cfg;
}

ServerConfig LoadServerConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(ErrorKind::kNotFound, "cannot read config file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseServerConfig(ss.str(), path);
}

void SetConfigValue(ServerConfig& cfg, std::string_view path, const std::string& value) {
  const Entry* e = FindEntry(path);
  if (e == nullptr) Fail(ErrorKind::kInvalidArgument, "unknown config key '{}'", path);
  SetFromText(cfg, *e, value);
}

std::string GetConfigValue(const ServerConfig& cfg, std::string_view path) {
  const Entry* e = FindEntry(path);
  if (e == nullptr) Fail(ErrorKind::kInvalidArgument, "unknown config key '{}'", path);
  return GetText(cfg, *e, false);
}

void ValidateServerConfig(const ServerConfig& c) {
  auto bad = [](std::string_view key, const std::string& why) {
    Fail(ErrorKind::kInvalidArgument, "config key '{}': {}", key, why);
  };
  // Each key's own range or choices, from the table.
  for (const Entry& e : Entries()) {
    const Check& k = e.check;
    const void* p = e.field(const_cast<ServerConfig&>(c));
    if (k.choices != nullptr) {
      const std::string& v = *static_cast<const std::string*>(p);
      std::string list;
      bool ok = false;
      for (std::string_view rest = k.choices;;) {
        const size_t bar = rest.find('|');
        const std::string_view choice = rest.substr(0, bar);
        ok = ok || v == choice;
        if (!choice.empty()) list += list.empty() ? std::string(choice) : fmt::format(", {}", choice);
        if (bar == std::string_view::npos) break;
        rest.remove_prefix(bar + 1);
      }
      if (!ok) bad(e.info.path, fmt::format("'{}' is not one of: {}", v, list));
      continue;
    }
    double v = 0;
    switch (e.info.kind) {
      case ConfigValueKind::kInt:
      case ConfigValueKind::kBytes:
        v = static_cast<double>(*static_cast<const int64_t*>(p));
        break;
      case ConfigValueKind::kDouble:
        v = *static_cast<const double*>(p);
        break;
      default:
        continue;
    }
    if (k.lo_open ? v > k.lo && v <= k.hi : v >= k.lo && v <= k.hi) continue;
    if (k.lo_open) bad(e.info.path, fmt::format("must be in ({}, {}]", k.lo, k.hi));
    if (k.hi < kInf) bad(e.info.path, fmt::format("must be in {}..{}", k.lo, k.hi));
    bad(e.info.path, fmt::format("must be >= {}", k.lo));
  }
  // Checks across keys or beyond one value.
  // The CPU backend keeps an f32 cache. Model::Load refuses bf16 there too, but only after serve has
  // bound its port and printed "listening"; checked here, the mistake is one line before either.
  if (c.model.kv_cache_dtype != "f32" && c.model.device == "cpu")
    bad("model.kv_cache_dtype", fmt::format("{} needs a GPU (model.device cuda, --device cuda); the CPU backend "
                                            "keeps an f32 KV cache",
                                            c.model.kv_cache_dtype));
  if (c.model.activation_precision == "bf16" && c.model.device == "cpu")
    bad("model.activation_precision", "bf16 needs a GPU (model.device cuda, --device cuda); the CPU backend "
                                      "multiplies f32 activations");
  if (c.server.health_port != 0 && c.server.health_port == c.server.port)
    bad("server.health_port", fmt::format("must differ from server.port ({})", c.server.port));
  if (c.diffusion.block_size > 0 && c.diffusion.steps > c.diffusion.block_size)
    bad("diffusion.steps", "must not exceed diffusion.block_size");
  // Every rule compiles (its regexes included) or the error names it; the classifier's URL parses.
  ValidateContentSafety(c.content_safety);
  // An empty key (`--api-key "$KEY"` with KEY unset, `api_keys: [""]`) would be dropped and leave the
  // server open while its operator asked for keys.
  for (const auto& key : c.security.api_keys)
    if (key.find_first_not_of(" \t\r\n") == std::string::npos)
      bad("security.api_keys", "an empty key (an unset variable?): give the key, or leave the option out for a server "
                               "without keys");
  for (const auto& cidr : c.security.allow_cidrs) {
    try {
      (void)CidrRange::Parse(cidr);
    } catch (const Error& e) {
      bad("security.allow_cidrs", e.what());
    }
  }
}

std::string EffectiveConfigString(const ServerConfig& cfg) {
  std::string out;
  for (const Entry& e : Entries())
    out += fmt::format("{}: {}\n", e.info.path, GetText(cfg, e, e.info.secret));
  // The rules by name and action only: their words are what the operator keeps out of logs.
  std::string rules;
  for (const ContentRuleConfig& r : cfg.content_safety.rules)
    rules += fmt::format("{}{} ({}, {})", rules.empty() ? "" : ", ", r.name, r.action, r.applies_to);
  out += fmt::format("content_safety.rules: [{}]\n", rules);
  return out;
}

void RegisterConfigFlags(CLI::App& app, ConfigFlagValues& out) {
  for (const Entry& e : Entries()) {
    std::string path = e.info.path;
    std::string flag = e.info.flag;
    std::string help = fmt::format("{} ({})", e.info.help, path);
    if (e.info.kind == ConfigValueKind::kBool) {
      std::string names = flag + ",!--no-" + flag.substr(2);
      app.add_flag_function(
          names, [&out, path](int64_t n) { out.values[path] = {n > 0 ? "true" : "false"}; }, help);
    } else if (e.info.kind == ConfigValueKind::kStringList) {
      app.add_option_function<std::vector<std::string>>(
             flag, [&out, path](const std::vector<std::string>& v) { out.values[path] = v; }, help)
          ->expected(1)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    } else {
      app.add_option_function<std::string>(
          flag, [&out, path](const std::string& v) { out.values[path] = {v}; }, help);
    }
  }
}

void ApplyConfigFlags(const ConfigFlagValues& flags, ServerConfig& cfg) {
  for (const auto& [path, texts] : flags.values) {
    const Entry* e = FindEntry(path);
    if (e == nullptr) Fail(ErrorKind::kInvalidArgument, "unknown config key '{}'", path);
    if (e->info.kind == ConfigValueKind::kStringList) {
      auto* list = static_cast<std::vector<std::string>*>(e->field(cfg));
      list->clear();
      for (const auto& t : texts) {
        std::vector<std::string> items = SplitList(t);
        if (items.empty()) items.push_back("");  // `--api-key "$KEY"` with KEY unset: kept for the checks
        for (auto& item : items) list->push_back(item);
      }
    } else if (!texts.empty()) {
      SetFromText(cfg, *e, texts.back());
    }
  }
}

}  // namespace tessera

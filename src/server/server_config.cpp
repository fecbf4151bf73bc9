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
#include <sstream>

#include "core/error.h"
#include "server/security.h"

namespace tessera {
namespace {

struct Entry {
  ConfigKeyInfo info;
  void* (*field)(ServerConfig&);
};

#define TESSERA_KEY(sec, key, flag, kind, secret, help)                      \
  Entry {                                                                    \
    ConfigKeyInfo{#sec "." #key, flag, ConfigValueKind::kind, secret, help}, \
        [](ServerConfig& c) -> void* { return &c.sec.key; }                  \
  }

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      TESSERA_KEY(model, path, "--model", kString, false, "checkpoint directory (default: the demo model)"),
      TESSERA_KEY(model, name, "--served-model-name", kString, false, "name served in the API"),
      TESSERA_KEY(model, tokenizer, "--tokenizer", kString, false, "tokenizer directory"),
      TESSERA_KEY(model, dtype, "--dtype", kString, false, "auto|bf16|f16|f32"),
      TESSERA_KEY(model, device, "--device", kString, false, "cpu|cuda|cuda:N"),
      TESSERA_KEY(model, load_format, "--load-format", kString, false, "auto|safetensors|dummy"),
      TESSERA_KEY(model, kv_cache_dtype, "--kv-cache-dtype", kString, false,
                  "KV cache element type: f32 (default) or bf16: half the KV bytes, twice the tokens; needs "
                  "--device cuda"),
      TESSERA_KEY(model, quantization, "--quantization", kString, false,
                  "quantize a bf16 checkpoint's Linear weights at load: none, fp8, int8 or int4"),
      TESSERA_KEY(model, max_model_len, "--max-model-len", kInt, false, "prompt + output tokens"),
      TESSERA_KEY(model, chat_template, "--chat-template", kString, false, "template file"),
      TESSERA_KEY(model, diffusion, "--diffusion", kBool, false,
                  "serve a qwen3_moe / qwen3_5_moe backbone as a block-diffusion model"),
      TESSERA_KEY(model, compute_threads, "--compute-threads", kInt, false, "CPU threads of the model (0 = all cores)"),
      TESSERA_KEY(model, tensor_parallel_size, "--tensor-parallel-size", kInt, false, "GPUs (ranks) to shard over"),
      TESSERA_KEY(server, host, "--host", kString, false, "listen address"),
      TESSERA_KEY(server, port, "--port", kInt, false, "listen port (0 = ephemeral)"),
      TESSERA_KEY(server, threads, "--threads", kInt, false, "HTTP I/O threads"),
      TESSERA_KEY(server, prompt_threads, "--prompt-threads", kInt, false,
                  "threads that parse request bodies and build prompts (template, tokenizer)"),
      TESSERA_KEY(server, metrics_require_key, "--metrics-require-key", kBool, false,
                  "/metrics needs an API key"),
      TESSERA_KEY(server, access_log, "--access-log", kString, false, "'-' stderr, '' off, or a file"),
      TESSERA_KEY(server, log_requests, "--log-requests", kBool, false, "log prompts and completions"),
      TESSERA_KEY(server, request_timeout_s, "--request-timeout", kDouble, false,
                  "seconds before a request is cancelled (0 = none)"),
      TESSERA_KEY(server, write_timeout_s, "--write-timeout", kDouble, false,
                  "seconds a client may take to read one piece of a response before it is dropped (0 = none)"),
      TESSERA_KEY(server, max_body_bytes, "--max-body-bytes", kBytes, false, "request body limit"),
      TESSERA_KEY(server, max_connections, "--max-connections", kInt, false,
                  "open connections in all; more get 503 and are closed (0 = unlimited)"),
      TESSERA_KEY(server, max_connections_per_client, "--max-connections-per-client", kInt, false,
                  "open connections per client address; more get 429 and are closed (0 = unlimited)"),
      TESSERA_KEY(engine, max_num_seqs, "--max-num-seqs", kInt, false, "sequences per step"),
      TESSERA_KEY(engine, max_num_batched_tokens, "--max-num-batched-tokens", kInt, false, "tokens per step"),
      TESSERA_KEY(engine, enable_prefix_caching, "--enable-prefix-caching", kBool, false,
                  "reuse KV pages of shared prefixes"),
      TESSERA_KEY(engine, enable_chunked_prefill, "--enable-chunked-prefill", kBool, false,
                  "split long prefills over steps"),
      TESSERA_KEY(engine, num_state_snapshots, "--num-state-snapshots", kInt, false,
                  "hybrid models: recurrent-state snapshots kept for prefix caching, each one sequence's state "
                  "(0 = max_num_seqs / 4)"),
      TESSERA_KEY(engine, kv_cache_memory, "--kv-cache-memory", kBytes, false,
                  "KV cache budget (bytes, or 4GiB...; total over all ranks; 0 = auto: GPU from "
                  "--gpu-memory-utilization, CPU 4GiB)"),
      TESSERA_KEY(engine, gpu_memory_utilization, "--gpu-memory-utilization", kDouble, false,
                  "share of each GPU's memory for weights, activations and KV (0..1]"),
      TESSERA_KEY(engine, scheduling_policy, "--scheduling-policy", kString, false,
                  "fcfs|shortest_prompt_first|priority"),
      TESSERA_KEY(engine, share_prefix_cache_across_keys, "--share-prefix-cache-across-keys", kBool, false,
                  "let API keys hit each other's cached prefixes"),
      TESSERA_KEY(diffusion, block_size, "--diffusion-block-size", kInt, false, "0 = model default"),
      TESSERA_KEY(diffusion, steps, "--diffusion-steps", kInt, false, "0 = model default"),
      TESSERA_KEY(diffusion, policy, "--diffusion-policy", kString, false, "static|threshold|editing"),
      TESSERA_KEY(diffusion, threshold, "--diffusion-threshold", kDouble, false, "confidence threshold"),
      TESSERA_KEY(diffusion, mask_token_id, "--mask-token-id", kInt, false,
                  "mask token id (-1 = config.json or the tokenizer)"),
      TESSERA_KEY(security, api_keys, "--api-key", kStringList, true, "accepted API keys"),
      TESSERA_KEY(security, api_key_file, "--api-key-file", kString, false, "file of API keys, one a line"),
      TESSERA_KEY(security, allow_cidrs, "--allow-cidr", kStringList, false,
                  "client networks allowed (CIDR)"),
      TESSERA_KEY(limits, max_concurrent_requests, "--max-concurrent-requests", kInt, false,
                  "requests running at once"),
      TESSERA_KEY(limits, max_queue, "--max-queue", kInt, false, "requests waiting for a slot"),
      TESSERA_KEY(limits, requests_per_minute, "--requests-per-minute", kDouble, false,
                  "per key (0 = unlimited)"),
      TESSERA_KEY(limits, tokens_per_minute, "--tokens-per-minute", kDouble, false,
                  "per key (0 = unlimited)"),
  };
  return entries;
}
#undef TESSERA_KEY

const Entry* FindEntry(std::string_view path) {
  for (const Entry& e : Entries())
    if (path == e.info.path) return &e;
  return nullptr;
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

int64_t ParseInt(const std::string& text, std::string_view path) {
  std::string t = Trim(text);
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
  std::string t = Trim(text);
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
  std::string t = Trim(text);
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
    std::string t = Trim(cur);
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
  std::string t = Trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  std::string num = t.substr(0, i), unit = Trim(std::string_view(t).substr(i));
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
  static const char* kSections[] = {"model", "server", "engine", "diffusion", "security", "limits"};
  for (const auto& sec : root) {
    std::string sname = sec.first.as<std::string>();
    bool known = false;
    for (const char* s : kSections) known = known || sname == s;
    if (!known)
      Fail(ErrorKind::kInvalidArgument,
           "{}: unknown key '{}' (sections: model, server, engine, diffusion, security, limits)", source,
           sname);
    if (sec.second.IsNull()) continue;
    if (!sec.second.IsMap()) Fail(ErrorKind::kInvalidArgument, "{}: '{}' must be a mapping", source, sname);
    for (const auto& kv : sec.second) {
      std::string path = sname + "." + kv.first.as<std::string>();
      const Entry* e = FindEntry(path);
      if (e == nullptr) Fail(ErrorKind::kInvalidArgument, "{}: unknown key '{}'", source, path);
      const YAML::Node& v = kv.second;
      if (e->info.kind == ConfigValueKind::kStringList) {
        auto* list = static_cast<std::vector<std::string>*>(e->field(cfg));
        list->clear();
        if (v.IsNull()) continue;
        if (v.IsScalar()) {
          *list = SplitList(InterpolateEnv(v.Scalar(), path));
          continue;
        }
        if (!v.IsSequence())
          Fail(ErrorKind::kInvalidArgument, "{}: key '{}' must be a list of strings", source, path);
        for (const auto& item : v) {
          if (!item.IsScalar())
            Fail(ErrorKind::kInvalidArgument, "{}: key '{}' must be a list of strings", source, path);
          std::string s = InterpolateEnv(item.Scalar(), path);
          if (!s.empty()) list->push_back(s);
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
  auto one_of = [&](std::string_view key, const std::string& v, std::initializer_list<const char*> ok) {
    std::string list;
    for (const char* o : ok) {
      if (v == o) return;
      list += list.empty() ? o : std::string(", ") + o;
    }
    bad(key, fmt::format("'{}' is not one of: {}", v, list));
  };
  one_of("model.dtype", c.model.dtype, {"auto", "bf16", "bfloat16", "f16", "float16", "f32", "float32"});
  one_of("model.load_format", c.model.load_format, {"auto", "safetensors", "dummy"});
  one_of("model.kv_cache_dtype", c.model.kv_cache_dtype, {"f32", "bf16"});
  one_of("model.quantization", c.model.quantization, {"none", "fp8", "int8", "int4"});
  // The CPU backend keeps an f32 cache. Model::Load refuses bf16 there too, but only after serve has
  // bound its port and printed "listening"; checked here, the mistake is one line before either.
  if (c.model.kv_cache_dtype != "f32" && c.model.device == "cpu")
    bad("model.kv_cache_dtype", fmt::format("{} needs a GPU (model.device cuda, --device cuda); the CPU backend "
                                            "keeps an f32 KV cache",
                                            c.model.kv_cache_dtype));
  if (c.model.max_model_len < 0) bad("model.max_model_len", "must be >= 0");
  if (c.model.compute_threads < 0 || c.model.compute_threads > 1024) bad("model.compute_threads", "must be in 0..1024");
  if (c.model.tensor_parallel_size < 1 || c.model.tensor_parallel_size > 64)
    bad("model.tensor_parallel_size", "must be in 1..64");
  if (c.diffusion.mask_token_id < -1) bad("diffusion.mask_token_id", "must be >= -1");
  if (c.server.port < 0 || c.server.port > 65535) bad("server.port", "must be in 0..65535");
  if (c.server.threads < 1 || c.server.threads > 256) bad("server.threads", "must be in 1..256");
  if (c.server.prompt_threads < 1 || c.server.prompt_threads > 256) bad("server.prompt_threads", "must be in 1..256");
  if (c.server.request_timeout_s < 0) bad("server.request_timeout_s", "must be >= 0");
  if (c.server.write_timeout_s < 0) bad("server.write_timeout_s", "must be >= 0");
  if (c.server.max_body_bytes < 1024) bad("server.max_body_bytes", "must be at least 1024");
  if (c.server.max_connections < 0) bad("server.max_connections", "must be >= 0 (0 = unlimited)");
  if (c.server.max_connections_per_client < 0)
    bad("server.max_connections_per_client", "must be >= 0 (0 = unlimited)");
  if (c.engine.max_num_seqs < 1) bad("engine.max_num_seqs", "must be >= 1");
  if (c.engine.max_num_batched_tokens < 1) bad("engine.max_num_batched_tokens", "must be >= 1");
  if (c.engine.num_state_snapshots < 0) bad("engine.num_state_snapshots", "must be >= 0 (0 = max_num_seqs / 4)");
  if (c.engine.kv_cache_memory < 0) bad("engine.kv_cache_memory", "must be >= 0 (0 = automatic)");
  if (!(c.engine.gpu_memory_utilization > 0 && c.engine.gpu_memory_utilization <= 1))
    bad("engine.gpu_memory_utilization", "must be in (0, 1]");
  one_of("engine.scheduling_policy", c.engine.scheduling_policy,
         {"fcfs", "shortest_prompt_first", "priority"});
  if (c.diffusion.block_size < 0) bad("diffusion.block_size", "must be >= 0");
  if (c.diffusion.steps < 0) bad("diffusion.steps", "must be >= 0");
  if (c.diffusion.block_size > 0 && c.diffusion.steps > c.diffusion.block_size)
    bad("diffusion.steps", "must not exceed diffusion.block_size");
  one_of("diffusion.policy", c.diffusion.policy, {"", "static", "threshold", "editing"});
  if (!(c.diffusion.threshold > 0 && c.diffusion.threshold <= 1))
    bad("diffusion.threshold", "must be in (0, 1]");
  for (const auto& cidr : c.security.allow_cidrs) {
    try {
      (void)CidrRange::Parse(cidr);
    } catch (const Error& e) {
      bad("security.allow_cidrs", e.what());
    }
  }
  if (c.limits.max_concurrent_requests < 1) bad("limits.max_concurrent_requests", "must be >= 1");
  if (c.limits.max_queue < 0) bad("limits.max_queue", "must be >= 0");
  if (c.limits.requests_per_minute < 0) bad("limits.requests_per_minute", "must be >= 0");
  if (c.limits.tokens_per_minute < 0) bad("limits.tokens_per_minute", "must be >= 0");
}

std::string EffectiveConfigString(const ServerConfig& cfg) {
  std::string out;
  for (const Entry& e : Entries())
    out += fmt::format("{}: {}\n", e.info.path, GetText(cfg, e, e.info.secret));
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
      for (const auto& t : texts)
        for (auto& item : SplitList(t)) list->push_back(item);
    } else if (!texts.empty()) {
      SetFromText(cfg, *e, texts.back());
    }
  }
}

}  // namespace tessera

// tessera server: the `tessera serve` configuration: one YAML file (sections model, server, engine,
// diffusion, security, limits, content_safety) with ${VAR} / ${VAR:-default} interpolation, every key also settable
// by a CLI flag (kConfigKeys maps `section.key` <-> `--flag-name`), and a printable effective
// configuration with the secrets masked.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace tessera {

struct ModelSection {
  std::string path;                    // checkpoint directory
  std::string name;                    // served name ("" = the directory's base name)
  std::string tokenizer;               // tokenizer directory ("" = path)
  std::string dtype = "auto";          // auto | bf16 | f32 | f16
  std::string device = "cpu";          // cpu | cuda | cuda:N
  std::string load_format = "auto";    // auto | safetensors | dummy
  std::string kv_cache_dtype = "f32";  // f32 | bf16 (half the KV bytes; needs a cuda device)
  std::string quantization = "none";   // none | fp8 | int8 | int4: quantize float weights at load
  std::string activation_precision = "f32";  // f32 | bf16: what the GPU's products multiply
  int64_t max_model_len = 0;           // 0 = from the model's config
  std::string chat_template;           // file overriding the tokenizer's template ("" = none)
  bool diffusion = false;              // run a qwen3_moe / qwen3_5_moe backbone as a block-diffusion model
  int64_t compute_threads = 0;         // CPU threads of the model (0 = all cores)
  int64_t tensor_parallel_size = 1;    // ranks the model is sharded over
};

struct HttpSection {
  std::string host = "127.0.0.1";
  int64_t port = 8000;  // 0 = ephemeral (tests)
  int64_t threads = 2;  // I/O threads
  // Threads that parse a generation request's body and build its prompt (chat template, tokenizer):
  // seconds for a body of megabytes, which on an I/O thread would stall every connection it serves.
  int64_t prompt_threads = 2;
  bool metrics_require_key = false;
  std::string access_log = "-";    // "-" = stderr, "" = off, else a file appended to
  bool log_requests = false;       // put prompts and completions in the access log
  double request_timeout_s = 600;  // 0 = none
  // A client that takes longer to take one write (a stream chunk, a response) is dropped and its
  // request cancelled: one that stops reading would otherwise hold its connection for good.
  double write_timeout_s = 120;  // 0 = none
  // A request's header, from its first byte (a new connection: from accept), and then its body must
  // each arrive whole within these (0 = none): a client that sends a byte every few seconds, or a
  // Content-Length it never finishes (slowloris), gets 408 and the close instead of holding its
  // connection and the memory of its partial request for as long as it keeps trickling. Totals, not
  // gaps between reads (nginx's client_body_timeout is a gap, which a byte a minute never trips).
  double header_timeout_s = 30;
  double body_timeout_s = 60;  // 8 MiB (max_body_bytes) in 60 s needs 140 KB/s
  int64_t max_body_bytes = 8 << 20;
  // Open connections, in all and per client address (0 = unlimited): each one may hold up to
  // max_body_bytes for the idle timeout, so without a cap slow uploads could take the memory and
  // the descriptors. Over a cap a connection gets one 503 (total) or 429 (per client) and is closed.
  int64_t max_connections = 1024;
  // Off by default: one address is often an app server or a proxy carrying many users, and batch
  // clients (evaluations, load tests) hold hundreds of connections; vLLM and llama-server cap none.
  int64_t max_connections_per_client = 0;
  // A second listener on host that answers only GET/HEAD /health and /metrics (other paths 404),
  // outside max_connections and the per-client cap: a liveness/readiness probe still gets through
  // while the main port is flooded. 0 = off; must differ from port.
  int64_t health_port = 0;
};

struct EngineSection {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 4096;
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  // Hybrid (Gated DeltaNet) models with prefix caching: recurrent-state snapshots kept for cached
  // prefixes, each one sequence's state in size; 0 = max_num_seqs / 4. Ignored by other models.
  int64_t num_state_snapshots = 0;
  // KV cache bytes (YAML/CLI accept "4GiB", "512MiB", ...); 0 = automatic: on a GPU what
  // gpu_memory_utilization leaves after weights, state and activations; on the CPU 4 GiB.
  int64_t kv_cache_memory = 0;
  double gpu_memory_utilization = 0.9;  // share of each GPU's memory tessera may use
  std::string scheduling_policy = "fcfs";      // fcfs | shortest_prompt_first | priority
  bool share_prefix_cache_across_keys = false;
  // MoE router temperature of requests that set none (router logits / T before softmax and top-k;
  // 1 = as trained). Operators of diffusion MoE models tune it with the block size.
  double router_temperature = 1.0;
};

struct DiffusionSection {  // defaults for diffusion models; 0 / "" = the model's own default
  int64_t block_size = 0;
  int64_t steps = 0;
  std::string policy;  // "" | static | threshold | editing
  double threshold = 0.9;
  int64_t mask_token_id = -1;  // -1 = from config.json / the tokenizer's mask token
};

struct SecuritySection {
  std::vector<std::string> api_keys;
  std::string api_key_file;              // one key a line, '#' comments
  std::vector<std::string> allow_cidrs;  // empty = everyone
};

struct LimitsSection {
  int64_t max_concurrent_requests = 256;
  int64_t max_queue = 1024;        // requests waiting for a slot beyond that get 429
  double requests_per_minute = 0;  // per API key; 0 = unlimited
  double tokens_per_minute = 0;    // per API key (prompt + completion); 0 = unlimited
};

// One content-safety rule (docs/CONTENT_SAFETY.md), from the YAML list content_safety.rules (no
// flag: a rule is a mapping). Compiled, and refused naming the rule, by ValidateServerConfig.
struct ContentRuleConfig {
  std::string name;      // unique; names the rule in errors, logs
  std::string category;  // metrics label ("" = the name)
  std::string applies_to = "both";  // input | output | both
  std::string action;               // block | mask | flag (required)
  std::vector<std::string> words;     // literal words / phrases
  std::vector<std::string> patterns;  // PCRE2 patterns
  bool case_insensitive = true;
  bool whole_words = true;  // words only: no letter, digit or '_' right before or after
  // Longest text a pattern of this rule must see to match (lookahead included): the most an output
  // stream holds back for it. Longer matches are still found when they arrive in one piece.
  int64_t max_match_bytes = 256;
  std::string replacement;  // mask: the text put in place of a match ("" = content_safety.mask_with)
};

struct ContentSafetySection {
  bool enabled = false;
  std::vector<ContentRuleConfig> rules;
  std::string input_block = "error";  // error (400 content_filter) | refusal (refusal_message, 200)
  std::string refusal_message = "I'm sorry, but I can't help with that request.";
  std::string mask_with = "***";
  // External classifier, OpenAI /v1/moderations compatible ("" = none): input prompts only.
  std::string classifier_url;  // http://host:port/path
  std::string classifier_model;
  std::string classifier_api_key;
  double classifier_timeout_s = 2.0;
  std::string classifier_failure = "closed";  // open (serve anyway) | closed (503)
  std::string classifier_action = "block";    // block | flag
};

struct ServerConfig {
  ModelSection model;
  HttpSection server;
  EngineSection engine;
  DiffusionSection diffusion;
  SecuritySection security;
  LimitsSection limits;
  ContentSafetySection content_safety;
};

// One settable key. `kind` says how a text value is parsed.
enum class ConfigValueKind { kString, kInt, kDouble, kBool, kBytes, kStringList };
struct ConfigKeyInfo {
  const char* path;  // "server.port"
  const char* flag;  // "--port"
  ConfigValueKind kind;
  bool secret;  // masked in EffectiveConfigString
  const char* help;
};
const std::vector<ConfigKeyInfo>& ConfigKeys();

// Parses YAML text; `source` names the file in errors. Unknown keys, wrong types and bad values
// throw Error(kInvalidArgument) naming the key path. Interpolates ${VAR} and ${VAR:-default} in
// every scalar (an unset ${VAR} without default is an error; `$${` is a literal `${`).
ServerConfig ParseServerConfig(const std::string& yaml_text, const std::string& source = "<config>");
ServerConfig LoadServerConfigFile(const std::string& path);

// Sets one key from its text form (CLI flags, tests): "server.port", "8080". Lists take
// comma-separated items. Throws like ParseServerConfig.
void SetConfigValue(ServerConfig& cfg, std::string_view path, const std::string& value);
// The text form of one key (lists comma-joined).
std::string GetConfigValue(const ServerConfig& cfg, std::string_view path);

// Cross-field checks (ranges, enums, CIDR syntax); throws Error(kInvalidArgument).
void ValidateServerConfig(const ServerConfig& cfg);

// Every key as `section.key: value`, secrets (api keys) masked.
std::string EffectiveConfigString(const ServerConfig& cfg);

// "4GiB", "512 MiB", "1.5G", "1000000" -> bytes. Throws naming `what`.
int64_t ParseByteSize(std::string_view text, std::string_view what);

// Interpolates ${VAR} / ${VAR:-default}; `what` names the key in errors.
std::string InterpolateEnv(std::string_view text, std::string_view what);

// CLI11 glue: registers one string option per key (`--port 8080`, lists repeatable or
// comma-separated) into `app`; after app.parse, ApplyConfigFlags copies the given ones into cfg.
struct ConfigFlagValues {
  std::map<std::string, std::vector<std::string>> values;  // key path -> raw texts given
};
void RegisterConfigFlags(CLI::App& app, ConfigFlagValues& out);
void ApplyConfigFlags(const ConfigFlagValues& flags, ServerConfig& cfg);

}  // namespace tessera

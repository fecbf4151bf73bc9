// tessera tests: `tessera serve` configuration: YAML sections, ${VAR} interpolation, unknown keys
// and bad values named in errors, byte sizes, CLI flag mapping and the masked effective config.
#include "server/server_config.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace tessera {
namespace {

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// `c` with the flags of `args` (as `tessera serve` would take them) applied.
ServerConfig WithFlags(ServerConfig c, std::vector<std::string> args) {
  CLI::App app("test");
  ConfigFlagValues flags;
  RegisterConfigFlags(app, flags);
  args.insert(args.begin(), "prog");
  std::vector<char*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  ApplyConfigFlags(flags, c);
  return c;
}

TEST(ServerConfig, ParsesEverySection) {
  ServerConfig c = ParseServerConfig(R"(
model:
  path: /models/qwen3
  name: qwen3-test
  max_model_len: 8192
server:
  host: 0.0.0.0
  port: 9000
  threads: 4
  metrics_require_key: true
  log_requests: yes
  request_timeout_s: 30.5
  max_body_bytes: 2MiB
engine:
  max_num_seqs: 8
  kv_cache_memory: 4GiB
  scheduling_policy: priority
  enable_prefix_caching: false
diffusion:
  block_size: 32
  steps: 8
  policy: threshold
  threshold: 0.95
security:
  api_keys: [sk-one, sk-two]
  allow_cidrs:
    - 10.0.0.0/8
    - "::1/128"
limits:
  max_concurrent_requests: 4
  max_queue: 2
  requests_per_minute: 60
  tokens_per_minute: 1000
)");
  EXPECT_EQ(c.model.path, "/models/qwen3");
  EXPECT_EQ(c.model.name, "qwen3-test");
  EXPECT_EQ(c.model.max_model_len, 8192);
  EXPECT_EQ(c.server.host, "0.0.0.0");
  EXPECT_EQ(c.server.port, 9000);
  EXPECT_EQ(c.server.threads, 4);
  EXPECT_TRUE(c.server.metrics_require_key);
  EXPECT_TRUE(c.server.log_requests);
  EXPECT_DOUBLE_EQ(c.server.request_timeout_s, 30.5);
  EXPECT_EQ(c.server.max_body_bytes, 2 * 1024 * 1024);
  EXPECT_EQ(c.engine.max_num_seqs, 8);
  EXPECT_EQ(c.engine.kv_cache_memory, int64_t{4} * 1024 * 1024 * 1024);
  EXPECT_EQ(c.engine.scheduling_policy, "priority");
  EXPECT_FALSE(c.engine.enable_prefix_caching);
  EXPECT_EQ(c.diffusion.block_size, 32);
  EXPECT_EQ(c.diffusion.policy, "threshold");
  EXPECT_EQ(c.security.api_keys, (std::vector<std::string>{"sk-one", "sk-two"}));
  EXPECT_EQ(c.security.allow_cidrs, (std::vector<std::string>{"10.0.0.0/8", "::1/128"}));
  EXPECT_EQ(c.limits.max_queue, 2);
  EXPECT_DOUBLE_EQ(c.limits.tokens_per_minute, 1000);
  ValidateServerConfig(c);
}

TEST(ServerConfig, EmptyFileGivesDefaults) {
  ServerConfig c = ParseServerConfig("");
  EXPECT_EQ(c.server.port, 8000);
  EXPECT_EQ(c.engine.scheduling_policy, "fcfs");
  ValidateServerConfig(c);
}

TEST(ServerConfig, EnvInterpolation) {
  setenv("TESSERA_TEST_PORT", "7123", 1);
  setenv("TESSERA_TEST_KEY", "sk-secret", 1);
  setenv("TESSERA_TEST_EMPTY", "", 1);
  unsetenv("TESSERA_TEST_UNSET");
  ServerConfig c = ParseServerConfig(R"(
server:
  port: ${TESSERA_TEST_PORT}
  host: ${TESSERA_TEST_UNSET:-127.0.0.2}
  access_log: "/var/log/${TESSERA_TEST_EMPTY:-fallback}.log"
model:
  name: "lit$${NOT_A_VAR}"
security:
  api_keys: ["${TESSERA_TEST_KEY}"]
)");
  EXPECT_EQ(c.server.port, 7123);
  EXPECT_EQ(c.server.host, "127.0.0.2");
  EXPECT_EQ(c.server.access_log, "/var/log/fallback.log");  // :- also covers an empty value
  EXPECT_EQ(c.model.name, "lit${NOT_A_VAR}");
  EXPECT_EQ(c.security.api_keys, std::vector<std::string>{"sk-secret"});
  std::string err = ErrorOf([] { ParseServerConfig("server:\n  host: ${TESSERA_TEST_UNSET}\n"); });
  EXPECT_NE(err.find("TESSERA_TEST_UNSET"), std::string::npos) << err;
  EXPECT_NE(err.find("server.host"), std::string::npos) << err;
  err = ErrorOf([] { ParseServerConfig("server:\n  host: ${BROKEN\n"); });
  EXPECT_NE(err.find("unterminated"), std::string::npos) << err;
}

// An API key that comes out empty (`--api-key "$KEY"` or `api_keys: ["${KEY}"]` with KEY empty) was
// dropped, and the server then ran without keys while its operator had asked for one.
TEST(ServerConfig, AnEmptyApiKeyIsRefusedNotDropped) {
  setenv("TESSERA_TEST_EMPTY_KEY", "", 1);
  const std::vector<std::pair<std::string, ServerConfig>> cases = {
      {"flag ''", WithFlags({}, {"--api-key", ""})},
      {"flag '  '", WithFlags({}, {"--api-key", "  "})},
      {"flag beside a key", WithFlags({}, {"--api-key", "sk-one", "--api-key", ""})},
      {"yaml list item", ParseServerConfig("security:\n  api_keys: [\"${TESSERA_TEST_EMPTY_KEY}\"]\n")},
      {"yaml scalar", ParseServerConfig("security:\n  api_keys: \"${TESSERA_TEST_EMPTY_KEY}\"\n")},
  };
  for (const auto& one : cases) {
    const ServerConfig& c = one.second;  // a named reference: clang 14 cannot capture a structured binding
    const std::string err = ErrorOf([&] { ValidateServerConfig(c); });
    EXPECT_NE(err.find("security.api_keys"), std::string::npos) << one.first << " -> " << err;
    EXPECT_NE(err.find("empty key"), std::string::npos) << one.first << " -> " << err;
  }
  // No key at all (the option left out, or null in YAML) is a server without keys, as before.
  EXPECT_EQ(ErrorOf([] { ValidateServerConfig(ParseServerConfig("security:\n  api_keys:\n")); }), "<no error>");
  EXPECT_EQ(ErrorOf([] { ValidateServerConfig(WithFlags({}, {"--api-key", "sk-one"})); }), "<no error>");
  // An empty client network is refused the same way (it is not "every network").
  EXPECT_NE(ErrorOf([] { ValidateServerConfig(WithFlags({}, {"--allow-cidr", ""})); }).find("security.allow_cidrs"),
            std::string::npos);
}

TEST(ServerConfig, UnknownKeysAreNamed) {
  std::string err = ErrorOf([] { ParseServerConfig("server:\n  prot: 80\n"); });
  EXPECT_NE(err.find("'server.prot'"), std::string::npos) << err;
  err = ErrorOf([] { ParseServerConfig("servre:\n  port: 80\n"); });
  EXPECT_NE(err.find("'servre'"), std::string::npos) << err;
}

// A list, a mapping or nothing as a key is valid YAML; as<std::string> once threw a bare
// YAML::BadConversion for it, naming neither the file nor the key (fuzz/corpus/config/crash-complex-key).
TEST(ServerConfig, NonScalarKeysAreRefusedNamingWhere) {
  for (const char* yaml : {"? [a, b]\n: 1\n", "server:\n  ? {x: 1}\n  : 2\n", "? \n: 3\n",
                           "content_safety:\n  rules:\n    - ? [k]\n      : v\n"}) {
    SCOPED_TRACE(yaml);
    try {
      ParseServerConfig(yaml, "c.yaml");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("c.yaml: a key"), std::string::npos) << e.what();
    }
  }
}

TEST(ServerConfig, BadValuesAreNamed) {
  struct Bad {
    const char* yaml;
    const char* key;
  };
  for (const Bad& b : std::vector<Bad>{
           {"server:\n  port: eighty\n", "server.port"},
           {"server:\n  log_requests: maybe\n", "server.log_requests"},
           {"engine:\n  kv_cache_memory: 4 parsecs\n", "engine.kv_cache_memory"},
           {"server:\n  port: [1, 2]\n", "server.port"},
           {"security:\n  api_keys: {a: b}\n", "security.api_keys"},
           {"server:\n  request_timeout_s: fast\n", "server.request_timeout_s"},
           {"model: [1]\n", "model"},
           {"server: {port: 1\n", "YAML"},
       }) {
    std::string err = ErrorOf([&] { ParseServerConfig(b.yaml); });
    EXPECT_NE(err.find(b.key), std::string::npos) << b.yaml << " -> " << err;
  }
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"server.port", "70000"},
           {"engine.scheduling_policy", "random"},
           {"diffusion.policy", "greedy"},
           {"diffusion.threshold", "1.5"},
           {"security.allow_cidrs", "10.0.0.0/33"},
           {"limits.max_concurrent_requests", "0"},
           {"server.threads", "0"},
       }) {
    ServerConfig c;
    SetConfigValue(c, key, value);
    std::string err = ErrorOf([&] { ValidateServerConfig(c); });
    EXPECT_NE(err.find(key), std::string::npos) << key << "=" << value << " -> " << err;
  }
}

// Each key's range or choices is in the key table (server_config.cpp), and the message says it.
TEST(ServerConfig, ValuesOutsideAKeysRangeOrChoicesAreRefusedSayingWhich) {
  for (const auto& [key, value, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"model.tensor_parallel_size", "65", "must be in 1..64"},
           {"model.compute_threads", "-1", "must be in 0..1024"},
           {"server.max_body_bytes", "1000", "must be >= 1024"},
           {"diffusion.mask_token_id", "-2", "must be >= -1"},
           {"engine.gpu_memory_utilization", "0", "must be in (0, 1]"},
           {"limits.tokens_per_minute", "-5", "must be >= 0"},
           {"model.dtype", "int3", "'int3' is not one of: auto, bf16, bfloat16, f16, float16, f32, float32"},
           {"diffusion.policy", "greedy", "is not one of: static, threshold, editing"},
       }) {
    ServerConfig c;
    SetConfigValue(c, key, value);
    const std::string err = ErrorOf([&] { ValidateServerConfig(c); });
    EXPECT_NE(err.find("'" + key + "'"), std::string::npos) << key << "=" << value << " -> " << err;
    EXPECT_NE(err.find(says), std::string::npos) << key << "=" << value << " -> " << err;
  }
  // The ends of a range and the empty choice of diffusion.policy are accepted.
  ServerConfig c;
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"model.tensor_parallel_size", "64"},
                                                        {"server.port", "0"},
                                                        {"engine.gpu_memory_utilization", "1"},
                                                        {"server.max_body_bytes", "1024"},
                                                        {"diffusion.policy", ""},
                                                        {"diffusion.mask_token_id", "-1"}})
    SetConfigValue(c, key, value);
  EXPECT_NO_THROW(ValidateServerConfig(c));
}

TEST(ServerConfig, ByteSizes) {
  EXPECT_EQ(ParseByteSize("4GiB", "k"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("512 MiB", "k"), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("1.5G", "k"), 1500000000);
  EXPECT_EQ(ParseByteSize("1000", "k"), 1000);
  EXPECT_EQ(ParseByteSize("2kb", "k"), 2000);
  EXPECT_THROW(ParseByteSize("", "k"), Error);
  EXPECT_THROW(ParseByteSize("GiB", "k"), Error);
  EXPECT_THROW(ParseByteSize("-1", "k"), Error);
  EXPECT_THROW(ParseByteSize("1e30", "k"), Error);
}

TEST(ServerConfig, EffectiveConfigMasksSecrets) {
  ServerConfig c;
  c.security.api_keys = {"sk-very-secret-1", "sk-very-secret-2"};
  c.server.port = 1234;
  std::string s = EffectiveConfigString(c);
  EXPECT_EQ(s.find("sk-very-secret"), std::string::npos) << s;
  EXPECT_NE(s.find("security.api_keys: ***,***"), std::string::npos) << s;
  EXPECT_NE(s.find("server.port: 1234"), std::string::npos) << s;
  // Every key appears exactly once.
  for (const auto& k : ConfigKeys())
    EXPECT_NE(s.find(std::string(k.path) + ": "), std::string::npos) << k.path;
}

TEST(ServerConfig, FlagTableCoversEveryKeyUniquely) {
  std::set<std::string> flags, paths;
  for (const auto& k : ConfigKeys()) {
    EXPECT_TRUE(flags.insert(k.flag).second) << k.flag;
    EXPECT_TRUE(paths.insert(k.path).second) << k.path;
    EXPECT_EQ(std::string(k.flag).rfind("--", 0), 0u) << k.flag;
  }
  EXPECT_GE(ConfigKeys().size(), 30u);
}

TEST(ServerConfig, CliFlagsOverrideYaml) {
  ServerConfig c =
      WithFlags(ParseServerConfig("server:\n  port: 9000\n  log_requests: true\nsecurity:\n  api_keys: [a]\n"),
                {"--port", "9100", "--no-log-requests", "--api-key", "k1", "--api-key", "k2,k3", "--kv-cache-memory",
                 "1GiB", "--enable-chunked-prefill"});
  EXPECT_EQ(c.server.port, 9100);
  EXPECT_FALSE(c.server.log_requests);
  EXPECT_EQ(c.security.api_keys, (std::vector<std::string>{"k1", "k2", "k3"}));
  EXPECT_EQ(c.engine.kv_cache_memory, int64_t{1} << 30);
  EXPECT_TRUE(c.engine.enable_chunked_prefill);
  EXPECT_EQ(GetConfigValue(c, "server.port"), "9100");
}

// engine.num_state_snapshots (hybrid models' prefix-cache state snapshots): YAML key and flag, 0 by
// default (the engine's max_num_seqs / 4), a bad value named by its key.
TEST(ServerConfig, NumStateSnapshotsKeyAndFlag) {
  EXPECT_EQ(ServerConfig{}.engine.num_state_snapshots, 0);
  ServerConfig c = ParseServerConfig("engine:\n  num_state_snapshots: 96\n");
  EXPECT_EQ(c.engine.num_state_snapshots, 96);
  ValidateServerConfig(c);
  c = WithFlags(c, {"--num-state-snapshots", "128"});  // the flag overrides the file
  EXPECT_EQ(c.engine.num_state_snapshots, 128);
  EXPECT_NE(EffectiveConfigString(c).find("engine.num_state_snapshots: 128\n"), std::string::npos);
  // A negative flag value is taken as a value, then refused by validation, naming the key.
  c = WithFlags(c, {"--num-state-snapshots", "-1"});
  EXPECT_EQ(c.engine.num_state_snapshots, -1);
  std::string err = ErrorOf([&] { ValidateServerConfig(c); });
  EXPECT_NE(err.find("'engine.num_state_snapshots'"), std::string::npos) << err;
  EXPECT_NE(err.find(">= 0"), std::string::npos) << err;
  err = ErrorOf([&] { WithFlags(c, {"--num-state-snapshots", "lots"}); });
  EXPECT_NE(err.find("'engine.num_state_snapshots'"), std::string::npos) << err;

  for (const char* yaml : {"engine:\n  num_state_snapshots: many\n", "engine:\n  num_state_snapshots: 2.5\n"}) {
    err = ErrorOf([&] { ParseServerConfig(yaml); });
    EXPECT_NE(err.find("'engine.num_state_snapshots'"), std::string::npos) << yaml << " -> " << err;
  }
  SetConfigValue(c, "engine.num_state_snapshots", "0");
  ValidateServerConfig(c);
}

// model.kv_cache_dtype (--kv-cache-dtype): f32 by default, bf16 with a cuda device; another name, or
// bf16 on the CPU (whose backend keeps f32), is refused by validation naming the key, before serve
// binds its port or loads the model.
TEST(ServerConfig, KvCacheDTypeKeyAndFlag) {
  EXPECT_EQ(ServerConfig{}.model.kv_cache_dtype, "f32");
  ServerConfig c = ParseServerConfig("model:\n  device: cuda\n  kv_cache_dtype: bf16\n");
  EXPECT_EQ(c.model.kv_cache_dtype, "bf16");
  ValidateServerConfig(c);
  EXPECT_NE(EffectiveConfigString(c).find("model.kv_cache_dtype: bf16\n"), std::string::npos);
  c = WithFlags(c, {"--kv-cache-dtype", "f32", "--device", "cuda:1"});  // the flag overrides the file
  EXPECT_EQ(c.model.kv_cache_dtype, "f32");
  ValidateServerConfig(c);
  c = WithFlags(c, {"--kv-cache-dtype", "bf16"});
  ValidateServerConfig(c);  // cuda:1
  for (const char* bad : {"fp8", "", "BF16"}) {
    ServerConfig b = c;
    SetConfigValue(b, "model.kv_cache_dtype", bad);
    std::string err = ErrorOf([&] { ValidateServerConfig(b); });
    EXPECT_NE(err.find("'model.kv_cache_dtype'"), std::string::npos) << bad << " -> " << err;
    EXPECT_NE(err.find("f32, bf16"), std::string::npos) << err;
  }
  ServerConfig cpu = WithFlags(ServerConfig{}, {"--kv-cache-dtype", "bf16"});  // device cpu, the default
  std::string err = ErrorOf([&] { ValidateServerConfig(cpu); });
  EXPECT_NE(err.find("'model.kv_cache_dtype'"), std::string::npos) << err;
  EXPECT_NE(err.find("--device cuda"), std::string::npos) << err;
  err = ErrorOf([] { ParseServerConfig("model:\n  kv_cache_dtype: [bf16]\n"); });
  EXPECT_NE(err.find("'model.kv_cache_dtype'"), std::string::npos) << err;
}

// model.activation_precision (--activation-precision): f32 by default, or bf16 with a cuda device;
// bf16 with the CPU device, or another name, is refused by validation naming the key.
TEST(ServerConfig, ActivationPrecisionKeyAndFlag) {
  EXPECT_EQ(ServerConfig{}.model.activation_precision, "f32");
  ServerConfig c = ParseServerConfig("model:\n  device: cuda\n  activation_precision: f32\n");
  EXPECT_EQ(c.model.activation_precision, "f32");
  ValidateServerConfig(c);
  EXPECT_NE(EffectiveConfigString(c).find("model.activation_precision: f32\n"), std::string::npos);
  c = WithFlags(c, {"--activation-precision", "bf16"});
  EXPECT_EQ(c.model.activation_precision, "bf16");
  ValidateServerConfig(c);
  for (const char* bad : {"fp8", "", "BF16", "auto"}) {
    ServerConfig b = c;
    SetConfigValue(b, "model.activation_precision", bad);
    std::string err = ErrorOf([&] { ValidateServerConfig(b); });
    EXPECT_NE(err.find("'model.activation_precision'"), std::string::npos) << bad << " -> " << err;
  }
  ServerConfig cpu = WithFlags(ServerConfig{}, {"--activation-precision", "bf16"});
  std::string err = ErrorOf([&] { ValidateServerConfig(cpu); });
  EXPECT_NE(err.find("'model.activation_precision'"), std::string::npos) << err;
  EXPECT_NE(err.find("--device cuda"), std::string::npos) << err;
  ValidateServerConfig(WithFlags(ServerConfig{}, {"--activation-precision", "f32"}));  // f32 is the CPU's
}

// server.max_connections / max_connections_per_client: 1024 and 0 (off) by default, 0 = unlimited, set by
// YAML or flag, a negative value refused naming the key.
TEST(ServerConfig, ConnectionLimitKeysAndFlags) {
  EXPECT_EQ(ServerConfig{}.server.max_connections, 1024);
  EXPECT_EQ(ServerConfig{}.server.max_connections_per_client, 0);
  ServerConfig c = ParseServerConfig("server:\n  max_connections: 0\n  max_connections_per_client: 8\n");
  EXPECT_EQ(c.server.max_connections, 0);
  EXPECT_EQ(c.server.max_connections_per_client, 8);
  ValidateServerConfig(c);
  c = WithFlags(c, {"--max-connections", "4096", "--max-connections-per-client", "0"});
  EXPECT_EQ(c.server.max_connections, 4096);
  EXPECT_EQ(c.server.max_connections_per_client, 0);
  ValidateServerConfig(c);
  EXPECT_NE(EffectiveConfigString(c).find("server.max_connections: 4096\n"), std::string::npos);
  for (const char* key : {"server.max_connections", "server.max_connections_per_client"}) {
    ServerConfig b;
    SetConfigValue(b, key, "-1");
    std::string err = ErrorOf([&] { ValidateServerConfig(b); });
    EXPECT_NE(err.find(std::string("'") + key + "'"), std::string::npos) << err;
  }
}

// server.health_port: 0 (off) by default, set by YAML or --health-port, refused (naming the key) when
// it is the main port or out of range.
TEST(ServerConfig, HealthPortKeyAndFlag) {
  EXPECT_EQ(ServerConfig{}.server.health_port, 0);
  ServerConfig c = ParseServerConfig("server:\n  port: 8000\n  health_port: 8001\n");
  EXPECT_EQ(c.server.health_port, 8001);
  ValidateServerConfig(c);
  c = WithFlags(c, {"--health-port", "9000"});
  EXPECT_EQ(c.server.health_port, 9000);
  ValidateServerConfig(c);
  EXPECT_NE(EffectiveConfigString(c).find("server.health_port: 9000\n"), std::string::npos);
  for (const char* v : {"8000", "-1", "65536"}) {
    ServerConfig b;
    SetConfigValue(b, "server.health_port", v);
    std::string err = ErrorOf([&] { ValidateServerConfig(b); });
    EXPECT_NE(err.find("'server.health_port'"), std::string::npos) << v << ": " << err;
  }
}

TEST(ServerConfig, LoadsFile) {
  std::string dir = testing::ScratchDir("server_config");
  testing::WriteFile(dir + "/c.yaml", "model:\n  name: from-file\n");
  EXPECT_EQ(LoadServerConfigFile(dir + "/c.yaml").model.name, "from-file");
  std::string err = ErrorOf([&] { LoadServerConfigFile(dir + "/missing.yaml"); });
  EXPECT_NE(err.find("missing.yaml"), std::string::npos);
}

}  // namespace
}  // namespace tessera

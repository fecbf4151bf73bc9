// tessera fuzz: the YAML server config loader (src/server/server_config.cpp): yaml-cpp's parse,
// the section / key table, typed values, byte sizes, ${VAR} interpolation, content-safety rules,
// then ValidateServerConfig and the printed effective configuration, as `tessera serve --config`
// runs them. The contract (server_config.h): a bad file throws Error(kInvalidArgument) naming the
// key path, which the CLI prints as one line and exits 2. Any other exception (a yaml-cpp
// conversion error, std::out_of_range...) escapes here and is a finding: the user gets a message
// that names neither the file nor the key.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "server/server_config.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // ${VAR} interpolation reads the environment: give the seeds' variables fixed values.
  setenv("TESSERA_FUZZ_PORT", "8080", 1);
  setenv("TESSERA_FUZZ_KEY", "sk-fuzz", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tessera::ServerConfig cfg = tessera::ParseServerConfig(text, "fuzz.yaml");
    tessera::ValidateServerConfig(cfg);
    (void)tessera::EffectiveConfigString(cfg);
    // Every key's text form reads back into a config (what --print-config then --config relies on).
    tessera::ServerConfig copy;
    for (const tessera::ConfigKeyInfo& k : tessera::ConfigKeys())
      tessera::SetConfigValue(copy, k.path, tessera::GetConfigValue(cfg, k.path));
  } catch (const tessera::Error& e) {
    if (e.kind() != tessera::ErrorKind::kInvalidArgument) throw;
  }
  return 0;
}

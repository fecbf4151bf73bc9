// tessera tokenizer internals: HF `normalizer` section (NFC/NFD/NFKC/NFKD, Lowercase, Replace,
// Prepend, Strip, Sequence). Offsets are not tracked: tessera only needs ids.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string& s) const = 0;  // s is valid UTF-8 and stays so
};

// nullptr for a JSON null (no normalizer). Throws Error(kUnsupported) for unknown types.
std::unique_ptr<Normalizer> MakeNormalizer(const nlohmann::json& j);

}  // namespace tessera::tok

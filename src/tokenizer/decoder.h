// tessera tokenizer internals: HF `decoder` section (ByteLevel, ByteFallback, Fuse, Strip, Replace,
// Metaspace, Sequence) and `post_processor` section (ByteLevel, TemplateProcessing,
// BertProcessing, RobertaProcessing, Sequence) for single sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Transforms the token strings; the decoded text is their concatenation.
  virtual void Decode(std::vector<std::string>* tokens) const = 0;
  // The same for tokens taken out of context (Tokenizer::TokenBytes): bytes stay as they are (no
  // U+FFFD for an incomplete UTF-8 sequence) and nothing is stripped at the start of the text
  // (Metaspace's leading space, Strip), since the tokens are not at the start.
  virtual void DecodeRaw(std::vector<std::string>* tokens) const { Decode(tokens); }
};
// nullptr for JSON null (tokens are then joined with spaces, as HF does).
std::unique_ptr<Decoder> MakeDecoder(const nlohmann::json& j);

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void Process(std::vector<int32_t>* ids) const = 0;  // add_special_tokens=true only
  virtual bool AddsTokens() const = 0;  // false for ByteLevel (offsets only)
};
std::unique_ptr<PostProcessor> MakePostProcessor(const nlohmann::json& j);

}  // namespace tessera::tok

// tessera server: the seam between the HTTP layer and tokenization. PromptBuilder turns chat
// messages (+ tools, template kwargs) or a raw prompt into token ids and ids back into text; the
// server's tests fake it, TokenizerPromptBuilder is the real one (Tokenizer + ChatTemplate).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_format.h"

namespace tessera {

class Tokenizer;

class PromptBuilder {
 public:
  virtual ~PromptBuilder() = default;
  // messages: the normalized OpenAI messages (content strings, tool-call arguments objects);
  // tools: the OpenAI tools array or null; kwargs: extra template variables (enable_thinking...).
  // Renders with add_generation_prompt and tokenizes. Throws Error(kInvalidArgument) for input
  // the template rejects (answered as 400).
  virtual std::vector<int32_t> BuildChat(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& kwargs) = 0;
  // A whole prompt (/v1/completions): with the tokenizer's special tokens (BOS...), as vLLM.
  virtual std::vector<int32_t> Encode(const std::string& text) = 0;
  // Text that continues a prompt already built (the forced opening of a tool call after BuildChat):
  // no special tokens added, or a BOS would land in the middle of the prompt.
  virtual std::vector<int32_t> EncodeContinuation(const std::string& text) = 0;
  virtual std::string Decode(const std::vector<int32_t>& ids) = 0;
  // One token's text for logprobs (its bytes may be a partial UTF-8 sequence).
  virtual std::string TokenText(int32_t id) { return Decode({id}); }
  // Whether the model writes Qwen3-Coder XML tool calls (<function=NAME><parameter=P>) rather than
  // Qwen-style JSON; decides the forced opening of a reply for tool_choice required / named.
  virtual bool UsesXmlToolCalls() const { return false; }
  // The model family's output conventions (chat_format.h): its tool-call and thinking syntax.
  virtual ChatFormat chat_format() const { return UsesXmlToolCalls() ? ChatFormat::kQwen3Coder : ChatFormat::kHermes; }
};

// The real builder. Thread-safe as long as Tokenizer::Encode/Decode and ChatTemplate::Render are
// (both are const). template_source "" = the tokenizer's default chat template.
class TokenizerPromptBuilder : public PromptBuilder {
 public:
  TokenizerPromptBuilder(const Tokenizer& tokenizer, const std::string& template_source = "");
  ~TokenizerPromptBuilder() override;
  std::vector<int32_t> BuildChat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 const nlohmann::ordered_json& kwargs) override;
  std::vector<int32_t> Encode(const std::string& text) override;
  std::vector<int32_t> EncodeContinuation(const std::string& text) override;
  std::string Decode(const std::vector<int32_t>& ids) override;
  std::string TokenText(int32_t id) override;
  bool UsesXmlToolCalls() const override;
  ChatFormat chat_format() const override;

 private:
  struct Impl;
  const Tokenizer& tokenizer_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera

// tessera server: PromptBuilder over the tokenizer and the chat-template engine. The template
// header is included only when present, so this file builds while that module is being written
// (BuildChat then fails with kUnsupported).
#include "server/prompt_builder.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

#if __has_include("tokenizer/template/chat_template.h")
#include "tokenizer/template/chat_template.h"
#define TESSERA_HAVE_CHAT_TEMPLATE 1
#endif

namespace tessera {

struct TokenizerPromptBuilder::Impl {
#ifdef TESSERA_HAVE_CHAT_TEMPLATE
  std::unique_ptr<ChatTemplate> tmpl;
#endif
  std::string bos, eos;
  ChatFormat format = ChatFormat::kHermes;
};

TokenizerPromptBuilder::TokenizerPromptBuilder(const Tokenizer& tokenizer, const std::string& template_source)
    : tokenizer_(tokenizer), impl_(std::make_unique<Impl>()) {
  impl_->bos = tokenizer.config().bos_token;
  impl_->eos = tokenizer.config().eos_token;
  std::string source = template_source.empty() ? tokenizer.config().chat_template : template_source;
  impl_->format = DetectChatFormat(source);
#ifdef TESSERA_HAVE_CHAT_TEMPLATE
  if (!source.empty()) impl_->tmpl = std::make_unique<ChatTemplate>(source);
#endif
}

TokenizerPromptBuilder::~TokenizerPromptBuilder() = default;

bool TokenizerPromptBuilder::UsesXmlToolCalls() const { return impl_->format == ChatFormat::kQwen3Coder; }
ChatFormat TokenizerPromptBuilder::chat_format() const { return impl_->format; }

std::vector<int32_t> TokenizerPromptBuilder::BuildChat(const nlohmann::ordered_json& messages,
                                                       const nlohmann::ordered_json& tools,
                                                       const nlohmann::ordered_json& kwargs) {
#ifdef TESSERA_HAVE_CHAT_TEMPLATE
  if (!impl_->tmpl) Fail(ErrorKind::kInvalidArgument, "this model has no chat template; use /v1/completions");
  ChatTemplateInputs in;
  in.messages = messages;
  in.tools = tools;
  in.add_generation_prompt = true;
  in.extra_kwargs = kwargs;
  in.bos_token = impl_->bos;
  in.eos_token = impl_->eos;
  std::string text = impl_->tmpl->Render(in);
  // The template writes the special tokens itself (bos included), so none are added here.
  return tokenizer_.Encode(text, /*add_special_tokens=*/false);
#else
  (void)messages;
  (void)tools;
  (void)kwargs;
  Fail(ErrorKind::kUnsupported, "chat templates are not available in this build");
#endif
}

std::vector<int32_t> TokenizerPromptBuilder::Encode(const std::string& text) {
  return tokenizer_.Encode(text, /*add_special_tokens=*/true);
}

std::vector<int32_t> TokenizerPromptBuilder::EncodeContinuation(const std::string& text) {
  return tokenizer_.Encode(text, /*add_special_tokens=*/false);
}

// A model's vocabulary is often padded beyond the tokenizer's (the fixtures: 512 rows, 264 tokens);
// such ids have no text, as the engine's detokenizer treats them, and must not throw here (an
// exception on this path would end the process).
std::string TokenizerPromptBuilder::Decode(const std::vector<int32_t>& ids) {
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < tokenizer_.vocab_size()) known.push_back(id);
  return tokenizer_.Decode(known, /*skip_special_tokens=*/false);
}

std::string TokenizerPromptBuilder::TokenText(int32_t id) { return Decode({id}); }

}  // namespace tessera

// tessera tokenizer: ChatTemplate: builds apply_chat_template's context and renders.
#include "tokenizer/template/chat_template.h"

#include "core/error.h"
#include "tokenizer/template/jinja.h"

namespace tessera {

ChatTemplate::ChatTemplate(const std::string& source) : tpl_(std::make_unique<jinja::Template>(source)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::Render(const ChatTemplateInputs& in) const {
  // transformers passes messages, tools, documents (omitted here: none), add_generation_prompt and
  // the special tokens, then the caller's extra kwargs, which may override any of them.
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = in.messages.is_null() ? nlohmann::ordered_json::array() : in.messages;
  ctx["tools"] = in.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  ctx["bos_token"] = in.bos_token;
  ctx["eos_token"] = in.eos_token;
  if (!in.extra_kwargs.is_null()) {
    if (!in.extra_kwargs.is_object())
      Fail(ErrorKind::kInvalidArgument, "chat template kwargs must be a JSON object, got {}", in.extra_kwargs.type_name());
    for (const auto& [k, v] : in.extra_kwargs.items()) ctx[k] = v;
  }
  return tpl_->Render(ctx);
}

}  // namespace tessera

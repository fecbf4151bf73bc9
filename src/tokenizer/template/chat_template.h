// tessera tokenizer: Hugging Face chat templates (tokenizer_config.json "chat_template") rendered
// the way transformers' apply_chat_template does, on our own Jinja2 engine (jinja.h).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace tessera {

namespace jinja {
class Template;
}

struct ChatTemplateInputs {
  nlohmann::ordered_json messages;      // OpenAI-style list of {role, content, ...}
  nlohmann::ordered_json tools;         // null or list
  bool add_generation_prompt = false;
  nlohmann::ordered_json extra_kwargs;  // object, e.g. {"enable_thinking": false}; merged into the context
  std::string bos_token, eos_token;     // from tokenizer_config
};

class ChatTemplate {
 public:
  // Parses; throws tessera::Error (ErrorKind::kInvalidArgument) with line/column on a syntax error.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  // Throws tessera::Error on raise_exception() (message passed through) or evaluation errors.
  std::string Render(const ChatTemplateInputs& in) const;

 private:
  std::unique_ptr<jinja::Template> tpl_;
};

}  // namespace tessera

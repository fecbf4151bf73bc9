// tessera jinja: Template: parse at construction, render with a fresh scope each time.
#include "tokenizer/template/jinja.h"

#include "core/error.h"

namespace tessera::jinja {

Template::Template(const std::string& source, RenderLimits limits)
    : body_(std::make_shared<const Body>(Parse(Tokenize(source)))), limits_(limits) {}

std::string Template::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object() && !context.is_null())
    Fail(ErrorKind::kInvalidArgument, "template context must be a JSON object, got {}", context.type_name());
  auto root = std::make_shared<Frame>();
  InstallGlobals(*root);
  if (context.is_object())
    for (const auto& [k, v] : context.items()) root->Set(k, Value::FromJson(v));
  Interpreter interp(limits_, root);
  return interp.Render(*body_);
}

}  // namespace tessera::jinja

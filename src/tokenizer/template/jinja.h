// tessera jinja: a Jinja2 template engine for Hugging Face chat templates: parse once, render many
// times with a JSON context. Configured as transformers does (trim_blocks, lstrip_blocks,
// loopcontrols, tojson/raise_exception/strftime_now).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "tokenizer/template/interpreter.h"

namespace tessera::jinja {

class Template {
 public:
  // Throws tessera::Error (kInvalidArgument) naming line and column on a syntax error.
  explicit Template(const std::string& source, RenderLimits limits = {});
  // `context` must be a JSON object; its keys become template variables (plus the globals).
  // Throws tessera::Error on evaluation errors or raise_exception().
  std::string Render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const Body> body_;
  RenderLimits limits_;
};

}  // namespace tessera::jinja

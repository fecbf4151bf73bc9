// tessera server: the structured-output fields of a request (docs/STRUCTURED_OUTPUT.md, "API"):
// OpenAI's `response_format` (text, json_object, json_schema), vLLM's `structured_outputs`
// extension (json, regex, choice, grammar, json_object), and `strict` function tools (a forced
// call, or under tool_choice auto each call the model opens). They become one StructuredConstraint;
// compiling it (and so checking the schema) is the prompt threads' work (http_session_generation.cpp).
#include <fmt/format.h>

#include "server/openai_protocol.h"

namespace tessera {
namespace {

using grammar::GrammarFormat;

[[noreturn]] void Bad(const std::string& param, const std::string& message) { throw InvalidRequest(message, param); }

const ojson* Field(const ojson& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// A schema given as an object (or, for vLLM's `json`, as JSON text) -> its text.
std::string SchemaText(const ojson& v, const std::string& param, bool text_allowed) {
  if (v.is_object() || v.is_boolean()) return DumpJson(v);
  if (text_allowed && v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    if (JsonNestingExceeds(t, kMaxJsonDepth))
      Bad(param, fmt::format("'{}' is nested deeper than {} levels", param, kMaxJsonDepth));
    ojson parsed = ojson::parse(t, nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
      Bad(param, fmt::format("'{}' must be a JSON Schema (an object, or its JSON text)", param));
    return DumpJson(parsed);
  }
  Bad(param, fmt::format("'{}' must be a JSON Schema object", param));
}

std::optional<StructuredConstraint> ParseResponseFormat(const ojson& rf) {
  if (!rf.is_object()) Bad("response_format", "'response_format' must be an object");
  const ojson* type = Field(rf, "type");
  if (type == nullptr || !type->is_string())
    Bad("response_format.type", "'response_format.type' must be text, json_object or json_schema");
  const std::string t = type->get<std::string>();
  auto only = [&](std::initializer_list<const char*> keys) {
    for (const auto& [k, v] : rf.items()) {
      bool ok = false;
      for (const char* key : keys) ok = ok || k == key;
      if (!ok && !v.is_null())
        Bad("response_format." + k, fmt::format("unknown field 'response_format.{}' for type '{}'", k, t));
    }
  };
  if (t == "text") {
    only({"type"});
    return std::nullopt;
  }
  StructuredConstraint c;
  c.param = "response_format";
  if (t == "json_object") {
    only({"type"});
    c.format = GrammarFormat::kJsonObject;
    return c;
  }
  if (t != "json_schema")
    Bad("response_format.type",
        fmt::format("'response_format.type' must be text, json_object or json_schema, got '{}'", t));
  only({"type", "json_schema"});
  const ojson* js = Field(rf, "json_schema");
  if (js == nullptr || !js->is_object())
    Bad("response_format.json_schema", "'response_format.json_schema' must be an object with 'name' and 'schema'");
  for (const auto& [k, v] : js->items())
    if (k != "name" && k != "schema" && k != "strict" && k != "description" && !v.is_null())
      Bad("response_format.json_schema." + k, fmt::format("unknown field 'response_format.json_schema.{}'", k));
  const ojson* name = Field(*js, "name");
  bool name_ok = name != nullptr && name->is_string() && !name->get_ref<const std::string&>().empty() &&
                 name->get_ref<const std::string&>().size() <= 64;
  if (name_ok)
    for (char ch : name->get_ref<const std::string&>())
      name_ok = name_ok && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                            ch == '_' || ch == '-');
  if (!name_ok)
    Bad("response_format.json_schema.name",
        "'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'");
  if (const ojson* d = Field(*js, "description"); d != nullptr && !d->is_string())
    Bad("response_format.json_schema.description", "'response_format.json_schema.description' must be a string");
  if (const ojson* st = Field(*js, "strict"); st != nullptr && !st->is_boolean())
    Bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
  const ojson* schema = Field(*js, "schema");
  if (schema == nullptr) Bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
  // strict false is enforced as well: the output always validates (vLLM does the same).
  c.format = GrammarFormat::kJson;
  c.text = SchemaText(*schema, "response_format.json_schema.schema", false);
  c.param = "response_format.json_schema.schema";
  return c;
}

StructuredConstraint ParseStructuredOutputs(const ojson& so) {
  if (!so.is_object()) Bad("structured_outputs", "'structured_outputs' must be an object");
  StructuredConstraint c;
  int kinds = 0;
  for (const auto& [k, v] : so.items()) {
    if (v.is_null()) continue;
    const std::string param = "structured_outputs." + k;
    if (k == "json") {
      c.format = GrammarFormat::kJson;
      c.text = SchemaText(v, param, true);
    } else if (k == "regex" || k == "grammar") {
      if (!v.is_string() || v.get_ref<const std::string&>().empty())
        Bad(param, fmt::format("'{}' must be a non-empty string", param));
      c.format = k == "regex" ? GrammarFormat::kRegex : GrammarFormat::kGrammar;
      c.text = v.get<std::string>();
    } else if (k == "choice") {
      if (!v.is_array() || v.empty()) Bad(param, "'structured_outputs.choice' must be a non-empty array of strings");
      for (const auto& x : v)
        if (!x.is_string()) Bad(param, "'structured_outputs.choice' must be a non-empty array of strings");
      c.format = GrammarFormat::kChoice;
      c.text = DumpJson(v);
    } else if (k == "json_object") {
      if (!v.is_boolean()) Bad(param, "'structured_outputs.json_object' must be a boolean");
      if (!v.get<bool>()) continue;
      c.format = GrammarFormat::kJsonObject;
    } else if (k == "whitespace_pattern" || k == "structural_tag" || k == "disable_any_whitespace" ||
               k == "disable_additional_properties" || k == "disable_fallback" || k == "backend") {
      Bad(param, fmt::format("'{}' is not supported (tessera supports json, regex, choice, grammar and json_object)",
                             param));
    } else {
      Bad(param, fmt::format("unknown field '{}' (expected one of json, regex, choice, grammar, json_object)", param));
    }
    c.param = param;
    ++kinds;
  }
  if (kinds != 1)
    Bad("structured_outputs",
        "'structured_outputs' must set exactly one of json, regex, choice, grammar or json_object");
  return c;
}

bool IsStrict(const ojson& tool) {
  const ojson& f = tool["function"];
  auto it = f.find("strict");
  return it != f.end() && it->is_boolean() && it->get<bool>();
}

// Rewrites the local $refs of tool `i`'s parameters schema into the combined schema's $defs:
// "#" -> its root ("#/$defs/<p>root"), "#/$defs/X" and "#/definitions/X" -> "#/$defs/<p>X".
void RewriteRefs(ojson& v, const std::string& prefix) {
  if (v.is_array()) {
    for (auto& x : v) RewriteRefs(x, prefix);
    return;
  }
  if (!v.is_object()) return;
  for (auto& [k, x] : v.items()) {
    if (k == "$ref" && x.is_string()) {
      std::string ref = x.get<std::string>();
      if (ref == "#") x = "#/$defs/" + prefix + "root";
      else if (ref.rfind("#/$defs/", 0) == 0) x = "#/$defs/" + prefix + ref.substr(8);
      else if (ref.rfind("#/definitions/", 0) == 0) x = "#/$defs/" + prefix + ref.substr(14);
      continue;
    }
    RewriteRefs(x, prefix);
  }
}

}  // namespace

void ParseStructuredOutput(const ojson& body, ParsedRequest& r) {
  std::optional<StructuredConstraint> c;
  if (const ojson* rf = Field(body, "response_format")) c = ParseResponseFormat(*rf);
  if (const ojson* so = Field(body, "structured_outputs")) {
    if (c) Bad("structured_outputs", "'structured_outputs' cannot be combined with a 'response_format' other than text");
    c = ParseStructuredOutputs(*so);
  }
  r.constraint = std::move(c);
}

void ParseStrictToolCall(ParsedRequest& r) {
  if (!r.ParseTools()) return;
  const bool lazy = r.tool_choice == ToolChoice::kAuto;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const ojson& f = r.tools[i]["function"];
    if (auto it = f.find("strict"); it != f.end() && !it->is_null() && !it->is_boolean())
      Bad(fmt::format("tools[{}].function.strict", i), fmt::format("'tools[{}].function.strict' must be a boolean", i));
  }
  // The tools the call may name: the named one, or all of them.
  std::vector<size_t> callable;
  bool any_strict = false;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    if (r.tool_choice == ToolChoice::kNamed && r.tools[i]["function"]["name"] != r.tool_choice_name) continue;
    callable.push_back(i);
    any_strict = any_strict || IsStrict(r.tools[i]);
  }
  if (!any_strict) return;
  if (r.constraint && lazy)
    Bad(r.constraint->param.substr(0, r.constraint->param.find('.')),
        "structured output cannot be combined with strict tools under tool_choice auto (the reply would be "
        "constrained twice: as a whole, and in each tool call); set the tools' 'strict' false or force the call");
  if (r.constraint)
    Bad(r.constraint->param.substr(0, r.constraint->param.find('.')),
        "structured output cannot be combined with a forced call of a strict tool (the call's arguments are "
        "constrained to the tool's schema)");
  // {"name": <const>, "arguments": <the tool's parameters>} for each callable tool (a tool that is
  // not strict takes any object), one of them; every parameters schema's definitions move to the
  // root under a prefix of its own, so that their local $refs still resolve. Under auto every tool is
  // callable: a mixed list constrains every call's name to the tools' names and the arguments of the
  // strict tools only (a call of a tool without strict takes any object, as under required).
  ojson defs = ojson::object(), calls = ojson::array();
  for (size_t i : callable) {
    const ojson& f = r.tools[i]["function"];
    ojson params = ojson{{"type", "object"}};
    if (IsStrict(r.tools[i]) && f.contains("parameters") && f["parameters"].is_object()) params = f["parameters"];
    params.erase("$id");  // identifies the root schema only; below the root it is refused
    params.erase("$schema");
    const std::string prefix = fmt::format("tool{}_", i);
    RewriteRefs(params, prefix);
    for (const char* key : {"$defs", "definitions"})
      if (params.contains(key)) {
        if (!params[key].is_object())
          Bad(fmt::format("tools[{}].function.parameters.{}", i, key),
              fmt::format("'tools[{}].function.parameters.{}' must be an object", i, key));
        for (auto& [name, d] : params[key].items()) defs[prefix + name] = d;
        params.erase(key);
      }
    defs[prefix + "root"] = params;
    ojson call = {{"type", "object"},
                  {"properties",
                   {{"name", {{"const", f["name"]}}}, {"arguments", {{"$ref", "#/$defs/" + prefix + "root"}}}}},
                  {"required", {"name", "arguments"}},
                  {"additionalProperties", false}};
    calls.push_back(std::move(call));
  }
  ojson schema = calls.size() == 1 ? calls[0] : ojson{{"anyOf", calls}};
  schema["$defs"] = std::move(defs);
  StructuredConstraint c;
  c.format = GrammarFormat::kJson;
  c.text = DumpJson(schema);
  c.param = callable.size() == 1 ? fmt::format("tools[{}].function.parameters", callable[0]) : "tools";
  c.tool_call = true;
  c.lazy = lazy;
  for (size_t i = 0; i < r.tools.size() && c.strict_param.empty(); ++i)
    if (IsStrict(r.tools[i])) c.strict_param = fmt::format("tools[{}].function.strict", i);
  r.constraint = std::move(c);
}

}  // namespace tessera

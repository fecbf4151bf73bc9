// tessera grammar: JSON Schema to grammar.
//
// Supported (OpenAI strict mode's subset and more): type (one or a list: ["string", "null"] for a
// nullable field), properties, required, additionalProperties (false, true or a schema), items,
// prefixItems (without further items), minItems, maxItems, enum, const, anyOf, oneOf (only when
// its branches cannot overlap: different types, or a required property with distinct const / enum
// values), allOf whose members but one allow anything, $ref to "#..." pointers ($defs, definitions, "#" for
// recursion), string pattern / minLength / maxLength / format (json_strings.h), numeric minimum /
// maximum / exclusiveMinimum / exclusiveMaximum (exact, json_numbers.h). Annotations (title,
// description, default, examples, $comment, $schema, deprecated, readOnly, writeOnly,
// discriminator, contentEncoding, contentMediaType) are ignored. Any other keyword is an error that
// names it and its location: constrained decoding must never emit a document its schema rejects.
//
// Output shape:
// - Properties appear in the order of `properties` in the schema (the order OpenAI's strict mode
//   produces). Required ones always, optional ones may be left out (each in its place); allowed
//   additional properties come after the declared ones and never repeat a declared name.
// - Without `additionalProperties`, an object with `properties` gets no other property (a valid
//   subset of what the schema allows); an object schema without `properties` allows any.
// - Whitespace: at most `max_whitespace` bytes of [ \t\n\r] where JSON allows whitespace between
//   tokens (so indented output works, but a model cannot loop on spaces forever); none before or
//   after the whole document.
// - Strings use one canonical encoding per character where a pattern, format, enum or property
//   name constrains them; free strings accept every JSON escape.
#pragma once

#include <string_view>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace tessera::grammar {

struct JsonGrammarOptions {
  int32_t max_whitespace = 32;  // bytes of whitespace allowed in one gap between tokens (0: compact)
};

// Throws Error(kInvalidArgument) for text that is not JSON, an invalid schema or an unsupported
// keyword (message "json schema: <location>: ...").
Grammar JsonSchemaGrammar(std::string_view schema_text, const JsonGrammarOptions& options,
                          const AutomatonLimits& limits);
// Any JSON object (response_format json_object).
Grammar AnyJsonObjectGrammar(const JsonGrammarOptions& options);

}  // namespace tessera::grammar

// tessera server: Gemma 4 tool calls, for the OpenAI `tool_calls` field. Gemma 4 (and DiffusionGemma,
// which uses its chat template) writes a call as its chat template renders one:
//   <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{metric:true},tags:[<|"|>a<|"|>]}<tool_call|>
// Keys are bare (or, tolerated, between <|"|> delimiters); a string is the raw text between two
// <|"|> delimiters (no escapes: quotes, backslashes, braces and newlines are plain text); numbers,
// true, false and null are bare; objects {..} nest with bare keys; arrays [..] hold any values. Calls
// follow each other without separators. The arguments become a JSON object (keys in the model's
// order). As vLLM's gemma4 parser: a bare word (no spaces, no ':') that is no JSON literal or number
// is a string, and null / None / nil (any case) are null. A call with anything else (no "call:", a bad
// name, an unterminated string or bracket, a missing comma, text after the closing brace, nesting
// deeper than kMaxJsonDepth) is malformed and comes back as content, unchanged. Streaming as
// ToolCallParser (tool_parser.h).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/tool_parser.h"

namespace tessera {

// "key:value,..." (the inside of a call's or an object's braces) as a JSON object; nullopt when malformed.
std::optional<nlohmann::ordered_json> ParseGemma4Arguments(std::string_view args);

// The text between <|tool_call> and <tool_call|>: "call:NAME{ARGS}". nullopt when malformed.
std::optional<ToolCall> ParseGemma4CallBody(std::string_view body);

class Gemma4ToolCallParser final : public TaggedToolCallParser {
 public:
  explicit Gemma4ToolCallParser(std::function<std::string()> make_id = NewToolCallId);

 private:
  std::optional<ToolCall> ParseBody(std::string_view body) const override;
};

ToolParseResult ParseGemma4ToolCalls(std::string_view text, std::function<std::string()> make_id = NewToolCallId);

}  // namespace tessera

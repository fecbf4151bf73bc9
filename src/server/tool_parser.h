// tessera server: tool-call extraction from generated text, for the OpenAI `tool_calls` field.
// Two formats inside <tool_call>...</tool_call>:
//   Qwen / Hermes JSON:  <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>
//   Qwen3-Coder XML:     <tool_call><function=f><parameter=x>1</parameter></function></tool_call>
// The parser is incremental: text comes in arbitrary pieces (tokens) and goes out as content
// events until a <tool_call> opens, then as one tool-call event when it closes. A call that does
// not parse comes back as plain content, unchanged. Whitespace right around calls is dropped
// (so "Sure.\n\n<tool_call>..." gives content "Sure."), and the result never depends on how the
// text was split: the one-shot ParseToolCalls is the incremental parser fed once.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct ToolCall {
  std::string id;  // "call_" + 24 random alphanumerics
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ToolStreamEvent {
  bool is_call = false;
  std::string content;  // !is_call: text to show
  int index = 0;        // is_call: position of the call in this response (0, 1, ...)
  ToolCall call;        // is_call
};

std::string NewToolCallId();

// Parses the inside of one <tool_call>...</tool_call> (either format). `tools` is the request's
// OpenAI tools array (may be null), used for parameter types of the XML format. nullopt = malformed.
std::optional<ToolCall> ParseToolCallBody(std::string_view body, const nlohmann::ordered_json& tools);

class ToolCallParser {
 public:
  explicit ToolCallParser(nlohmann::ordered_json tools = nullptr,
                          std::function<std::string()> make_id = NewToolCallId);
  std::vector<ToolStreamEvent> Push(std::string_view text);
  std::vector<ToolStreamEvent> Finish();  // end of generation: flushes what was held back
  int num_calls() const { return num_calls_; }

 private:
  void EmitText(std::string_view s, std::vector<ToolStreamEvent>& out);
  void Process(std::vector<ToolStreamEvent>& out);

  nlohmann::ordered_json tools_;
  std::function<std::string()> make_id_;
  bool in_call_ = false;
  std::string pending_;  // unprocessed text (a possible partial tag, or a call's body so far)
  std::string held_ws_;  // trailing whitespace not yet known to be content
  bool after_call_ = false;
  int num_calls_ = 0;
};

struct ToolParseResult {
  std::string content;
  std::vector<ToolCall> calls;
};
ToolParseResult ParseToolCalls(std::string_view text, const nlohmann::ordered_json& tools,
                               std::function<std::string()> make_id = NewToolCallId);

}  // namespace tessera

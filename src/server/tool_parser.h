// tessera server: tool-call extraction from generated text, for the OpenAI `tool_calls` field.
// Two formats inside <tool_call>...</tool_call>:
//   Qwen / Hermes JSON:  <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>
//   Qwen3-Coder XML:     <tool_call><function=f><parameter=x>1</parameter></function></tool_call>
// The parser is incremental: text comes in arbitrary pieces (tokens) and goes out as content
// events until a <tool_call> opens, then as one tool-call event when it closes. A call that does
// not parse comes back as plain content, unchanged. Whitespace right around calls is dropped
// (so "Sure.\n\n<tool_call>..." gives content "Sure."), and the result never depends on how the
// text was split: the one-shot ParseToolCalls is the incremental parser fed once.
// ToolStreamParser is the interface every format's parser offers (gemma4_tool_parser.h has Gemma 4's;
// chat_format.h picks one by model).
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
  bool is_reasoning = false;  // !is_call: `content` is the model's thinking (reasoning_content)
  std::string content;        // !is_call: text to show
  int index = 0;              // is_call: position of the call in this response (0, 1, ...)
  ToolCall call;              // is_call
};

std::string NewToolCallId();

// Parses the inside of one <tool_call>...</tool_call> (either format). `tools` is the request's
// OpenAI tools array (may be null), used for parameter types of the XML format. nullopt = malformed.
std::optional<ToolCall> ParseToolCallBody(std::string_view body, const nlohmann::ordered_json& tools);

// An incremental tool-call parser: Push takes the output's text in any pieces and returns what is
// final (content, or whole calls); Finish ends the output (an unterminated call is content). The
// events never depend on how the text was split.
class ToolStreamParser {
 public:
  virtual ~ToolStreamParser() = default;
  virtual std::vector<ToolStreamEvent> Push(std::string_view text) = 0;
  virtual std::vector<ToolStreamEvent> Finish() = 0;  // end of generation: flushes what was held back
  virtual int num_calls() const = 0;
};

// The streaming skeleton of formats that put each call between an opening and a closing tag:
// text goes out as content until `open` appears (a possible partial tag at the end is held back),
// the call's body is held until `close`, then ParseBody makes it a call event or, when malformed,
// the whole tagged text goes out as content.
class TaggedToolCallParser : public ToolStreamParser {
 public:
  std::vector<ToolStreamEvent> Push(std::string_view text) override;
  std::vector<ToolStreamEvent> Finish() override;
  int num_calls() const override { return num_calls_; }

 protected:
  TaggedToolCallParser(std::string open, std::string close, std::function<std::string()> make_id);
  // The text between the tags as a call (the id is set here, not by it); nullopt = malformed.
  virtual std::optional<ToolCall> ParseBody(std::string_view body) const = 0;

 private:
  void EmitText(std::string_view s, std::vector<ToolStreamEvent>& out);
  void Process(std::vector<ToolStreamEvent>& out);

  std::string open_, close_;
  std::function<std::string()> make_id_;
  bool in_call_ = false;
  std::string pending_;  // unprocessed text (a possible partial tag, or a call's body so far)
  std::string held_ws_;  // trailing whitespace not yet known to be content
  bool after_call_ = false;
  int num_calls_ = 0;
};

// Qwen / Hermes JSON and Qwen3-Coder XML calls inside <tool_call>...</tool_call>.
class ToolCallParser final : public TaggedToolCallParser {
 public:
  explicit ToolCallParser(nlohmann::ordered_json tools = nullptr,
                          std::function<std::string()> make_id = NewToolCallId);

 private:
  std::optional<ToolCall> ParseBody(std::string_view body) const override;
  nlohmann::ordered_json tools_;
};

struct ToolParseResult {
  std::string content;
  std::vector<ToolCall> calls;
};
ToolParseResult ParseToolCalls(std::string_view text, const nlohmann::ordered_json& tools,
                               std::function<std::string()> make_id = NewToolCallId);
// Any parser fed `text` once, then finished.
ToolParseResult RunToolParser(ToolStreamParser& parser, std::string_view text);

}  // namespace tessera

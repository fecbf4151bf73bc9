// tessera server: the model's thinking, for the OpenAI `reasoning_content` field. A model that thinks
// in a delimited channel (Gemma 4: <|channel>thought\n...<channel|>) has its output split into
// reasoning (the channel's text, its "thought\n" label left out) and content (everything else).
// Incremental: text comes in arbitrary pieces and goes out as soon as it is known to be one or the
// other (a possible partial marker is held back); the result never depends on how the text was
// split. The reasoning loses the whitespace before its closing marker and the content the
// whitespace right after it (the chat template writes "\n<channel|>" and trims the answer). A
// channel left open at the end (max_tokens) is reasoning; an `ends` marker (Gemma 4's <|tool_call>:
// a call ends the thinking) closes the channel and stays in the content; a closing marker outside a
// channel is plain content. Like vLLM's gemma4 reasoning parser, but text before a channel is kept
// as content rather than dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct ReasoningMarkers {
  std::string open, close;        // the channel's delimiters
  std::string label;              // left out when the channel's text starts with it
  std::vector<std::string> ends;  // also end the channel; they stay in the content
};

// Gemma 4: <|channel>thought\n ... <channel|>, ended too by <|tool_call>.
ReasoningMarkers Gemma4ReasoningMarkers();

struct ReasoningPiece {
  bool reasoning = false;
  std::string text;
};

class ReasoningParser {
 public:
  // `in_channel`: the prompt already opened the channel, label included (Gemma 4's template opens
  // "<|channel>thought\n" for the model after a tool response when thinking is on).
  explicit ReasoningParser(ReasoningMarkers markers, bool in_channel = false);
  std::vector<ReasoningPiece> Push(std::string_view text);
  std::vector<ReasoningPiece> Finish();  // end of generation: flushes what was held back

 private:
  enum class State { kContent, kLabel, kChannel };
  void Process(std::vector<ReasoningPiece>& out);
  void Emit(bool reasoning, std::string_view text, std::vector<ReasoningPiece>& out);
  void EmitReasoning(std::string_view text, std::vector<ReasoningPiece>& out);  // holds trailing whitespace
  void EndChannel();

  ReasoningMarkers m_;
  State state_;
  std::string pending_;         // text not processed yet (a possible partial marker or label)
  std::string held_ws_;         // the channel's trailing whitespace, dropped if the channel ends
  bool after_channel_ = false;  // drop the content's leading whitespace
};

struct ReasoningSplit {
  std::string reasoning, content;
};
ReasoningSplit SplitReasoning(std::string_view text, const ReasoningMarkers& markers, bool in_channel = false);

}  // namespace tessera

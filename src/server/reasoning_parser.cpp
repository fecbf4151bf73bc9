// tessera server: the incremental split of a model's output into reasoning and content
// (see reasoning_parser.h).
#include "server/reasoning_parser.h"

#include <algorithm>

namespace tessera {
namespace {

bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest tail of `s` that is a proper prefix of `marker`.
size_t PartialTail(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

}  // namespace

ReasoningMarkers Gemma4ReasoningMarkers() { return {"<|channel>", "<channel|>", "thought\n", {"<|tool_call>"}}; }

ReasoningParser::ReasoningParser(ReasoningMarkers markers, bool in_channel)
    : m_(std::move(markers)), state_(in_channel ? State::kChannel : State::kContent) {}

void ReasoningParser::Emit(bool reasoning, std::string_view text, std::vector<ReasoningPiece>& out) {
  if (text.empty()) return;
  if (!out.empty() && out.back().reasoning == reasoning) {
    out.back().text.append(text);
    return;
  }
  out.push_back({reasoning, std::string(text)});
}

void ReasoningParser::EmitReasoning(std::string_view text, std::vector<ReasoningPiece>& out) {
  size_t last = text.size();
  while (last > 0 && IsWs(text[last - 1])) --last;
  if (last == 0) {
    held_ws_.append(text);
    return;
  }
  std::string s = std::move(held_ws_);
  s.append(text.substr(0, last));
  held_ws_.assign(text.substr(last));
  Emit(true, s, out);
}

void ReasoningParser::EndChannel() {
  held_ws_.clear();  // the whitespace before the closing marker
  state_ = State::kContent;
  after_channel_ = true;
}

void ReasoningParser::Process(std::vector<ReasoningPiece>& out) {
  for (;;) {
    switch (state_) {
      case State::kContent: {
        if (after_channel_) {
          size_t i = 0;
          while (i < pending_.size() && IsWs(pending_[i])) ++i;
          pending_.erase(0, i);
          if (pending_.empty()) return;
          after_channel_ = false;
        }
        size_t p = pending_.find(m_.open);
        if (p != std::string::npos) {
          Emit(false, std::string_view(pending_).substr(0, p), out);
          pending_.erase(0, p + m_.open.size());
          state_ = State::kLabel;
          continue;
        }
        size_t keep = PartialTail(pending_, m_.open);
        Emit(false, std::string_view(pending_).substr(0, pending_.size() - keep), out);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case State::kLabel: {
        if (pending_.compare(0, m_.label.size(), m_.label) == 0) {
          pending_.erase(0, m_.label.size());
          state_ = State::kChannel;
          continue;
        }
        // Still a prefix of the label: wait for more. Otherwise the channel has no label.
        if (pending_.size() < m_.label.size() && m_.label.compare(0, pending_.size(), pending_) == 0) return;
        state_ = State::kChannel;
        continue;
      }
      case State::kChannel: {
        size_t at = pending_.find(m_.close);
        bool closes = at != std::string::npos;
        for (const std::string& e : m_.ends) {
          size_t q = pending_.find(e);
          if (q != std::string::npos && (at == std::string::npos || q < at)) {
            at = q;
            closes = false;
          }
        }
        if (at != std::string::npos) {
          EmitReasoning(std::string_view(pending_).substr(0, at), out);
          pending_.erase(0, closes ? at + m_.close.size() : at);  // an `ends` marker stays: content
          EndChannel();
          continue;
        }
        size_t keep = PartialTail(pending_, m_.close);
        for (const std::string& e : m_.ends) keep = std::max(keep, PartialTail(pending_, e));
        EmitReasoning(std::string_view(pending_).substr(0, pending_.size() - keep), out);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
    }
  }
}

std::vector<ReasoningPiece> ReasoningParser::Push(std::string_view text) {
  std::vector<ReasoningPiece> out;
  pending_.append(text);
  Process(out);
  return out;
}

std::vector<ReasoningPiece> ReasoningParser::Finish() {
  std::vector<ReasoningPiece> out;
  switch (state_) {
    case State::kContent: {
      std::string_view rest = pending_;
      if (after_channel_)
        while (!rest.empty() && IsWs(rest.front())) rest.remove_prefix(1);
      Emit(false, rest, out);
      break;
    }
    case State::kLabel:  // an unfinished label ("thou") is all the channel has
    case State::kChannel:
      EmitReasoning(pending_, out);
      held_ws_.clear();
      break;
  }
  pending_.clear();
  state_ = State::kContent;
  after_channel_ = false;
  return out;
}

ReasoningSplit SplitReasoning(std::string_view text, const ReasoningMarkers& markers, bool in_channel) {
  ReasoningParser p(markers, in_channel);
  ReasoningSplit r;
  auto take = [&r](const std::vector<ReasoningPiece>& pieces) {
    for (const ReasoningPiece& e : pieces) (e.reasoning ? r.reasoning : r.content) += e.text;
  };
  take(p.Push(text));
  take(p.Finish());
  return r;
}

}  // namespace tessera

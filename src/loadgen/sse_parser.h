// tessera loadgen: an incremental parser for Server-Sent Events (the WHATWG event-stream format)
// as OpenAI-compatible servers stream them. Bytes arrive in arbitrary pieces (TCP reads, HTTP
// chunks), so a line or even a CR LF pair may be split across Feed() calls; events are handed
// out only once their terminating blank line has arrived.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace tessera::loadgen {

struct SseEvent {
  std::string event;  // the `event:` field; empty for the default "message" type
  std::string data;   // the `data:` lines joined with '\n'
};

class SseParser {
 public:
  using Callback = std::function<void(const SseEvent&)>;

  // Parses `bytes` and calls `on_event` for each event completed by them. Comments (":..."),
  // `id:` and `retry:` lines and unknown fields are ignored. An event with no data line is not
  // dispatched (as browsers do).
  void Feed(std::string_view bytes, const Callback& on_event);

  // Bytes of an unfinished line or event held back (for tests and end-of-stream checks).
  bool HasPartial() const { return !line_.empty() || has_data_ || !event_.event.empty(); }

 private:
  void Line(std::string_view line, const Callback& on_event);

  std::string line_;       // the current line so far (without its terminator)
  bool skip_lf_ = false;   // the last byte seen was CR: a following LF belongs to it
  SseEvent event_;         // the event being assembled
  bool has_data_ = false;  // at least one data line in event_
};

}  // namespace tessera::loadgen

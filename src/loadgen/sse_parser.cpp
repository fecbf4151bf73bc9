// tessera loadgen: SSE parser (see sse_parser.h). Follows the line rules of the WHATWG spec:
// lines end in CR LF, LF or CR; "field: value" drops one space after the colon; a blank line
// dispatches the event.
#include "loadgen/sse_parser.h"

namespace tessera::loadgen {

void SseParser::Feed(std::string_view bytes, const Callback& on_event) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    char c = bytes[i];
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') {
        start = i + 1;
        continue;
      }
    }
    if (c != '\n' && c != '\r') continue;
    line_.append(bytes.substr(start, i - start));
    std::string line = std::move(line_);
    line_.clear();
    Line(line, on_event);
    skip_lf_ = (c == '\r');
    start = i + 1;
  }
  line_.append(bytes.substr(start));
}

void SseParser::Line(std::string_view line, const Callback& on_event) {
  if (line.empty()) {
    if (has_data_) {
      if (!event_.data.empty() && event_.data.back() == '\n') event_.data.pop_back();
      on_event(event_);
    }
    event_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment (keep-alive pings)
  std::string_view field = line, value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    event_.data.append(value);
    event_.data.push_back('\n');
    has_data_ = true;
  } else if (field == "event") {
    event_.event = std::string(value);
  }
}

}  // namespace tessera::loadgen

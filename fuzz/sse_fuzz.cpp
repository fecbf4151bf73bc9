// tessera fuzz: the load generator's SSE parser (src/loadgen/sse_parser.h) and the response reader
// on top of it (response_tracker.h: the chunks' JSON, usage, [DONE], error objects) on arbitrary
// server output: `tessera bench` points at servers that are not ours. Besides memory errors it
// checks the parser's own promise: the events do not depend on how the bytes were split across
// Feed() calls (TCP reads cut lines and CR LF pairs anywhere).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/response_tracker.h"
#include "loadgen/sse_parser.h"

using tessera::loadgen::SseEvent;
using tessera::loadgen::SseParser;

namespace {

std::vector<SseEvent> FeedAll(std::string_view text, const std::vector<size_t>& cuts, bool* partial) {
  SseParser p;
  std::vector<SseEvent> out;
  auto cb = [&](const SseEvent& e) { out.push_back(e); };
  size_t prev = 0;
  for (size_t c : cuts) {
    p.Feed(text.substr(prev, c - prev), cb);
    prev = c;
  }
  p.Feed(text.substr(prev), cb);
  *partial = p.HasPartial();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte picks the piece length of the split feed (1..16 bytes), the rest is the stream.
  const size_t piece = 1 + (data[0] % 16);
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  bool partial_whole = false, partial_split = false;
  std::vector<SseEvent> whole = FeedAll(text, {}, &partial_whole);
  std::vector<size_t> cuts;
  for (size_t c = piece; c < text.size(); c += piece) cuts.push_back(c);
  std::vector<SseEvent> split = FeedAll(text, cuts, &partial_split);

  if (whole.size() != split.size() || partial_whole != partial_split) abort();
  for (size_t i = 0; i < whole.size(); ++i)
    if (whole[i].event != split[i].event || whole[i].data != split[i].data) abort();

  // The same bytes as a response body, streamed or not, to the chat or the completions endpoint.
  // The tracker reports a bad body as a failed request; it never throws (the runner does not catch).
  using tessera::loadgen::Clock;
  using tessera::loadgen::Endpoint;
  const bool stream = (data[0] & 0x40) == 0;
  const Endpoint ep = (data[0] & 0x80) ? Endpoint::kChat : Endpoint::kCompletions;
  const Clock::time_point t0 = Clock::now();
  tessera::loadgen::ResponseTracker tracker(ep, stream, t0, 7);
  tracker.OnStatus(200);
  for (size_t prev = 0; prev < text.size(); prev += piece)
    tracker.OnBody(text.substr(prev, piece), t0 + std::chrono::milliseconds(prev));
  tessera::loadgen::RequestResult r = tracker.Finish(t0 + std::chrono::seconds(1), "", "", "");
  if (r.success && !r.failure.empty()) abort();
  (void)tessera::loadgen::ErrorMessageFromBody(std::string(text));
  return 0;
}

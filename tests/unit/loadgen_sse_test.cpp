// tessera tests: the load generator's SSE parser on whole, split and byte-by-byte input, with
// every line terminator the format allows, comments, named events and multi-line data.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loadgen/sse_parser.h"

namespace tessera::loadgen {
namespace {

std::vector<SseEvent> FeedInPieces(const std::string& text, const std::vector<size_t>& cuts) {
  SseParser p;
  std::vector<SseEvent> out;
  auto cb = [&](const SseEvent& e) { out.push_back(e); };
  size_t prev = 0;
  for (size_t c : cuts) {
    p.Feed(std::string_view(text).substr(prev, c - prev), cb);
    prev = c;
  }
  p.Feed(std::string_view(text).substr(prev), cb);
  return out;
}

// The stream every test feeds, and what it must produce (written out by hand from the format's
// rules: one optional space after the colon is dropped, data lines are joined with \n, comment
// lines and unknown fields are ignored, an event without data is not dispatched).
const std::string kStream =
    ": keep-alive comment\n"
    "data: {\"a\":1}\n\n"
    "event: diffusion_step\r\n"
    "data: {\"step\":0}\r\n\r\n"
    "id: 7\rretry: 100\rdata:no-space\rdata:  two spaces\r\r"
    "event: empty\n\n"
    "data\n\n"
    "data: [DONE]\n\n"
    "data: unfinished";

void ExpectEvents(const std::vector<SseEvent>& ev) {
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].event, "");
  EXPECT_EQ(ev[0].data, "{\"a\":1}");
  EXPECT_EQ(ev[1].event, "diffusion_step");
  EXPECT_EQ(ev[1].data, "{\"step\":0}");
  EXPECT_EQ(ev[2].data, "no-space\n two spaces");
  EXPECT_EQ(ev[3].data, "");  // "data" with no colon: an empty data line
  EXPECT_EQ(ev[4].data, "[DONE]");
}

TEST(LoadgenSse, WholeInput) { ExpectEvents(FeedInPieces(kStream, {})); }

TEST(LoadgenSse, ByteByByte) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < kStream.size(); ++i) cuts.push_back(i);
  ExpectEvents(FeedInPieces(kStream, cuts));
}

TEST(LoadgenSse, EveryTwoWaySplit) {
  // Includes the splits between a CR and its LF, inside "data:" and inside the blank line.
  for (size_t i = 1; i < kStream.size(); ++i) {
    SCOPED_TRACE("split at " + std::to_string(i));
    ExpectEvents(FeedInPieces(kStream, {i}));
  }
}

TEST(LoadgenSse, UnfinishedEventIsHeldBack) {
  SseParser p;
  int n = 0;
  auto cb = [&](const SseEvent&) { ++n; };
  p.Feed("data: x\n", cb);
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(p.HasPartial());
  p.Feed("\n", cb);
  EXPECT_EQ(n, 1);
  EXPECT_FALSE(p.HasPartial());
}

TEST(LoadgenSse, CrLfSplitDoesNotMakeABlankLine) {
  // "data: a\r" then "\n" then "data: b\r\n\r\n": the LF after the CR is part of the same line
  // end, so a and b belong to one event.
  std::vector<SseEvent> ev = FeedInPieces("data: a\r\ndata: b\r\n\r\n", {8});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "a\nb");
}

}  // namespace
}  // namespace tessera::loadgen

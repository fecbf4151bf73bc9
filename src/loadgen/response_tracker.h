// tessera loadgen: one request's measurements and outcome, and the reading of the OpenAI
// response that produces them: for streams, the SSE `data:` chunks (TTFT at the first chunk that
// carries output, ITL between such chunks, usage from the final usage chunk, `[DONE]`, an error
// object inside the stream); for plain responses, the JSON body.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/sse_parser.h"
#include "loadgen/workload.h"

namespace tessera::loadgen {

using Clock = std::chrono::steady_clock;

struct RequestResult {
  bool success = false;
  // Why it failed: the HTTP status ("429", "500", ...), or "connection" (refused, reset, closed
  // mid-response), "timeout" (--timeout passed), "stream" (an error object inside a 200 stream,
  // or a stream that ended without [DONE]), "protocol" (a response that is not OpenAI's JSON).
  std::string failure;
  int http_status = 0;  // 0: no HTTP response
  std::string error;    // the server's error message, or the transport error
  double send_s = 0;    // when it was sent, seconds since the benchmark started
  double ttft_s = 0;    // to the first chunk carrying output (streaming) or to the response (not)
  // False for a stream in which no chunk carried text (e.g. a model generating ids its tokenizer
  // cannot decode): TTFT, ITL and TPOT are then unknown and left out of the statistics.
  bool ttft_measured = false;
  double e2e_s = 0;
  std::vector<double> itl_s;  // between consecutive output-carrying chunks
  int64_t prompt_tokens = 0;  // usage.prompt_tokens, else the length sent
  int64_t output_tokens = 0;  // usage.completion_tokens, else the number of output chunks
  bool usage_seen = false;
  int64_t output_chunks = 0;
};

class ResponseTracker {
 public:
  ResponseTracker(Endpoint endpoint, bool stream, Clock::time_point start, int64_t prompt_len);

  // The HTTP status line arrived.
  void OnStatus(int status) { result_.http_status = status; }
  // Bytes of a 200 response body, at the time they were read.
  void OnBody(std::string_view bytes, Clock::time_point at);
  // The exchange ended at `at`: `transport_failure` is empty when the response was read whole,
  // else the failure kind ("connection" / "timeout") with `message`; `error_body` is the body of
  // a non-2xx response (its OpenAI error message is reported).
  RequestResult Finish(Clock::time_point at, const std::string& transport_failure,
                       const std::string& message, const std::string& error_body);

 private:
  void OnEvent(const SseEvent& ev);
  void OnChunkJson(const std::string& data, bool final_body);
  void Fail(const std::string& kind, const std::string& message);

  Endpoint endpoint_;
  bool stream_;
  Clock::time_point start_, now_, last_output_;
  SseParser sse_;
  std::string body_;  // non-streaming: the whole body
  bool done_ = false;
  RequestResult result_;
};

// The message of an OpenAI error body ({"error": {"message": ...}}), or the body itself, cut.
std::string ErrorMessageFromBody(const std::string& body);

}  // namespace tessera::loadgen

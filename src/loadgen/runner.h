// tessera loadgen: the benchmark driver: sends prepared requests at their arrival times with at
// most `concurrency` in flight (a request that arrives while all slots are busy waits for one,
// as in `vllm bench serve`), over `threads` event loops (one io_context and one connection pool
// per thread), and records each request's result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loadgen/http_client.h"
#include "loadgen/response_tracker.h"
#include "loadgen/workload.h"

namespace tessera::loadgen {

struct RunOptions {
  HttpUrl url;
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = true;
  std::string api_key;
  int64_t concurrency = 0;    // <= 0: unlimited
  int threads = 1;            // event-loop threads
  double timeout_s = 600;     // per request, from its send to its last byte
  std::vector<double> arrivals;  // seconds from the start, one per request (empty: all at 0)
};

struct RunOutput {
  std::vector<RequestResult> results;  // in request order
  double duration_s = 0;               // start to the last completion
  int64_t connections_opened = 0;
  int64_t max_in_flight = 0;
};

// Throws only for setup errors (unresolvable host); request failures are in the results.
RunOutput RunRequests(const std::vector<BenchRequest>& requests, const RunOptions& opt);

}  // namespace tessera::loadgen

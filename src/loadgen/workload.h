// tessera loadgen: what a benchmark sends: per-request input / output lengths (fixed, or uniform
// in [len*(1-r), len*(1+r)]), prompts of exactly that many tokens (token-id lists for
// /v1/completions; random common words for /v1/chat/completions, whose real token count the
// server reports in usage), an optional prefix shared by every request (to exercise prefix
// caching), the OpenAI request bodies, and the arrival times (Poisson or gamma, seeded).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::loadgen {

enum class Endpoint { kCompletions, kChat };
const char* EndpointPath(Endpoint e);  // "/v1/completions" or "/v1/chat/completions"

struct WorkloadSpec {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  int64_t input_len = 128, output_len = 128;
  double range_ratio = 0;  // in [0, 1)
  int64_t prefix_len = 0;  // tokens (words for chat) shared by every prompt, before its own part
  // Token ids are drawn uniformly from [10, vocab_size); 0 means [10, 250], safe for byte-level
  // tokenizers (the fixture models' 264-token tokenizer).
  int64_t vocab_size = 0;
  bool ignore_eos = true, stream = true;
  double temperature = 0;
  nlohmann::ordered_json extra_body = nlohmann::ordered_json::object();  // merged into every body
};

struct BenchRequest {
  std::string body;          // the JSON request body, built before the clock starts
  int64_t prompt_len = 0;    // tokens sent (completions) or words sent (chat: usage has the truth)
  int64_t max_tokens = 0;    // requested output length
};

// Throws Error(kInvalidArgument) for lengths out of range. Deterministic per seed.
std::vector<BenchRequest> MakeRequests(const WorkloadSpec& spec, int64_t count, uint64_t seed);

// Lengths uniform in [floor(len*(1-r)), floor(len*(1+r))], at least `min`.
std::vector<int64_t> SampleLengths(int64_t len, double ratio, int64_t count, int64_t min, uint64_t seed);

// Send offsets in seconds from the start: the first request at 0, then gaps drawn from a gamma
// distribution with mean 1/rate and shape `burstiness` (1 = exponential gaps = Poisson process).
// rate = +inf sends everything at once (all zeros).
std::vector<double> ArrivalTimes(int64_t count, double rate, double burstiness, uint64_t seed);

constexpr double kInfiniteRate = std::numeric_limits<double>::infinity();

}  // namespace tessera::loadgen

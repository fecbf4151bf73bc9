// tessera loadgen: workload generation (see workload.h).
#include "loadgen/workload.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace tessera::loadgen {

namespace {

using ojson = nlohmann::ordered_json;

// Short common English words: one token each (with their leading space) for the usual BPE
// vocabularies, so a chat prompt of N words is close to N tokens there; a byte-level tokenizer
// counts their bytes instead (the server's usage tells the real count).
constexpr const char* kWords[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "it",    "that",  "for",   "on",    "was",
    "with",  "as",    "at",    "by",    "this",  "from",  "or",    "be",    "are",   "an",    "not",
    "but",   "have",  "they",  "you",   "all",   "we",    "can",   "one",   "more",  "time",  "which",
    "about", "new",   "some",  "would", "there", "their", "other", "into",  "has",   "like",  "then",
    "only",  "over",  "also",  "after", "most",  "first", "well",  "way",   "even",  "any",   "these",
    "people", "world", "year", "work",  "day",   "good",  "long",  "great", "little", "own",  "man",
    "old",   "right", "big",   "high",  "small", "large", "next",  "early", "young", "same",  "able",
    "water", "city",  "house", "food",  "light", "tree",  "river", "music", "story", "green", "blue",
    "red",   "white", "black", "cold",  "warm",  "open",
};
constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);

// Sub-seeds so that lengths, prompts and arrivals do not share a random stream.
uint64_t Mix(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

const char* EndpointPath(Endpoint e) {
  return e == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

std::vector<int64_t> SampleLengths(int64_t len, double ratio, int64_t count, int64_t min, uint64_t seed) {
  if (!(ratio >= 0 && ratio < 1))
    Fail(ErrorKind::kInvalidArgument, "--random-range-ratio must be in [0, 1), got {}", ratio);
  int64_t lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - ratio)));
  int64_t hi = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 + ratio)));
  lo = std::max(lo, min);
  hi = std::max(hi, lo);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (auto& v : out) v = lo == hi ? lo : d(rng);
  return out;
}

std::vector<double> ArrivalTimes(int64_t count, double rate, double burstiness, uint64_t seed) {
  if (!(rate > 0)) Fail(ErrorKind::kInvalidArgument, "--request-rate must be > 0 (or inf), got {}", rate);
  if (!(burstiness > 0)) Fail(ErrorKind::kInvalidArgument, "--burstiness must be > 0, got {}", burstiness);
  std::vector<double> t(static_cast<size_t>(std::max<int64_t>(count, 0)), 0.0);
  if (std::isinf(rate)) return t;
  // Seeded through Mix: mt19937_64 seeded with 0, 1, 2... starts with visibly short gaps.
  std::mt19937_64 rng(Mix(seed, 4));
  // Gamma(shape k, scale 1/(rate k)) has mean 1/rate; k = 1 is the exponential distribution.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (size_t i = 1; i < t.size(); ++i) t[i] = t[i - 1] + gap(rng);
  return t;
}

std::vector<BenchRequest> MakeRequests(const WorkloadSpec& spec, int64_t count, uint64_t seed) {
  if (count < 0) Fail(ErrorKind::kInvalidArgument, "--num-prompts must be >= 0, got {}", count);
  if (spec.input_len < 1) Fail(ErrorKind::kInvalidArgument, "--input-len must be >= 1, got {}", spec.input_len);
  if (spec.output_len < 1) Fail(ErrorKind::kInvalidArgument, "--output-len must be >= 1, got {}", spec.output_len);
  if (spec.prefix_len < 0) Fail(ErrorKind::kInvalidArgument, "--prefix-len must be >= 0, got {}", spec.prefix_len);
  if (spec.vocab_size != 0 && spec.vocab_size <= 10)
    Fail(ErrorKind::kInvalidArgument, "--vocab-size must be > 10, got {}", spec.vocab_size);
  if (!spec.extra_body.is_object()) Fail(ErrorKind::kInvalidArgument, "--extra-body must be a JSON object");
  const int64_t id_hi = spec.vocab_size ? spec.vocab_size - 1 : 250;

  auto in_lens = SampleLengths(spec.input_len, spec.range_ratio, count, 1, Mix(seed, 1));
  auto out_lens = SampleLengths(spec.output_len, spec.range_ratio, count, 1, Mix(seed, 2));
  std::mt19937_64 rng(Mix(seed, 3));
  std::uniform_int_distribution<int64_t> id_dist(10, id_hi);
  std::uniform_int_distribution<int> word_dist(0, kNumWords - 1);
  const bool chat = spec.endpoint == Endpoint::kChat;

  auto words = [&](int64_t n, std::string& out) {
    for (int64_t i = 0; i < n; ++i) {
      if (!out.empty()) out += ' ';
      out += kWords[word_dist(rng)];
    }
  };
  std::vector<int64_t> prefix_ids;
  std::string prefix_text;
  if (chat) words(spec.prefix_len, prefix_text);
  else
    for (int64_t i = 0; i < spec.prefix_len; ++i) prefix_ids.push_back(id_dist(rng));

  std::vector<BenchRequest> out(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r) {
    BenchRequest& req = out[static_cast<size_t>(r)];
    req.prompt_len = spec.prefix_len + in_lens[static_cast<size_t>(r)];
    req.max_tokens = out_lens[static_cast<size_t>(r)];
    ojson body = ojson::object();
    if (!spec.model.empty()) body["model"] = spec.model;
    if (chat) {
      std::string text = prefix_text;
      words(in_lens[static_cast<size_t>(r)], text);
      body["messages"] = ojson::array({{{"role", "user"}, {"content", text}}});
      body["max_completion_tokens"] = req.max_tokens;
    } else {
      std::vector<int64_t> ids = prefix_ids;
      for (int64_t i = 0; i < in_lens[static_cast<size_t>(r)]; ++i) ids.push_back(id_dist(rng));
      body["prompt"] = ids;
      body["max_tokens"] = req.max_tokens;
    }
    body["temperature"] = spec.temperature;
    body["stream"] = spec.stream;
    if (spec.stream) body["stream_options"] = {{"include_usage", true}};
    if (spec.ignore_eos) body["ignore_eos"] = true;
    for (const auto& [k, v] : spec.extra_body.items()) body[k] = v;
    req.body = body.dump();
  }
  return out;
}

}  // namespace tessera::loadgen

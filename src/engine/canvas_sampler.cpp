// tessera engine: DiffusionGemma's canvas sampler rules (see canvas_sampler.h).
#include "engine/canvas_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace tessera {

void CanvasSamplerParams::Validate(const std::string& where) const {
  if (canvas_length < 0)
    Fail(ErrorKind::kInvalidArgument, "{}: canvas_length must be >= 0 (0: the model's), got {}", where, canvas_length);
  if (max_denoising_steps <= 0)
    Fail(ErrorKind::kInvalidArgument, "{}: max_denoising_steps must be a positive integer, got {}", where,
         max_denoising_steps);
  if (!(t_min >= 0) || !(t_max >= 0) || !(t_max > t_min))
    Fail(ErrorKind::kInvalidArgument, "{}: t_min and t_max must satisfy 0 <= t_min < t_max, got {} and {}", where,
         t_min, t_max);
  if (stability_threshold < 0)
    Fail(ErrorKind::kInvalidArgument, "{}: stability_threshold must be >= 0, got {}", where, stability_threshold);
  if (!(confidence_threshold > 0))
    Fail(ErrorKind::kInvalidArgument, "{}: confidence_threshold must be > 0, got {}", where, confidence_threshold);
  if (!(entropy_bound > 0))
    Fail(ErrorKind::kInvalidArgument, "{}: entropy_bound must be > 0, got {}", where, entropy_bound);
}

CanvasSamplerParams CanvasSamplerParams::FromGenerationConfig(const nlohmann::json& gen, const std::string& where) {
  CanvasSamplerParams p;
  if (!gen.is_object()) return p;
  auto number = [&](const nlohmann::json& j, const char* key, double* out, const std::string& at) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number()) Fail(ErrorKind::kCorrupt, "{}: \"{}\" must be a number, got {}", at, key, it->dump());
    *out = it->get<double>();
  };
  auto integer = [&](const char* key, int64_t* out) {
    auto it = gen.find(key);
    if (it == gen.end() || it->is_null()) return;
    if (!it->is_number_integer())
      Fail(ErrorKind::kCorrupt, "{}: \"{}\" must be an integer, got {}", where, key, it->dump());
    *out = it->get<int64_t>();
  };
  integer("max_denoising_steps", &p.max_denoising_steps);
  integer("stability_threshold", &p.stability_threshold);
  number(gen, "t_min", &p.t_min, where);
  number(gen, "t_max", &p.t_max, where);
  number(gen, "confidence_threshold", &p.confidence_threshold, where);
  if (auto it = gen.find("sampler_config"); it != gen.end() && !it->is_null()) {
    const std::string at = where + " sampler_config";
    if (!it->is_object()) Fail(ErrorKind::kCorrupt, "{}: must be an object, got {}", at, it->dump());
    if (auto cls = it->find("_cls_name"); cls != it->end() && *cls != "EntropyBoundSamplerConfig")
      Fail(ErrorKind::kUnsupported, "{}: sampler {} is not supported (EntropyBoundSamplerConfig)", at, cls->dump());
    number(*it, "entropy_bound", &p.entropy_bound, at);
  }
  p.Validate(where);
  return p;
}

double CanvasTemperature(const CanvasSamplerParams& p, int64_t steps_remaining) {
  return p.t_min + (p.t_max - p.t_min) * static_cast<double>(steps_remaining) /
                       static_cast<double>(p.max_denoising_steps);
}

int64_t RowArgmax(const float* z, int64_t vocab) {
  // The largest value over 8 independent lanes (a loop the compiler vectorises; max_element's
  // index-carrying compare was ~0.2 ms a 262K row, and a constrained canvas runs 256 rows one after
  // another), then its first index. NaNs are passed over (a row of NaNs alone takes max_element's answer).
  constexpr int64_t kLanes = 8;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = z[i + l] > lane[l] ? z[i + l] : lane[l];
  float m = *std::max_element(lane, lane + kLanes);
  for (; i < vocab; ++i) m = z[i] > m ? z[i] : m;
  for (int64_t j = 0; j < vocab; ++j)
    if (z[j] == m) return j;
  return std::max_element(z, z + vocab) - z;
}

std::vector<uint8_t> AcceptByEntropyBound(const std::vector<double>& entropy, double bound) {
  std::vector<size_t> order(entropy.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entropy[a] < entropy[b]; });
  std::vector<uint8_t> accepted(entropy.size(), 0);
  double before = 0;  // the entropies of the rows sorted before this one
  for (size_t r : order) {
    if (before > bound) break;  // the sum only grows: no later row is accepted
    accepted[r] = 1;
    before += entropy[r];
  }
  return accepted;
}

std::vector<int32_t> RenoiseCanvas(const std::vector<uint8_t>& accepted, const std::vector<int32_t>& sampled,
                                   const std::vector<int32_t>& noise) {
  if (sampled.size() != accepted.size() || noise.size() != accepted.size())
    Fail(ErrorKind::kInvalidArgument, "RenoiseCanvas: {} accepted flags, {} samples, {} noise tokens",
         accepted.size(), sampled.size(), noise.size());
  std::vector<int32_t> next(accepted.size());
  for (size_t i = 0; i < next.size(); ++i) next[i] = accepted[i] ? sampled[i] : noise[i];
  return next;
}

bool CanvasStopRule::Step(const std::vector<int32_t>& argmax, double mean_entropy) {
  bool stable = true;
  if (k_ > 0) {
    // transformers starts the history with k rows of -1, which no argmax canvas equals.
    stable = static_cast<int64_t>(history_.size()) == k_ &&
             std::all_of(history_.begin(), history_.end(), [&](const auto& h) { return h == argmax; });
    history_.push_back(argmax);
    if (static_cast<int64_t>(history_.size()) > k_) history_.pop_front();
  }
  return stable && mean_entropy < q_;
}

}  // namespace tessera

// tessera engine: the rules of DiffusionGemma's uniform-state canvas sampler (docs/DIFFUSION_GEMMA.md
// section 6) as host-side functions over per-row statistics, so they can be tested step by step
// against transformers' recorded traces (tools/dgemma_fixtures) with the trace's own random draws:
// the linear temperature schedule, entropy-bound acceptance, re-noising, and the stable-and-confident
// stop. The decoder that runs them (batching, self-conditioning state, streaming) is issue 31 item 2;
// the per-row statistics (entropy, argmax, a sample) will be backend ops over the logits rows.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace tessera {

// generation_config.json's knobs; the defaults are transformers' (and the published checkpoint's).
// A request may override each of them (the server's `diffusion` object), and the canvas length.
struct CanvasSamplerParams {
  int64_t canvas_length = 0;  // C; 0: the model's (config.json canvas_length), the most a request may ask
  int64_t max_denoising_steps = 48;
  double entropy_bound = 0.1;  // sampler_config.entropy_bound
  double t_min = 0.4, t_max = 0.8;
  int64_t stability_threshold = 1;
  double confidence_threshold = 0.005;

  // Throws Error(kInvalidArgument) naming the knob, with transformers' rules: steps > 0,
  // 0 <= t_min < t_max, stability_threshold >= 0, confidence_threshold > 0, entropy_bound > 0; and
  // canvas_length >= 0.
  void Validate(const std::string& where) const;
  // The keys present in `gen` over the defaults, validated. A sampler_config whose _cls_name is not
  // EntropyBoundSamplerConfig is Error(kUnsupported); a wrongly typed value Error(kCorrupt).
  static CanvasSamplerParams FromGenerationConfig(const nlohmann::json& gen, const std::string& where);
};

// Temperature of the step with `steps_remaining` = N, N-1, ..., 1 (N = max_denoising_steps):
// t_min + (t_max - t_min) * steps_remaining / N; the first step runs at t_max, the last above t_min.
double CanvasTemperature(const CanvasSamplerParams& p, int64_t steps_remaining);

// The argmax of one row of processed logits (the lowest index among equal maxima). A row's entropy
// and sample: CanvasRowReference (backend/sampling.h).
int64_t RowArgmax(const float* z, int64_t vocab);

// Entropy-bound acceptance: rows in ascending entropy (ties by index), each accepted iff the entropies
// of the rows before it sum to at most `bound`: the accepted set is a prefix, its sum minus its largest
// entropy is within the bound, and the lowest-entropy row is always accepted. Returns 0/1 per row.
std::vector<uint8_t> AcceptByEntropyBound(const std::vector<double>& entropy, double bound);

// The next canvas: the sampled token on accepted rows, the fresh uniform draw elsewhere.
std::vector<int32_t> RenoiseCanvas(const std::vector<uint8_t>& accepted, const std::vector<int32_t>& sampled,
                                   const std::vector<int32_t>& noise);

// The stable-and-confident stop of one canvas: stable when the argmax canvas equals each of the last
// stability_threshold argmax canvases of this canvas (always, for threshold 0); confident when the mean
// row entropy is below confidence_threshold. Reset at each new canvas.
class CanvasStopRule {
 public:
  explicit CanvasStopRule(const CanvasSamplerParams& p) : k_(p.stability_threshold), q_(p.confidence_threshold) {}
  // Records this step's argmax canvas; true when the canvas stops after this step.
  bool Step(const std::vector<int32_t>& argmax, double mean_entropy);
  void Reset() { history_.clear(); }

 private:
  int64_t k_;
  double q_;
  std::deque<std::vector<int32_t>> history_;  // the last k_ argmax canvases, oldest first
};

}  // namespace tessera

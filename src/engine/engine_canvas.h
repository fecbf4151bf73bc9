// tessera engine: the per-sequence state of DiffusionGemma's canvas generation (docs/DIFFUSION_GEMMA.md
// section 6) and the trace of its random draws. The loop itself is Engine's (engine_canvas.cpp): each
// step a sequence's segment is [the last committed canvas (or the prompt's rest); the canvas being
// denoised], so a commit and the next canvas's first step share one forward.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

#include "engine/canvas_sampler.h"

namespace tessera {

// One denoising step of one sequence's canvas, as the engine ran it: every random draw it made and
// what it decided. EngineConfig::canvas_trace receives one per step (tests replay the draws through an
// independent implementation of section 6: tools/dgemma_fixtures/dgemma_doc_model.py).
struct CanvasStepTrace {
  std::string request_id;
  int32_t index = 0;            // the choice
  int64_t canvas = 0;           // 0-based canvas of the sequence
  int64_t step = 0;             // 0-based step within the canvas
  int64_t steps_remaining = 0;  // n = N, N-1, ..., 1
  double temperature = 0;
  std::vector<int32_t> input;     // the canvas denoised (step 0: the initial uniform draw)
  std::vector<float> logits;      // [C, vocab] the decoder's soft-capped logits (before / temperature)
  std::vector<double> uniforms;   // per row: the draw in [0, 1) the sample was taken with
  std::vector<int32_t> sampled;   // per row: the sample from softmax(logits / temperature)
  std::vector<int32_t> noise;     // per row: the fresh uniform token (used on rejected rows)
  std::vector<int32_t> argmax;
  std::vector<double> entropy;    // nats, of softmax(logits / temperature)
  std::vector<uint8_t> accepted;  // entropy-bound acceptance
  std::vector<int32_t> next;      // the next step's canvas
  bool stop = false;              // the canvas ends after this step (stable and confident, or no step left)
};

// A sequence generating canvases.
struct CanvasState {
  CanvasSamplerParams params;
  int64_t length = 0;          // C
  int64_t canvases_total = 0;  // max_tokens rounded up to whole canvases
  int64_t canvases_done = 0;   // committed (output) so far
  std::mt19937_64 rng;         // the request's seed (or a random one): every draw of section 6
  // The canvas being denoised: its tokens, the self-conditioning input of its next step ([C, hidden];
  // empty at the first step; on the backend's path the model keeps it instead, soft_kept, under the
  // sequence's arrival number: Segment::canvas_state), the steps left (n), the steps taken and the stop
  // rule's history.
  std::vector<int32_t> x;
  std::vector<float> soft;
  bool soft_kept = false;
  // The step's multinomial draws, one per row, taken when the step is planned (the backend samples
  // with them) and used up by its ApplyCanvasStep: a planned step that does not run keeps them.
  std::vector<double> uniforms;
  int64_t steps_remaining = 0;
  int64_t step = 0;
  CanvasStopRule stop_rule;
  // The host path's processed logits z of this step, [C, vocab]: rows of the forward's result, read by
  // the self-conditioning product at the end of the same step (null otherwise). Not a copy: a
  // DiffusionGemma canvas's z is 268 MB.
  const float* z = nullptr;
  int64_t decoder_forwards = 0;  // denoising steps run, over all canvases (HF's tokens_per_forward)
  int64_t hf_tokens = 0;         // new tokens up to and including the first end token (the same metric)

  explicit CanvasState(const CanvasSamplerParams& p) : params(p), stop_rule(p) {}
  double Uniform() { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
  int32_t Token(int64_t vocab) { return static_cast<int32_t>(Uniform() * static_cast<double>(vocab)); }
};

// What a forward gave back for one sequence's canvas rows. The backend's path (Segment::canvas_sample):
// each row's pick (the next step's self-conditioning input stays with the model: Segment::canvas_state),
// and the rows' logits only when traced.
// The host path (a grammar masks the rows one after another: ConstrainCanvasRows): the logits alone,
// divided and masked in place.
struct CanvasForwardRows {
  float* logits = nullptr;                 // [C, vocab] before the temperature, or null
  const CanvasRowPick* picks = nullptr;    // [C], the backend's path
};

}  // namespace tessera

// tessera model: a loaded checkpoint of one supported architecture and its caches (paged KV for
// the attention layers, recurrent-state slots for the Gated DeltaNet layers), and the forward
// pass over a ragged Batch. With tensor_parallel_size N > 1 the model is N rank-models (model/shard.h
// says what each holds), one backend and one thread each, driving the same forward and meeting in
// all-reduces / all-gathers (backend/communicator.h); from the outside it is one model, and
// Forward returns the whole logits.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/model_config.h"

namespace tessera {

struct LoadOptions {
  int threads = 0;             // 0: keep ThreadPool::Global() as it is
  std::string device = "cpu";  // "cpu" or "cuda" (weights, caches and activations on the GPU)
  // "auto": the safetensors checkpoint; "dummy": random non-zero weights of config.json's shapes
  // made on the backend (for benchmarks; only config.json is read).
  std::string load_format = "auto";
  std::function<void(const std::string&)> log;  // extra sink for load messages (spdlog always gets them)
  // Ranks the model is split over: on "cuda" GPUs 0..N-1 with NCCL, on "cpu" N simulated ranks
  // (CPU backends + an in-process communicator; for tests). Heads must divide by N (KV / GDN key
  // heads may also be fewer than N when N is a multiple of them); experts, FFN widths and the
  // vocabulary need not.
  int tensor_parallel_size = 1;
  // Element type of the paged KV cache: "f32" (default: the fixtures' precision) or "bf16" (half the
  // bytes a decode step reads and twice the tokens a pool holds; K and V rounded to bf16, as vLLM's
  // cache of a bf16 model). bf16 needs a backend that keeps it (cuda).
  std::string kv_cache_dtype = "f32";
  // Quantization at load (io/quant_config.h ParseLoadQuantization): "" / "none", "fp8", "int8" or
  // "int4": the float Linear weights of a bf16 checkpoint become that format as they are read.
  std::string quantization;
  // What the tensor-core products multiply (Backend::SetActivationPrecision): "f32" (default: exact,
  // the fixtures' 1e-3) or "bf16" (a GPU only: activations rounded to bf16 into the products; see
  // docs/CUDA.md for what it costs in accuracy and gains in speed).
  std::string activation_precision = "f32";
};

// "f32" or "bf16" (LoadOptions::kv_cache_dtype); throws Error(kInvalidArgument) for anything else.
DType ParseKvCacheDType(const std::string& name);
// LoadOptions::activation_precision: "f32" or "bf16"; anything else is Error(kInvalidArgument).
DType ParseActivationPrecision(const std::string& name);

// A tensor an architecture expects, under its flat (non-nested) checkpoint name.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  // Part of a second stack that other rows read instead of the first (an untied DiffusionGemma's
  // encoder stack): held in memory, but no row reads both (WeightCensus counts it apart).
  bool second_stack = false;
};

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& cfg);

struct ModelWeights;  // model/weights.h
struct ModelCaches;   // model/caches.h
class RankWorkers;    // model/rank_workers.h

class Model {
 public:
  // Reads config.json and the safetensors checkpoint of `dir`; throws Error naming the tensor for
  // a missing / unknown / wrongly shaped / wrongly typed tensor.
  static std::unique_ptr<Model> Load(const std::string& dir, const LoadOptions& opts = {});
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  ForwardResult Forward(const Batch& batch, const ForwardOptions& opts = {});

  // Canvas-decoder models (DiffusionGemma, docs/DIFFUSION_GEMMA.md 5): the next denoising step's
  // self-conditioning input (Segment::self_conditioning), [rows, hidden] on the host, from this step's
  // processed logits z = logits / temperature, [rows, vocab] on the host: softmax(z) @ embed_tokens *
  // embed_scale, z first rounded to the embedding's dtype as transformers stores it. The rows of several
  // canvases may go in one call (each output row depends on its own row only). Error(kUnsupported)
  // for other models.
  std::vector<float> SelfConditioningInput(const float* z, int64_t rows);
  // The self-conditioning inputs kept in backend memory (Segment::canvas_state): frees canvas `id`'s
  // (nothing when there is none), and how many are kept.
  void ReleaseCanvasState(int64_t id);
  int64_t kept_canvas_states() const;

  // Cache storage, sized by the engine. Re-allocating drops all cached content.
  void AllocateCaches(int64_t num_pages, int64_t page_size, int64_t num_state_slots);
  int64_t page_size() const;
  int64_t num_pages() const;
  int64_t num_state_slots() const;
  void CopyStateSlot(int32_t from, int32_t to);  // snapshot/restore of recurrent state
  void ResetStateSlot(int32_t slot);             // zero state for a new sequence

  // Forward() computes the logits rows of a step at most kLogitsChunkRows at a time (one lm_head
  // product a chunk, the chunk's rows consumed before the next): 64 DiffusionGemma canvases would
  // otherwise hold 16K x 262K f32 logits (16 GiB) and the self-conditioning product's split copy of
  // them. 2,048: every Qwen step up to 64 sequences of 32 rows is one chunk, as before.
  static constexpr int64_t kLogitsChunkRows = 2048;

  // Forward() returns logits on the host; callers of backend() ops use backend memory (backend.h).
  // The unsplit model's cache sizes (the sum over ranks when no KV / key head is replicated).
  // K and V of all attention layers with elements of kv_dtype (the backend's KvCacheDType()).
  static int64_t KvBytesPerToken(const ModelConfig& cfg, DType kv_dtype);
  static int64_t StateBytesPerSequence(const ModelConfig& cfg);  // f32 conv + recurrent state
  // What ONE rank (one GPU) holds per token / per state slot: the numbers a per-GPU memory budget
  // divides by. Equal to the static ones when tensor_parallel_size is 1.
  int64_t KvBytesPerTokenPerRank() const;
  int64_t StateBytesPerSequencePerRank() const;
  int tensor_parallel_size() const { return static_cast<int>(ranks_.size()); }

  // Rank 0's backend (the only one when tensor_parallel_size is 1).
  Backend& backend();
  // Element type of the KV cache pages (LoadOptions::kv_cache_dtype; every rank keeps the same).
  DType KvCacheDType() const;

 private:
  struct Rank;
  struct Prepared;
  Model();
  void ForwardRank(Rank& rank, const Prepared& p, const ForwardOptions& opts, ForwardResult* res);
  // Runs fn(rank) on every rank (on the rank threads when split) and marks the model unusable
  // when a rank fails (the group's collectives were aborted).
  void OnRanks(const std::function<void(Rank&)>& fn);
  ModelConfig cfg_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unique_ptr<RankWorkers> workers_;
  std::string broken_;  // why the split model is unusable ("" while it is fine)
};

}  // namespace tessera

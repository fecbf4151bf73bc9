// tessera model: a loaded checkpoint of one supported architecture and its caches (paged KV for
// the attention layers, recurrent-state slots for the Gated DeltaNet layers), and the forward
// pass over a ragged Batch.
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
  int threads = 0;  // 0: keep ThreadPool::Global() as it is
  std::string device = "cpu";       // "cpu" or "cuda" (weights, caches and activations on the GPU)
  // "auto": the safetensors checkpoint; "dummy": random non-zero weights of config.json's shapes
  // made on the backend (for benchmarks; only config.json is read).
  std::string load_format = "auto";
  std::function<void(const std::string&)> log;  // extra sink for load messages (spdlog always gets them)
};

// A tensor an architecture expects, under its flat (non-nested) checkpoint name.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& cfg);

struct ModelWeights;  // model/weights.h
struct ModelCaches;   // model/caches.h

class Model {
 public:
  // Reads config.json and the safetensors checkpoint of `dir`; throws Error naming the tensor for
  // a missing / unknown / wrongly shaped / wrongly typed tensor.
  static std::unique_ptr<Model> Load(const std::string& dir, const LoadOptions& opts = {});
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  ForwardResult Forward(const Batch& batch, const ForwardOptions& opts = {});

  // Cache storage, sized by the engine. Re-allocating drops all cached content.
  void AllocateCaches(int64_t num_pages, int64_t page_size, int64_t num_state_slots);
  int64_t page_size() const;
  int64_t num_pages() const;
  int64_t num_state_slots() const;
  void CopyStateSlot(int32_t from, int32_t to);  // snapshot/restore of recurrent state
  void ResetStateSlot(int32_t slot);             // zero state for a new sequence

  // Forward() returns logits on the host; callers of backend() ops use backend memory (backend.h).
  static int64_t KvBytesPerToken(const ModelConfig& cfg);         // f32 K and V, all attention layers
  static int64_t StateBytesPerSequence(const ModelConfig& cfg);   // f32 conv + recurrent state

  Backend& backend() { return *backend_; }

 private:
  Model();
  ModelConfig cfg_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<ModelCaches> caches_;
};

}  // namespace tessera

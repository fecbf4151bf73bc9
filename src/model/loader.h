// tessera model: the checkpoint loader. Every tensor of the checkpoint is accounted for: each
// expected tensor must exist with its shape and a float dtype (bf16 / f16 / f32), every tensor
// present must be consumed, except the known-unused groups (vision tower, MTP head), which are
// skipped by an explicit list and logged. bf16 tensors are used in place from the mapping.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/weights.h"

namespace tessera {

class WeightLoader {
 public:
  WeightLoader(const ModelConfig& cfg, const std::string& dir, ModelWeights* out,
               std::function<void(const std::string&)> log);

  // `flat` names are as in a flat checkpoint ("model.layers.0...."); nested Qwen3.5 checkpoints
  // are mapped to "model.language_model.*".
  bool Has(const std::string& flat) const;
  // Checks shape and dtype and marks the tensor consumed.
  const TensorView& View(const std::string& flat, const std::vector<int64_t>& shape);
  // A Linear weight: bf16 in place, f32/f16 converted once to f32.
  Tensor Matrix(const std::string& flat, const std::vector<int64_t>& shape);
  // A slice of rows [row0, row0 + rows) of a 2-D view of a checkpoint tensor (fused experts).
  Tensor MatrixRows(const TensorView& v, int64_t row0, int64_t rows, int64_t cols);
  // A small tensor as an owned f32 array.
  const float* Vector(const std::string& flat, const std::vector<int64_t>& shape);
  // A Linear weight whose rows are re-ordered: new row i = old row order[i].
  Tensor PermutedRows(const std::string& flat, const std::vector<int64_t>& shape,
                      const std::vector<int64_t>& order);
  // Fails on a tensor nobody consumed (and logs the skipped known-unused ones).
  void Finish();

 private:
  std::string CheckpointName(const std::string& flat) const;
  const ModelConfig& cfg_;
  std::string dir_;
  ModelWeights* out_;
  std::function<void(const std::string&)> log_;
  std::string prefix_;  // "model." or "model.language_model."
  std::set<std::string> consumed_;
};

void LoadModelWeights(const ModelConfig& cfg, const std::string& dir, ModelWeights* out,
                      std::function<void(const std::string&)> log);

}  // namespace tessera

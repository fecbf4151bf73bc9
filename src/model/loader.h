// tessera model: the checkpoint loader. Every tensor of the checkpoint is accounted for: each
// expected tensor must exist with its shape and a float dtype (bf16 / f16 / f32), every tensor
// present must be consumed, except the known-unused groups (vision tower, MTP head), which are
// skipped by an explicit list and logged. bf16 tensors are used in place from the mapping on the
// CPU backend (except stacked projections, StackedRows, which are copies); on a device backend
// every tensor is copied to device memory (matrices as bf16, vectors as f32) through the
// backend's pinned staging, with a progress line on stderr. Dummy
// weights (LoadOptions::load_format "dummy") are random tensors of the expected shapes made on the
// backend itself; no checkpoint is read.
// Quantized checkpoints (ModelConfig::quant): a Linear stored in its format's tensors (qweight ...,
// weight_packed ..., an fp8 / int8 weight with its scales) is read through QuantizedLinearReader and
// repacked into the canonical layout of core/quant.h (codes used in place from the mapping where they
// already are); a Linear stored as a float weight stays float. Quantization at load
// (ModelConfig::load_quant) turns the float Linear weights into that layout as they are read, except
// the embedding, the lm_head, the routers and the shared-expert gates (each a few rows; other engines
// keep them in float too).
// A rank of a tensor-parallel group (RankShard, model/shard.h) loads only its slices: contiguous
// row blocks stay in-place views of the mapping (or are copied straight to the device); column
// blocks and multi-block row sets are gathered into a copy of just the slice. Every rank still
// checks the shape and dtype of every tensor, so the accounting is the same as for one rank.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/shard.h"
#include "io/quant_formats.h"
#include "model/weights.h"

namespace tessera {

struct LoadTarget {
  Backend* be = nullptr;  // where the weights go (nullptr or a host backend: used in place)
  bool dummy = false;     // random weights of the expected shapes
  const RankShard* shard = nullptr;           // nullptr: the whole model
  std::shared_ptr<CheckpointReader> reader;   // shared by the ranks of a group (opened when null)
  bool progress = true;  // the stderr progress line (rank 0 only; shown when stderr is a terminal)
};

class WeightLoader {
 public:
  WeightLoader(const ModelConfig& cfg, const std::string& dir, ModelWeights* out,
               std::function<void(const std::string&)> log, const LoadTarget& target = {});
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  const RankShard& shard() const { return *shard_; }

  // `flat` names are as in a flat checkpoint ("model.layers.0...."); nested Qwen3.5 checkpoints
  // are mapped to "model.language_model.*".
  bool Has(const std::string& flat) const;
  // Checks shape and dtype and marks the tensor consumed.
  const TensorView& View(const std::string& flat, const std::vector<int64_t>& shape);
  // A Linear weight: bf16 in place, f32/f16 converted once to f32.
  Tensor Matrix(const std::string& flat, const std::vector<int64_t>& shape);
  // A slice of rows [row0, row0 + rows) of a 2-D view of a checkpoint tensor (fused experts);
  // quantized at load when `flat` (the tensor's flat name) is one quantization at load applies to.
  Tensor MatrixRows(const TensorView& v, int64_t row0, int64_t rows, int64_t cols, const std::string& flat = "");
  // Rows [row0, row0 + rows) of the tensor `flat` of full shape `shape` seen as 2-D with `cols` columns
  // (a fused experts tensor): MatrixRows of its view, or, for dummy weights, random rows of their own.
  Tensor FusedRows(const std::string& flat, const std::vector<int64_t>& shape, int64_t row0, int64_t rows,
                   int64_t cols);
  // A small tensor as an owned f32 array.
  const float* Vector(const std::string& flat, const std::vector<int64_t>& shape);
  // A Linear weight whose rows are re-ordered (and maybe a subset): new row i = old row order[i].
  Tensor PermutedRows(const std::string& flat, const std::vector<int64_t>& shape,
                      const std::vector<int64_t>& order);
  // Rows of several 2-D weights with the same column count stacked into one copy, part after part
  // (each part's rows in its given order): projections that read the same input then run as one
  // matrix product. bf16 when every part is bf16, else f32 (bf16 on a device, as ToDevice makes).
  struct StackPart {
    std::string flat;
    std::vector<int64_t> shape;
    std::vector<int64_t> rows;
  };
  Tensor StackedRows(const std::vector<StackPart>& parts);
  // As StackedRows, but parts stored in different formats (a float part beside quantized ones) become
  // separate projections, each with the column its rows start at in the stacked row.
  std::vector<GdnProjection> StackedProjections(const std::vector<StackPart>& parts);
  // The row indices of a list of row ranges, in order (a StackPart's rows).
  static std::vector<int64_t> RowsOf(const std::vector<IndexRange>& ranges);
  // The rows `rows` (in order) and columns `cols` of a 2-D weight of full shape `shape`.
  Tensor MatrixSlice(const std::string& flat, const std::vector<int64_t>& shape,
                     const std::vector<IndexRange>& rows, IndexRange cols);
  // The rows `rows` of a small tensor (first dimension) as an f32 array.
  const float* VectorRows(const std::string& flat, const std::vector<int64_t>& shape,
                          const std::vector<IndexRange>& rows);
  // Embedding rows `rows` plus one zero row at the end (where ids of other ranks' rows point).
  Tensor EmbeddingShard(const std::string& flat, const std::vector<int64_t>& shape, IndexRange rows);
  // A vector computed at load (e.g. a product of checkpoint vectors, or all ones) placed on the target
  // like Vector's result (owned host memory, or device memory).
  const float* HostVector(std::vector<float> values);
  // A one-element tensor's value on the host (Gemma's layer_scalar), marked consumed.
  float Scalar(const std::string& flat);
  bool dummy() const { return dummy_; }
  // Checks a tensor this rank does not hold (another rank's expert) and marks it consumed.
  void Validate(const std::string& flat, const std::vector<int64_t>& shape);
  // An all-zero expert [inter, hidden] / [hidden, inter]: stands for experts of other ranks (its
  // output is zero, so their routing slots add nothing here).
  ExpertWeights ZeroExpert(int64_t inter, int64_t hidden);
  // Fails on a tensor nobody consumed (and logs the skipped known-unused ones).
  void Finish();

 private:
  std::string CheckpointName(const std::string& flat) const;
  bool OnDevice() const { return be_ && be_->IsDevice(); }
  // The device copy of a host tensor (bf16 matrices; f32 / f16 converted to bf16).
  Tensor ToDevice(const Tensor& host);
  const float* ToDeviceF32(const float* host, int64_t n);
  // `part` varies the seed between pieces of one tensor (FusedRows' row blocks).
  Tensor DummyMatrix(const std::string& flat, const std::vector<int64_t>& shape, uint64_t part = 0);
  // StackedRows of parts that are all float (quantized at load when that applies).
  Tensor StackedFloatRows(const std::vector<StackPart>& parts);
  // Random codes and scales of the quantized format `kind` (dummy weights of a quantized model).
  Tensor DummyQuantMatrix(const std::string& flat, int64_t n, int64_t k, QuantKind kind);
  // The checkpoint module of a flat ".weight" name when it is stored quantized, else "".
  std::string QuantizedModule(const std::string& flat) const;
  // Reads a quantized module (consuming its tensors).
  QuantizedMatrix ReadQuantized(const std::string& module, int64_t n, int64_t k);
  // Whether quantization at load applies to this flat weight name.
  bool QuantizeAtLoad(const std::string& flat) const;
  // A quantized matrix on the target: owned host arrays (codes in place when they are) or device copies.
  Tensor PlaceQuantized(QuantizedMatrix&& q);
  // Drops the host staging copy `t` (the last owned buffer of its dtype) once its placed copy exists.
  void DropStaging(const Tensor& t);
  // A float host tensor quantized at load (when QuantizeAtLoad(flat)), then placed; else `host` as
  // the float path places it.
  Tensor MaybeQuantize(const std::string& flat, const Tensor& host);
  // The dummy / checkpoint code type of quantized Linear weights (kNone: float).
  QuantKind WeightKind() const;
  const float* DummyVector(const std::string& flat, const std::vector<int64_t>& shape);
  // A copy of rows x cols of v (full_cols per row) plus zero_rows zero rows, on the target.
  Tensor GatherCopy(const TensorView& v, int64_t full_cols, const std::vector<IndexRange>& rows, IndexRange cols,
                    int64_t zero_rows);
  void Progress(size_t bytes);
  const ModelConfig& cfg_;
  std::string dir_;
  ModelWeights* out_;
  std::function<void(const std::string&)> log_;
  std::string prefix_;  // "model." or "model.language_model."
  std::set<std::string> consumed_;
  Backend* be_ = nullptr;
  bool dummy_ = false;
  bool progress_ = true;  // the stderr progress line: asked for, and stderr is a terminal
  bool finished_ = false;  // Finish() ran (the progress line ended there)
  RankShard whole_;
  const RankShard* shard_ = &whole_;
  bool have_zero_expert_ = false;
  ExpertWeights zero_expert_;
  std::set<std::string> expected_;  // dummy: the flat names of the expected tensors
  std::unique_ptr<QuantizedLinearReader> quant_;  // quantized checkpoints
  size_t total_bytes_ = 0, done_bytes_ = 0;
  int last_percent_ = -1;
};

// A gated MLP "<p>{gate,up,down}_proj.weight" split column- then row-parallel: gate / up rows and
// down columns `part` of `inter`.
MlpWeights LoadMlp(WeightLoader& L, const std::string& p, int64_t inter, int64_t hidden, IndexRange part);
// The routed experts "<p>experts.*" (per expert, or fused gate_up_proj / down_proj), expert-parallel.
void LoadExperts(const ModelConfig& c, WeightLoader& L, const std::string& p, MoeWeights* moe);

void LoadModelWeights(const ModelConfig& cfg, const std::string& dir, ModelWeights* out,
                      std::function<void(const std::string&)> log, const LoadTarget& target = {});

}  // namespace tessera

// tessera cuda backend: backend.h on one CUDA device (Hopper, sm_90a). All ops are queued on one
// stream; activations are f32 device buffers, weights bf16 (f32 weights are accepted by MatMul). Which
// kernel serves which op at which row count (the GEMV, the few-row MMA kernels, cuBLASLt's hi + lo
// GEMMs, the attention and MoE kernels) is the table of docs/CUDA.md, "Kernels". Device memory comes
// from a caching allocator (freed blocks are kept per size and reused in stream order).
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_kv_layout.h"
#include "backend/cuda/cuda_op_profiler.h"
#include "backend/cuda/cuda_quant.h"
#include "backend/cuda/cuda_step_graph.h"

namespace tessera {

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;
  const char* Name() const override { return "cuda"; }

  bool IsDevice() const override { return true; }
  void* Allocate(size_t bytes) override;
  void Free(void* p) override;
  void Upload(void* dst, const void* src, size_t bytes) override;
  void Download(void* dst, const void* src, size_t bytes) override;
  void CopyBuffer(void* dst, const void* src, size_t bytes) override;
  void Zero(void* dst, size_t bytes) override;
  void Synchronize() override;
  bool MemoryInfo(int64_t* free_bytes, int64_t* total_bytes) override;
  void ProfileReset() override;
  std::string ProfileReport() override;
  void FillRandom(void* dst, DType dtype, int64_t n, float scale, float offset, uint64_t seed) override;
  // Steps run as CUDA graphs (cuda_step_graph.h); TESSERA_CUDA_GRAPHS=0 or the profiler turns this
  // off (the profile times ops one by one).
  void BeginStep() override;
  void EndStep() override;
  std::string StepSummary() override;

  void MatMul(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate) override;
  void MatMulMulti(const float* x, int64_t m, const std::vector<MatMulOut>& outs) override;
  // The Gemma family's ops (cuda_backend_gemma.cpp): the self-conditioning product (cuBLASLt, hi + lo as
  // MatMul's large products), RoPE with a caller's table, gelu-tanh gating, scaling, the logit soft-cap,
  // the router's per-expert scales and gelu-tanh experts.
  void MatMulNoTrans(const float* x, int64_t m, const Tensor& w, float* y) override;
  void RopePairs(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t pair_offset,
                 int64_t rotated_pairs, const float* inv_freq, const int64_t* positions) override;
  void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) override;
  void Scale(float* x, int64_t n, float s) override;
  void SoftCap(float* x, int64_t n, float cap) override;
  void ScaleByIndex(float* x, const int32_t* idx, int64_t n, const float* table) override;
  void MoeExpertsAct(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights, int64_t k,
                     const std::vector<ExpertWeights>& experts, GluAct act, float* out) override;
  void Embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) override;
  void RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w, float eps,
               bool one_plus, float* y, int64_t y_stride) override;
  void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w, float eps,
                    float* y) override;
  void QkNormRope(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride, int64_t k_heads,
                  int64_t rows, int64_t head_dim, const float* q_norm, const float* k_norm, float eps, bool one_plus,
                  int64_t rotary_dim, const int64_t* positions, double theta) override;
  void QkNormRopeKvWrite(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride, int64_t k_heads,
                         int64_t rows, int64_t head_dim, const float* q_norm, const float* k_norm, float eps,
                         bool one_plus, int64_t rotary_dim, const int64_t* positions, double theta,
                         const KvRowWrites& kv) override;
  void Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const int64_t* positions, double theta) override;
  void SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate,
                   int64_t gate_stride) override;
  void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* s) override;
  void DivideRows(float* x, int64_t rows, int64_t dim, const float* divisors) override;
  void SiluMul(const float* gate, const float* up, int64_t n, float* out) override;
  void SiluMulScaleRows(const float* gate, const float* up, int64_t rows, int64_t dim, const float* s,
                        float* out) override;
  void Add(const float* x, int64_t n, float* y) override;
  void AddRmsNorm(const float* delta, float* h, int64_t rows, int64_t dim, const float* w, float eps, bool one_plus,
                  float* y) override;
  void Copy2D(const float* src, int64_t rows, int64_t cols, int64_t src_stride, float* dst,
              int64_t dst_stride) override;

  DType KvCacheDType() const override { return kv_dtype_; }
  void SetKvCacheDType(DType dtype) override;
  DType ActivationPrecision() const override { return exact_activations_ ? DType::kF32 : DType::kBF16; }
  void SetActivationPrecision(DType dtype) override;
  void KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim, int64_t first_pos,
               const int32_t* pages, int64_t page_size, void* k_cache, void* v_cache) override;
  void KvWriteRows(const float* k, const float* v, int64_t kv_stride, int64_t kv_dim, const int64_t* src_rows,
                   const int64_t* cache_rows, int64_t n, void* k_cache, void* v_cache) override;
  void Attention(const AttentionArgs& a) override;
  void AttentionBatch(const std::vector<AttentionArgs>& args) override;

  void CausalConv1dSilu(const float* x, int64_t T, int64_t x_stride, int64_t channels, const float* w,
                        int64_t K, const float* state, float* y) override;
  void CausalConv1dUpdateState(const float* x, int64_t T, int64_t x_stride, int64_t channels, int64_t K,
                               float* state) override;
  void GatedDeltaRule(const GatedDeltaArgs& a, GdnMode mode) override;
  void CausalConv1dSiluBatch(const float* x, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                             const std::vector<ConvSegment>& segs, float* y) override;
  void CausalConv1dUpdateStateBatch(const float* x, int64_t x_stride, int64_t channels, int64_t K,
                                    const std::vector<ConvSegment>& segs) override;
  // One-row segments (decode): one kernel (cuda::CausalConv1dSiluUpdateRows).
  void CausalConv1dSiluUpdateBatch(const float* x, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                                   const std::vector<ConvSegment>& segs, float* y) override;
  void GatedDeltaRuleBatch(const std::vector<GatedDeltaArgs>& runs, GdnMode mode) override;
  void GdnGates(const float* a, const float* b, int64_t T, int64_t heads, int64_t a_stride, int64_t b_stride,
                const float* a_log, const float* dt_bias, float* g, float* beta, int64_t out_stride) override;

  void CountIds(const int32_t* idx, int64_t n, int64_t num_experts, int32_t* counts) override;
  void MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k, bool renormalize,
                int32_t* idx, float* weights) override;
  // Few-token steps route in the gate/up kernel (cuda::MoeGateUpRouted).
  void MoeRouteExperts(const float* logits, const float* x, int64_t rows, int64_t hidden, int64_t k, bool renormalize,
                       int32_t* idx, float* weights, const std::vector<ExpertWeights>& experts, float* out,
                       const ResidualNorm* residual = nullptr) override;
  void MoeExperts(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                  int64_t k, const std::vector<ExpertWeights>& experts, float* out) override;

  void Softmax(float* x, int64_t rows, int64_t n) override;
  void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out) override;
  // On the device (cuda_backend_sampling.cpp, cuda_sampling.cu): every row is finished there.
  void MaskLogitsRows(float* logits, int64_t vocab, const int64_t* rows, int64_t n, const uint32_t* words) override;
  void SampleRows(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params, int32_t* tokens,
                  float* probs) override;
  // On the device (cuda_backend_sampling.cpp, cuda_canvas_sampling.cu): a canvas step's rows stay there,
  // only their picks are written.
  void CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowRule* rules, bool round_z_to_bf16,
                        CanvasRowPick* picks) override;

  cudaStream_t stream() const { return stream_; }
  // Bytes held by the caching allocator (in use + cached).
  size_t reserved_bytes() const { return reserved_; }

  // MoE expert paths by the number of (row, expert) pairs: up to kMoeFusedMaxSlots the fused
  // per-pair kernels (one token: every expert has one row anyway); up to moe_device_max_slots_ the
  // device-grouped kernels (batched decode, diffusion blocks, prompt chunks: each expert's weights
  // streamed once per 16 rows, no host round trip); above it the host-grouped path: ids to the
  // host, gather, per-expert cuBLASLt GEMMs, scatter.
  static constexpr int64_t kMoeFusedMaxSlots = 16;
  // Largest pair counts for the device-grouped kernels: on tensor cores (a 4,096-token prompt chunk
  // of top-8) and on CUDA cores (also the limit of the per-pair kernels for unaligned shapes).
  static constexpr int64_t kMoeMmaMaxSlots = 32768;
  static constexpr int64_t kMoeSimtMaxSlots = 4096;

 private:
  struct GemmPlan;
  // MoeExperts with MoeRouteExperts' optional residual add and norm; the slots' sum that ends it.
  // gelu: the experts' gate activation is gelu-tanh (Gemma) instead of SiLU.
  void ExpertsInto(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights, int64_t k,
                   const std::vector<ExpertWeights>& experts, float* out, const ResidualNorm* residual,
                   bool gelu = false);
  void SumSlotsInto(const float* slot_out, int64_t rows, int64_t k, int64_t hidden, float* out,
                    const ResidualNorm* residual);
  // The device array of a layer's expert weight pointers (MoeExperts' kernels index it).
  struct ExpertTable {
    std::vector<const void*> host;  // [gate..., up..., down...]
    DeviceBuffer dev;
    bool aligned = true;  // every pointer 16-byte aligned (vector loads)
    // The same matrices as the wgmma kernel's bf16 rows (cuda::kBf16Rows): [3 * E] cuda::QuantMatrix,
    // and expert 0's gate and down on the host.
    DeviceBuffer wgmma;
    cuda::QuantMatrix gate0, down0;
  };
  // A host array copied to device memory in stream order for the op being queued. Small arrays go
  // through the pinned scratch ring (a truly asynchronous copy: no driver staging, no stream sync);
  // larger ones get an owned buffer (freed after the op, reused in stream order).
  struct ScratchArray {
    const void* data = nullptr;
    DeviceBuffer owned;
    const int32_t* i32() const { return static_cast<const int32_t*>(data); }
    const float* f32() const { return static_cast<const float*>(data); }
  };
  void Check(cudaError_t e, const char* what) const;
  void CheckLaunch(const char* what) const;
  // Queues fn(args...) on the stream now, or records it when a step is being recorded. Every stream
  // operation of an op goes through here (a launcher called directly would run out of order).
  template <class R, class... P, class... A>
  void Enqueue(const char* what, R (*fn)(P...), A&&... args) {
    if (graphs_->recording()) {
      graphs_->Add(what, fn, std::forward<A>(args)...);
      if (graphs_->recorded() >= step_chunk_commands_) FlushChunk();
      return;
    }
    fn(std::forward<A>(args)...);
    CheckLaunch(what);
  }
  // Queues the step being recorded, if any (before anything that waits for the device or reads the
  // host memory of the call).
  void FlushStep();
  // Queues the chunk of the step recorded so far and records the rest as the next chunk: the GPU
  // starts on a step while the host is still recording it (cuda_step_graph.h).
  void FlushChunk();
  static void RunGemm(void* lt, const GemmPlan* plan, const void* w, const void* x, float* y, bool accumulate,
                      void* workspace, size_t workspace_bytes, cudaStream_t s);
  ScratchArray UploadScratch(const void* src, size_t bytes);
  // inv_freq of RoPE for (theta, rotary_dim), computed once and kept on the device.
  const float* RopeInvFreq(double theta, int64_t rotary_dim);
  // Whether a bf16 product of m rows, depth k and `cols` output columns (all `weights` weights of a
  // MatMulMulti) goes to the MMA kernel (cuda_skinny_gemm.cu) rather than cuBLASLt.
  bool UseSkinnyGemm(int64_t m, int64_t k, int64_t cols, int64_t weights) const;
  // y[m, n] (+)= x[m, k] w^T with w [n, k] (row-major), or with w_no_trans x w with w [k, n]
  // (MatMulNoTrans: the embedding table as stored).
  void GemmLt(const void* w, bool w_bf16, const void* x, int64_t m, int64_t k, int64_t n, float* y,
              bool accumulate, bool w_no_trans = false);
  const ExpertTable& ExpertPointers(const std::vector<ExpertWeights>& experts);
  // Quantized weights (cuda_quant.h): the kernels' view of a Tensor, kept per weight (its host
  // address is what recorded steps see); products of few rows in registers, larger ones through f32
  // scratch and cuBLASLt; routed experts on the tiled kernels (per pair or grouped by expert), or,
  // for permuted / W8A8 / unaligned matrices, the per-pair staged kernels and host-grouped products.
  const cuda::QuantMatrix* QuantView(const Tensor& w);
  void QuantMatMul(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate);
  bool QuantTiledTakes(const float* x, const Tensor& w, const cuda::QuantMatrix& q);
  bool QuantGemvMulti(const float* x, const std::vector<MatMulOut>& outs);
  struct QuantExpertTable {
    std::vector<const void*> codes;  // identity of the layer's experts
    DeviceBuffer dev;                // [3 * E] cuda::QuantMatrix
    bool vec = true;
    // Every matrix takes the tiled kernels (cuda::QuantTiledOk) and shares expert 0's kind, zero
    // points, and (gate with up) group size; gate0 / down0 are expert 0's, on the host.
    bool tiled = false;
    // Every matrix takes the tensor-core kernels (cuda::QuantMmaOk), gate and up share expert 0's
    // kind, zero points, group and W8A8 rule (scheme and static scale), as the down matrices share
    // expert 0's: one coding of a row of x serves every gate and up, one of a pair's activations
    // every down.
    bool mma = false;
    // ... with W8A8 rules: their inputs go in as codes (cuda::QuantPrepareInputCodes).
    bool w8a8 = false;
    // ... and the wgmma kernel (cuda::QuantWgmmaOk at a prompt's rows; W8A8 as codes too).
    bool wgmma = false;
    cuda::QuantMatrix gate0, down0;
  };
  const QuantExpertTable& QuantExperts(const std::vector<ExpertWeights>& experts);
  // The quantized expert paths of ExpertsInto, on the layer's table (QuantExperts); false: nothing
  // queued, the matrices or the input do not suit the path.
  bool QuantTiledExperts(const QuantExpertTable& qt, const float* x, int64_t rows, int64_t hidden, const int32_t* idx,
                         const float* weights, int64_t k, const std::vector<ExpertWeights>& experts, float* out,
                         const ResidualNorm* residual);
  bool QuantMmaExperts(const QuantExpertTable& qt, const float* x, int64_t rows, int64_t hidden, const int32_t* idx,
                       const float* weights, int64_t k, const std::vector<ExpertWeights>& experts, float* out,
                       const ResidualNorm* residual, bool gelu);
  // The (row, slot) pairs grouped by expert on the device into units of unit_rows (MoeGroupByExpert),
  // slot_out zeroed first: a pair whose expert id were out of range is in no unit, its slot sums as zero.
  struct ExpertUnits {
    DeviceBuffer order, units, num_units;  // [slots] int32, [max_units] int4, [1] int32
    int64_t max_units = 0;
    const int4* list() const { return static_cast<const int4*>(units.data()); }
  };
  ExpertUnits GroupByExpert(const int32_t* idx, int64_t slots, int64_t E, int unit_rows, const DeviceBuffer& slot_out);
  // Routed experts of a prompt-sized batch on the wgmma kernel (cuda_quant_wgmma.cu), quantized or bf16
  // rows (table: [3 E] matrices on the device, gate0 / down0 expert 0's on the host): grouped by expert
  // into units of cuda::kQuantWgmmaUnitRows, the slots' sum into out. W8A8 (x_scale not null): x holds
  // the rows' codes and x_scale their factors.
  void WgmmaExperts(const float* x, const float* x_scale, int64_t rows, int64_t hidden, const int32_t* idx,
                    const float* weights, int64_t k, int64_t E, int64_t inter, const cuda::QuantMatrix* table,
                    const cuda::QuantMatrix& gate0, const cuda::QuantMatrix& down0, bool exact, bool gelu, float* out,
                    const ResidualNorm* residual);
  void HostGroupedExperts(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                          int64_t k, const std::vector<ExpertWeights>& experts, float* slot_out, bool gelu = false);
  std::unordered_map<const void*, std::unique_ptr<cuda::QuantMatrix>> quant_views_;
  std::unordered_map<const void*, std::unique_ptr<QuantExpertTable>> quant_expert_tables_;

  int device_ = 0;
  int sm_count_ = 1;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::OpProfiler> profiler_;  // TESSERA_CUDA_PROFILE=1
  std::unique_ptr<cuda::StepGraphs> graphs_;
  bool step_graphs_ = true;                      // TESSERA_CUDA_GRAPHS=0: every op queued at once
  bool moe_tensor_cores_ = true;                 // device-grouped experts on bf16 MMA
  bool flash_attention_ = true;                  // tensor-core flash attention where it applies
  bool decode_attention_ = true;                 // the decode kernel for calls of one-row tiles
  bool wgmma_attention_ = true;                  // many-row calls on the wgmma kernel where it applies
  DType kv_dtype_ = DType::kF32;                 // element type of the paged KV cache (SetKvCacheDType)
  // f32 activations into the tensor-core products (hi + lo); false: bf16 (SetActivationPrecision).
  bool exact_activations_ = true;
  bool ExactActivations() const { return exact_activations_; }
  // The layout of this backend's cache for rows of kv_dim values.
  cuda::KvLayout KvLayoutFor(int64_t kv_dim) const {
    return kv_dtype_ == DType::kBF16 ? cuda::KvLayout::kBf16 : cuda::F32KvLayout(kv_dim);
  }
  int64_t skinny_max_rows_ = 0;                  // bf16 products of 9..this many rows on the MMA kernel
  int64_t skinny_tiled_max_work_ = 0;            // ... past 64 rows only up to this m n k per weight
  int64_t moe_device_max_slots_ = kMoeMmaMaxSlots;  // kMoeSimtMaxSlots with the CUDA-core kernels
  void* lt_ = nullptr;  // cublasLtHandle_t
  DeviceBuffer workspace_;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool, uint32_t, bool>, std::unique_ptr<GemmPlan>> plans_;
  std::unordered_map<const void*, std::unique_ptr<ExpertTable>> expert_tables_;
  // Caching allocator.
  std::unordered_map<void*, size_t> live_;
  // Free blocks by size; the lowest address is handed out first, so a forward gets the same blocks
  // whatever order the previous one freed them in (equal steps keep their CUDA graph).
  std::unordered_map<size_t, std::set<void*>> cached_;
  size_t reserved_ = 0;
  void* staging_ = nullptr;  // pinned host buffer for uploads
  size_t staging_bytes_ = 0;
  // Scratch ring: a pinned host ring and a device ring of the same size, used in two halves. Before
  // the host writes a half again it waits for the event recorded when it last left that half (all
  // copies out of it have run by then); device reads are ordered by the stream.
  char* ring_host_ = nullptr;
  char* ring_dev_ = nullptr;
  size_t ring_head_ = 0;
  size_t chunk_ring_start_ = 0;  // scratch of the step's chunks before the one being recorded is queued
  // Commands of a step's chunk: a short first one (the GPU waits for its recording), then longer ones
  // (recorded while the GPU runs the chunks before). TESSERA_CUDA_GRAPH_CHUNK=N: N commands each
  // (0: one graph a step).
  size_t step_chunk_commands_ = 0;
  size_t first_chunk_commands_ = 0, next_chunk_commands_ = 0;
  int ring_half_ = 0;  // the half ring_head_ is in
  cudaEvent_t ring_half_done_[2] = {nullptr, nullptr};
  std::map<std::pair<double, int64_t>, DeviceBuffer> rope_inv_freq_;
};

}  // namespace tessera

// tessera cpu backend: the reference implementation of backend.h. Heavy loops (GEMM rows,
// attention heads, GDN heads, experts) run on ThreadPool::Global(); every op's result for a row
// depends only on that row's inputs, so batching never changes a result.
#pragma once

#include "backend/backend.h"

namespace tessera {

class ThreadPool;

class CpuBackend : public Backend {
 public:
  CpuBackend();
  const char* Name() const override { return "cpu"; }

  void MatMul(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate) override;
  void MatMulMulti(const float* x, int64_t m, const std::vector<MatMulOut>& outs) override;
  void MatMulNoTrans(const float* x, int64_t m, const Tensor& w, float* y) override;
  void Embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) override;
  void RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w, float eps,
               bool one_plus, float* y, int64_t y_stride) override;
  void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w, float eps,
                    float* y) override;
  void Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
            int64_t rotary_dim, const int64_t* positions, double theta) override;
  void SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate,
                   int64_t gate_stride) override;
  void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* s) override;
  void DivideRows(float* x, int64_t rows, int64_t dim, const float* divisors) override;
  void SiluMul(const float* gate, const float* up, int64_t n, float* out) override;
  void RopePairs(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t pair_offset,
                 int64_t rotated_pairs, const float* inv_freq, const int64_t* positions) override;
  void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) override;
  void Scale(float* x, int64_t n, float s) override;
  void SoftCap(float* x, int64_t n, float cap) override;
  void ScaleByIndex(float* x, const int32_t* idx, int64_t n, const float* table) override;
  void Add(const float* x, int64_t n, float* y) override;
  void Copy2D(const float* src, int64_t rows, int64_t cols, int64_t src_stride, float* dst,
              int64_t dst_stride) override;

  void KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim,
               int64_t first_pos, const int32_t* pages, int64_t page_size, void* k_cache,
               void* v_cache) override;
  void Attention(const AttentionArgs& a) override;
  void AttentionBatch(const std::vector<AttentionArgs>& args) override;

  void CausalConv1dSilu(const float* x, int64_t T, int64_t x_stride, int64_t channels, const float* w,
                        int64_t K, const float* state, float* y) override;
  void CausalConv1dUpdateState(const float* x, int64_t T, int64_t x_stride, int64_t channels, int64_t K,
                               float* state) override;
  void GatedDeltaRule(const GatedDeltaArgs& a, GdnMode mode) override;
  void GdnGates(const float* a, const float* b, int64_t T, int64_t heads, int64_t a_stride, int64_t b_stride,
                const float* a_log, const float* dt_bias, float* g, float* beta, int64_t out_stride) override;

  void MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k, bool renormalize,
                int32_t* idx, float* weights) override;
  void MoeExperts(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                  int64_t k, const std::vector<ExpertWeights>& experts, float* out) override;
  void MoeExpertsAct(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                     int64_t k, const std::vector<ExpertWeights>& experts, GluAct act, float* out) override;

  void Softmax(float* x, int64_t rows, int64_t n) override;
  // Rows in parallel: a canvas step has C = 256 rows of a 262K vocabulary.
  void CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowRule* rules, bool round_z_to_bf16,
                        CanvasRowPick* picks) override;
  void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out) override;

  // Below this many tokens GdnMode::kAuto runs the recurrent form.
  static constexpr int64_t kGdnChunk = 64;

 private:
  ThreadPool* pool_;
};

// The two forms of the gated delta rule for one value head (exposed for the unit tests).
// q, k: [T, key_dim] already L2-normalised, q scaled; v: [T, value_dim]; state [key_dim, value_dim].
void GatedDeltaHeadRecurrent(const float* q, const float* k, int64_t qk_stride, const float* v,
                             int64_t v_stride, const float* g, const float* beta, int64_t gb_stride,
                             int64_t T, int64_t dk, int64_t dv, float* state, float* out,
                             int64_t out_stride);
void GatedDeltaHeadChunked(const float* q, const float* k, int64_t qk_stride, const float* v,
                           int64_t v_stride, const float* g, const float* beta, int64_t gb_stride,
                           int64_t T, int64_t dk, int64_t dv, float* state, float* out,
                           int64_t out_stride, int64_t chunk);

}  // namespace tessera

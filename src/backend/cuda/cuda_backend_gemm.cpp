// tessera cuda backend: the dense products of CudaBackend: MatMul and MatMulMulti by row count
// (the GEMV for <= 8 rows, the MMA kernel of cuda_skinny_gemm.cu for few rows and small products,
// cuBLASLt's hi + lo GEMMs otherwise) and the cached cuBLASLt plans. See cuda_backend.h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_gemm_plan.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

namespace tessera {

// --- GEMM ------------------------------------------------------------------------------------

// y[m, n] (+)= x[m, k] w[n, k]^T. Column-major view: y^T (n x m) = w (k x n)^T x^T (k x m).
// w_no_trans: y = x w with w [k, n] row-major, which column-major is n x k: y^T = w x^T, A untransposed.
void CudaBackend::GemmLt(const void* w, bool bf16, const void* x, int64_t m, int64_t k, int64_t n, float* y,
                         bool accumulate, bool w_no_trans) {
  // Plans are chosen for the pointers' alignment (cuBLASLt assumes 256 bytes unless told).
  uint32_t align = 256;
  for (const void* p : {static_cast<const void*>(w), x, static_cast<const void*>(y)})
    while (align > 4 && (reinterpret_cast<uintptr_t>(p) & (align - 1))) align >>= 1;
  auto key = std::make_tuple(m, n, k, bf16, accumulate, align, w_no_trans);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto plan = std::make_unique<GemmPlan>();
    const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cuda::CheckLt(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t ta = w_no_trans ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cuda::CheckLt(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
    cuda::CheckLt(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
    if (w_no_trans)
      cuda::CheckLt(cublasLtMatrixLayoutCreate(&plan->a, in, n, k, n), "layout A");
    else
      cuda::CheckLt(cublasLtMatrixLayoutCreate(&plan->a, in, k, n, k), "layout A");
    cuda::CheckLt(cublasLtMatrixLayoutCreate(&plan->b, in, k, m, k), "layout B");
    cuda::CheckLt(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, n, m, n), "layout C");
    cublasLtMatmulPreference_t pref = nullptr;
    cuda::CheckLt(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    cuda::CheckLt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes_, sizeof(workspace_bytes_)),
                  "pref workspace");
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cuda::CheckLt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)), "pref alignment");
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(lt_), plan->op, plan->a,
                                                             plan->b, plan->c, plan->c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    cuda::CheckLt(st, "AlgoGetHeuristic");
    if (found == 0)
      Fail(ErrorKind::kUnsupported, "cuBLASLt has no algorithm for a {}x{}x{} {} GEMM", m, n, k, bf16 ? "bf16" : "f32");
    plan->algo = res.algo;
    it = plans_.emplace(key, std::move(plan)).first;
  }
  Enqueue("cublasLtMatmul", RunGemm, lt_, it->second.get(), w, x, y, accumulate, workspace_.data(), workspace_bytes_,
          stream_);
}

void CudaBackend::RunGemm(void* lt, const GemmPlan* plan, const void* w, const void* x, float* y, bool accumulate,
                          void* workspace, size_t workspace_bytes, cudaStream_t s) {
  // alpha and beta live in static storage: a recorded call runs after the caller's frame is gone.
  static const float kOne = 1.0f, kZero = 0.0f;
  cuda::CheckLt(
      cublasLtMatmul(static_cast<cublasLtHandle_t>(lt), plan->op, &kOne, w, plan->a, x, plan->b,
                     accumulate ? &kOne : &kZero, y, plan->c, y, plan->c, &plan->algo, workspace, workspace_bytes, s),
      "cublasLtMatmul");
}

// Up to 64 rows the MMA kernel beats cuBLASLt's two hi + lo GEMMs for most shapes. With more rows it
// re-reads each weight tile per row tile of 64 and runs at a fraction of cuBLASLt's rate, so it only
// takes small products (m n k <= kSkinnyGemmTiledMaxWork per weight), where cuBLASLt's ~20 us a call
// dominates: one launch of several weights replaces that many cuBLASLt calls (CudaBench.MatMulRows).
bool CudaBackend::UseSkinnyGemm(int64_t m, int64_t k, int64_t cols, int64_t weights) const {
  if (m <= cuda::kGemvMaxRows || m > skinny_max_rows_) return false;
  return m <= cuda::kSkinnyGemmMaxRows ||
         static_cast<double>(m) * cols * k <= static_cast<double>(skinny_tiled_max_work_) * weights;
}

void CudaBackend::MatMul(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate) {
  if (m == 0) return;
  if (w.shape.size() != 2) Fail(ErrorKind::kInternal, "matmul: weight is not 2-D");
  if (w.quantized()) return QuantMatMul(x, m, w, y, accumulate);
  const int64_t n = w.shape[0], k = w.shape[1];
  profiler_->Mark(m <= cuda::kGemvMaxRows         ? "MatMul gemv"
                  : !UseSkinnyGemm(m, k, n, 1)    ? "MatMul gemm"
                  : m <= cuda::kSkinnyGemmMaxRows ? "MatMul few-row mma"
                                                  : "MatMul row-tiled mma");
  if (w.dtype == DType::kBF16) {
    const auto* wb = static_cast<const uint16_t*>(w.data);
    if (m <= cuda::kGemvMaxRows) {
      Enqueue("GemvBf16", cuda::GemvBf16, x, m, k, wb, n, y, accumulate, stream_);
      return;
    }
    if (UseSkinnyGemm(m, k, n, 1) && cuda::SkinnyGemmFits(x, m, k, wb)) {
      DeviceBuffer x_split;
      if (const int64_t bytes = cuda::SkinnySplitBytes(m, k, &n, 1); bytes > 0) x_split = DeviceBuffer(*this, bytes);
      Enqueue("SkinnyGemm", cuda::SkinnyGemm, x, m, k, wb, n, y, accumulate, static_cast<uint16_t*>(x_split.data()),
              ExactActivations(), stream_);
      return;
    }
    // f32 activations as hi + lo bf16 parts: two tensor-core GEMMs keep ~16 mantissa bits of x
    // (a single bf16 rounding of x costs ~1e-3 relative error per layer, too much for the goldens).
    // bf16 activations: x rounded once, one GEMM.
    if (!ExactActivations()) {
      DeviceBuffer xb(*this, static_cast<size_t>(m * k) * 2);
      Enqueue("F32ToBf16", cuda::F32ToBf16, x, m * k, static_cast<uint16_t*>(xb.data()), stream_);
      GemmLt(wb, true, xb.data(), m, k, n, y, accumulate);
      return;
    }
    DeviceBuffer hi(*this, static_cast<size_t>(m * k) * 2), lo(*this, static_cast<size_t>(m * k) * 2);
    Enqueue("F32ToBf16Split", cuda::F32ToBf16Split, x, m * k, static_cast<uint16_t*>(hi.data()),
            static_cast<uint16_t*>(lo.data()), stream_);
    GemmLt(wb, true, hi.data(), m, k, n, y, accumulate);
    GemmLt(wb, true, lo.data(), m, k, n, y, true);
  } else if (w.dtype == DType::kF32) {
    GemmLt(w.data, false, x, m, k, n, y, accumulate);
  } else {
    Fail(ErrorKind::kUnsupported, "matmul: weight dtype {} is not supported on cuda", DTypeName(w.dtype));
  }
}

// bf16 weights of one k: one launch for up to 4 of them, by the GEMV (m <= 8) or the MMA kernel
// (m <= its row limit; decided here, before recording, as MatMul decides); anything else per weight.
void CudaBackend::MatMulMulti(const float* x, int64_t m, const std::vector<MatMulOut>& outs) {
  static_assert(cuda::kGemvMaxJobs == 4 && cuda::kSkinnyMaxJobs == 4, "four weights a launch");
  if (m == 1 && QuantGemvMulti(x, outs)) return;
  const bool gemv = m > 0 && m <= cuda::kGemvMaxRows;
  const int64_t k = !outs.empty() && outs[0].w->shape.size() == 2 ? outs[0].w->shape[1] : -1;
  int64_t cols = 0;
  for (const MatMulOut& o : outs) cols += o.w->shape.empty() ? 0 : o.w->shape[0];
  const auto weights = static_cast<int64_t>(outs.size());
  bool one_launch = (gemv || UseSkinnyGemm(m, k, cols, weights)) && !outs.empty() && outs.size() <= 4;
  const uint16_t* w[4] = {};
  float* y[4] = {};
  int64_t n[4] = {};
  for (size_t i = 0; one_launch && i < outs.size(); ++i) {
    const Tensor& t = *outs[i].w;
    one_launch = t.dtype == DType::kBF16 && t.shape.size() == 2 && t.shape[1] == k &&
                 (gemv || cuda::SkinnyGemmFits(x, m, k, static_cast<const uint16_t*>(t.data)));
    if (!one_launch) break;  // MatMul per weight reports what does not fit
    w[i] = static_cast<const uint16_t*>(t.data);
    y[i] = outs[i].y;
    n[i] = t.shape[0];
  }
  if (!one_launch) {
    Backend::MatMulMulti(x, m, outs);
    return;
  }
  if (gemv) {
    profiler_->Mark("MatMul gemv multi");
    Enqueue("GemvBf16Multi", cuda::GemvBf16Multi, x, m, k, w[0], n[0], y[0], w[1], n[1], y[1], w[2], n[2], y[2], w[3],
            n[3], y[3], stream_);
  } else {
    profiler_->Mark("MatMul few-row mma multi");
    DeviceBuffer x_split;
    if (const int64_t bytes = cuda::SkinnySplitBytes(m, k, n, static_cast<int>(outs.size())); bytes > 0)
      x_split = DeviceBuffer(*this, bytes);
    Enqueue("SkinnyGemmMulti", cuda::SkinnyGemmMulti, x, m, k, w[0], n[0], y[0], w[1], n[1], y[1], w[2], n[2], y[2],
            w[3], n[3], y[3], static_cast<uint16_t*>(x_split.data()), ExactActivations(), stream_);
  }
}

}  // namespace tessera

namespace tessera {

const cuda::QuantMatrix* CudaBackend::QuantView(const Tensor& w) {
  auto& slot = quant_views_[w.data];
  if (!slot) {
    auto v = std::make_unique<cuda::QuantMatrix>();
    const int64_t k = w.dim(1);
    v->codes = static_cast<const uint8_t*>(w.data);
    v->scales = w.quant.scales;
    v->zeros = w.quant.zeros;
    v->perm = w.quant.perm;
    v->row_bytes = QuantRowBytes(w.quant.kind, k);
    v->group = static_cast<int32_t>(w.quant.group);
    v->groups = static_cast<int32_t>(w.quant.Groups(k));
    v->kind = static_cast<int8_t>(w.quant.kind);
    v->act = static_cast<int8_t>(w.quant.act);
    v->act_scale = w.quant.act_scale;
    slot = std::move(v);
  }
  return slot.get();
}

// Whether one input row x takes the tiled quantized GEMV for w, whose view is q (weight-only codes,
// 16-byte vectors).
bool CudaBackend::QuantTiledTakes(const float* x, const Tensor& w, const cuda::QuantMatrix& q) {
  return w.dim(1) % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0 && cuda::QuantTiledOk(q);
}

// Batch-1 q / k / v on quantized weights: one tiled GEMV launch for up to kQuantGemvMaxJobs matrices of
// one k, kind and zero-point form (H100, int4 Qwen3-30B-A3B: three launches took 19.7 us a layer). False
// (nothing queued) where they differ or one does not take the tiled kernel.
bool CudaBackend::QuantGemvMulti(const float* x, const std::vector<MatMulOut>& outs) {
  if (outs.size() < 2 || outs.size() > static_cast<size_t>(cuda::kQuantGemvMaxJobs)) return false;
  const cuda::QuantMatrix* q[cuda::kQuantGemvMaxJobs] = {};
  float* y[cuda::kQuantGemvMaxJobs] = {};
  int64_t n[cuda::kQuantGemvMaxJobs] = {};
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& w = *outs[i].w;
    if (!w.quantized() || w.shape.size() != 2 || w.dim(1) != outs[0].w->dim(1)) return false;
    q[i] = QuantView(w);
    if (!QuantTiledTakes(x, w, *q[i]) || q[i]->kind != q[0]->kind ||
        (q[i]->zeros == nullptr) != (q[0]->zeros == nullptr))
      return false;
    y[i] = outs[i].y;
    n[i] = w.dim(0);
  }
  profiler_->Mark("MatMul quantized gemv tiled multi");
  Enqueue("QuantGemvTiled", cuda::QuantGemvTiled, x, q[0], n[0], y[0], q[1], n[1], y[1], q[2], n[2], y[2], false,
          stream_);
  return true;
}

void CudaBackend::QuantMatMul(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate) {
  const int64_t n = w.dim(0), k = w.dim(1);
  const cuda::QuantMatrix* q = QuantView(w);
  // One row: the tiled GEMV (batch-1 decode). More: the tensor-core kernels, which won from 2 rows up
  // (cuda_quant_tiled.cu); the staged GEMV and the f32-scratch GEMM take the shapes those refuse.
  if (m == 1 && QuantTiledTakes(x, w, *q)) {
    profiler_->Mark("MatMul quantized gemv tiled");
    const cuda::QuantMatrix* none = nullptr;
    Enqueue("QuantGemvTiled", cuda::QuantGemvTiled, x, q, n, y, none, int64_t{0}, static_cast<float*>(nullptr), none,
            int64_t{0}, static_cast<float*>(nullptr), accumulate, stream_);
    return;
  }
  const bool mma = cuda::QuantMmaOk(*q, k);
  if (cuda::QuantGemvFits(m, k) && !(m > 1 && mma)) {
    profiler_->Mark("MatMul quantized gemv");
    Enqueue("QuantGemv", cuda::QuantGemv, x, m, k, q, n, y, accumulate, stream_);
    return;
  }
  // Tensor cores on the codes: wgmma for many rows (cuda_quant_wgmma.cu), mma.sync otherwise
  // (cuda_quant_mma.cu). Act-order inputs are permuted first. W8A8 inputs go in as their 8-bit codes
  // (exact in bf16: one MMA, hi alone) with each row's scale applied to the result: their rounded
  // values (code x scale) split into bf16 hi + lo had lost ~2^-17, enough to flip the next layer's
  // 8-bit rounding near a boundary (QuantGolden.CudaMatchesTheCpu, H100: the FP8 W8A8 fixtures 0.29-0.35
  // of the CPU and 89-96 of 100 argmaxes, against 6.4e-5 and all on the f32 path).
  if (mma) {
    DeviceBuffer xp, row_scale;
    const float* xin = x;
    const float* scale = nullptr;
    bool exact = ExactActivations();
    if (w.quant.act != ActQuant::kNone) {
      xp = DeviceBuffer::Floats(*this, m * k);
      row_scale = DeviceBuffer::Floats(*this, m);
      Enqueue("QuantPrepareInputCodes", cuda::QuantPrepareInputCodes, x, m, k, q, xp.f32(), row_scale.f32(), stream_);
      xin = xp.f32();
      scale = row_scale.f32();
      exact = false;  // codes are exact in bf16
    } else if (w.quant.perm || (reinterpret_cast<uintptr_t>(x) & 15u) != 0) {
      xp = DeviceBuffer::Floats(*this, m * k);
      Enqueue("QuantPrepareInput", cuda::QuantPrepareInput, x, m, k, q, xp.f32(), stream_);
      xin = xp.f32();
    }
    if (cuda::QuantWgmmaOk(*q, m, k)) {
      profiler_->Mark("MatMul quantized wgmma");
      DeviceBuffer split(*this, (exact ? 2 : 1) * m * k * static_cast<int64_t>(sizeof(uint16_t)));
      Enqueue("QuantGemmWgmma", cuda::QuantGemmWgmma, xin, m, k, q, n, y, accumulate,
              static_cast<uint16_t*>(split.data()), exact, scale, stream_);
      return;
    }
    profiler_->Mark("MatMul quantized mma");
    DeviceBuffer partial;
    if (const int64_t floats = cuda::QuantGemmMmaScratch(m, n, k); floats > 0)
      partial = DeviceBuffer::Floats(*this, floats);
    Enqueue("QuantGemmMma", cuda::QuantGemmMma, xin, m, k, q, n, y, accumulate, exact, partial.f32(), scale,
            stream_);
    return;
  }
  // Shapes the tensor-core kernels do not take: the weight dequantized to f32 scratch, the input
  // rounded / permuted as the weight's scheme says, cuBLASLt's f32 GEMM (the CPU backend's values).
  profiler_->Mark("MatMul quantized gemm");
  DeviceBuffer wf = DeviceBuffer::Floats(*this, n * k);
  Enqueue("QuantDequantF32", cuda::QuantDequantF32, q, n, k, wf.f32(), stream_);
  DeviceBuffer xp;
  const float* xin = x;
  if (w.quant.act != ActQuant::kNone || w.quant.perm) {
    xp = DeviceBuffer::Floats(*this, m * k);
    Enqueue("QuantPrepareInput", cuda::QuantPrepareInput, x, m, k, q, xp.f32(), stream_);
    xin = xp.f32();
  }
  GemmLt(wf.data(), false, xin, m, k, n, y, accumulate);
}

}  // namespace tessera

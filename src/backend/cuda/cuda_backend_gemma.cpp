// tessera cuda backend: the ops of CudaBackend that the Gemma family (DiffusionGemma,
// docs/DIFFUSION_GEMMA.md) adds to the Qwen ones: the self-conditioning product without a transposed
// copy of the embedding (MatMulNoTrans, on cuBLASLt), RoPE with the caller's frequency table
// (RopePairs), gelu-tanh gating (dense MLPs and, through the MoE expert paths, the routed experts), a
// constant scale, the final logit soft-cap and the router's per-expert scales. See cuda_backend.h.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

namespace tessera {

// y[m, k] = x[m, n] w[n, k], w as stored (DiffusionGemma: probabilities [canvas rows, vocab] times the
// [vocab, hidden] embedding). A large product (n = 262,144 for the published model), so always
// cuBLASLt with w untransposed; f32 x as bf16 hi + lo (two GEMMs, ~16 mantissa bits: what MatMul's
// large products do, held to 1e-4 of the CPU), or rounded once with bf16 activations.
void CudaBackend::MatMulNoTrans(const float* x, int64_t m, const Tensor& w, float* y) {
  if (w.shape.size() != 2) Fail(ErrorKind::kInternal, "MatMulNoTrans: weight is not 2-D");
  if (w.quantized() || (w.dtype != DType::kBF16 && w.dtype != DType::kF32))
    Fail(ErrorKind::kUnsupported, "MatMulNoTrans: weight dtype {} is not supported on cuda", DTypeName(w.dtype));
  const int64_t n = w.shape[0], k = w.shape[1];
  if (m == 0 || k == 0) return;
  profiler_->Mark("MatMulNoTrans");
  if (n == 0) {
    Zero(y, static_cast<size_t>(m * k) * sizeof(float));
    return;
  }
  if (w.dtype == DType::kF32) {
    GemmLt(w.data, false, x, m, n, k, y, false, /*w_no_trans=*/true);
    return;
  }
  if (!ExactActivations()) {
    DeviceBuffer xb(*this, static_cast<size_t>(m * n) * 2);
    Enqueue("F32ToBf16", cuda::F32ToBf16, x, m * n, static_cast<uint16_t*>(xb.data()), stream_);
    GemmLt(w.data, true, xb.data(), m, n, k, y, false, /*w_no_trans=*/true);
    return;
  }
  DeviceBuffer hi(*this, static_cast<size_t>(m * n) * 2), lo(*this, static_cast<size_t>(m * n) * 2);
  Enqueue("F32ToBf16Split", cuda::F32ToBf16Split, x, m * n, static_cast<uint16_t*>(hi.data()),
          static_cast<uint16_t*>(lo.data()), stream_);
  GemmLt(w.data, true, hi.data(), m, n, k, y, false, /*w_no_trans=*/true);
  GemmLt(w.data, true, lo.data(), m, n, k, y, true, /*w_no_trans=*/true);
}

// inv_freq is the caller's host table (the layer's own: default or proportional RoPE); it travels with
// the positions through the scratch ring, so a recorded step replays with the same values.
void CudaBackend::RopePairs(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                            int64_t pair_offset, int64_t rotated_pairs, const float* inv_freq,
                            const int64_t* positions) {
  if (rotated_pairs < 0 || rotated_pairs > pair_offset || pair_offset + rotated_pairs > head_dim)
    Fail(ErrorKind::kInvalidArgument, "RopePairs: {} pairs at offset {} in a head of {}", rotated_pairs, pair_offset,
         head_dim);
  profiler_->Mark("RopePairs");
  if (rows == 0 || rotated_pairs == 0) return;
  const ScratchArray f = UploadScratch(inv_freq, static_cast<size_t>(rotated_pairs) * sizeof(float));
  const ScratchArray d = UploadScratch(positions, static_cast<size_t>(rows) * sizeof(int64_t));
  Enqueue("RopePairs", cuda::RopePairs, x, rows, row_stride, heads, head_dim, pair_offset, rotated_pairs, f.f32(),
          static_cast<const int64_t*>(d.data), stream_);
}

void CudaBackend::GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  profiler_->Mark("GeluTanhMul");
  Enqueue("GeluTanhMul", cuda::GeluTanhMul, gate, up, n, out, stream_);
}

void CudaBackend::Scale(float* x, int64_t n, float s) {
  profiler_->Mark("Scale");
  Enqueue("Scale", cuda::Scale, x, n, s, stream_);
}

void CudaBackend::SoftCap(float* x, int64_t n, float cap) {
  profiler_->Mark("SoftCap");
  Enqueue("SoftCap", cuda::SoftCap, x, n, cap, stream_);
}

void CudaBackend::ScaleByIndex(float* x, const int32_t* idx, int64_t n, const float* table) {
  profiler_->Mark("ScaleByIndex");
  Enqueue("ScaleByIndex", cuda::ScaleByIndex, x, idx, n, table, stream_);
}

// Every expert path of MoeExperts takes the activation (the gate/up kernels apply it where they apply
// SiLU); quantized gelu-tanh experts go host-grouped (cuda_backend_moe.cpp).
void CudaBackend::MoeExpertsAct(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                                int64_t k, const std::vector<ExpertWeights>& experts, GluAct act, float* out) {
  ExpertsInto(x, rows, hidden, idx, weights, k, experts, out, nullptr, act == GluAct::kGeluTanh);
}

}  // namespace tessera

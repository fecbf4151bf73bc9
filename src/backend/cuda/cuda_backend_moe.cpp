// tessera cuda backend: the MoE ops of CudaBackend (routing, and the expert paths by the number of
// (row, expert) pairs: fused per pair, device-grouped, host-grouped). See cuda_backend.h.
#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

namespace tessera {

// --- MoE -------------------------------------------------------------------------------------

void CudaBackend::CountIds(const int32_t* idx, int64_t n, int64_t num_experts, int32_t* counts) {
  profiler_->Mark("CountIds");
  Enqueue("CountIds", cuda::CountIds, idx, n, num_experts, counts, stream_);
}

void CudaBackend::MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k, bool renormalize,
                           int32_t* idx, float* weights) {
  profiler_->Mark("MoeRoute");
  if (k > num_experts) Fail(ErrorKind::kInvalidArgument, "moe route: top-{} of {} experts", k, num_experts);
  Enqueue("MoeRoute", cuda::MoeRoute, logits, rows, num_experts, k, renormalize, idx, weights, stream_);
}

const CudaBackend::ExpertTable& CudaBackend::ExpertPointers(const std::vector<ExpertWeights>& experts) {
  const int64_t E = static_cast<int64_t>(experts.size());
  std::vector<const void*> host(3 * E);
  bool aligned = true;
  for (int64_t e = 0; e < E; ++e) {
    const ExpertWeights& x = experts[e];
    if (x.gate.dtype != DType::kBF16 || x.up.dtype != DType::kBF16 || x.down.dtype != DType::kBF16)
      Fail(ErrorKind::kUnsupported, "cuda MoE: expert {} weights are not bf16", e);
    host[e] = x.gate.data;
    host[E + e] = x.up.data;
    host[2 * E + e] = x.down.data;
  }
  for (const void* p : host) aligned = aligned && (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
  auto& slot = expert_tables_[experts.data()];
  if (!slot || slot->host != host) {
    slot = std::make_unique<ExpertTable>();
    slot->host = host;
    slot->aligned = aligned;
    slot->dev = DeviceBuffer(*this, host.size() * sizeof(void*));
    Upload(slot->dev.data(), host.data(), host.size() * sizeof(void*));
    std::vector<cuda::QuantMatrix> mats(3 * E);
    for (int64_t i = 0; i < 3 * E; ++i) {
      const Tensor& t = i < E ? experts[i].gate : i < 2 * E ? experts[i - E].up : experts[i - 2 * E].down;
      cuda::QuantMatrix& m = mats[i];
      m.codes = static_cast<const uint8_t*>(t.data);
      m.row_bytes = 2 * t.dim(1);
      m.group = static_cast<int32_t>(t.dim(1));
      m.groups = 1;
      m.kind = cuda::kBf16Rows;
    }
    if (E > 0) slot->gate0 = mats[0], slot->down0 = mats[2 * E];
    slot->wgmma = DeviceBuffer(*this, mats.size() * sizeof(cuda::QuantMatrix));
    Upload(slot->wgmma.data(), mats.data(), mats.size() * sizeof(cuda::QuantMatrix));
  }
  return *slot;
}

void CudaBackend::MoeRouteExperts(const float* logits, const float* x, int64_t rows, int64_t hidden, int64_t k,
                                  bool renormalize, int32_t* idx, float* weights,
                                  const std::vector<ExpertWeights>& experts, float* out,
                                  const ResidualNorm* residual) {
  const int64_t E = static_cast<int64_t>(experts.size()), slots = rows * k;
  if (E > 0 && experts[0].gate.quantized()) {  // routed, then the quantized expert paths
    MoeRoute(logits, rows, E, k, renormalize, idx, weights);
    ExpertsInto(x, rows, hidden, idx, weights, k, experts, out, residual);
    return;
  }
  const ExpertTable* table = rows > 0 && slots <= kMoeFusedMaxSlots && E > 0 ? &ExpertPointers(experts) : nullptr;
  const int64_t inter = table ? experts[0].gate.dim(0) : 0;
  if (!table || !cuda::MoeGateUpRoutedFits(x, hidden, rows, k, E, inter, table->aligned)) {
    MoeRoute(logits, rows, E, k, renormalize, idx, weights);
    ExpertsInto(x, rows, hidden, idx, weights, k, experts, out, residual);
    return;
  }
  profiler_->Mark("MoeRouteExperts fused");
  const auto* const* ptrs = static_cast<const uint16_t* const*>(table->dev.data());
  DeviceBuffer act = DeviceBuffer::Floats(*this, slots * inter), slot_out = DeviceBuffer::Floats(*this, slots * hidden);
  Enqueue("MoeGateUpRouted", cuda::MoeGateUpRouted, x, hidden, logits, rows, k, renormalize, idx, weights, ptrs, E,
          inter, act.f32(), stream_);
  Enqueue("MoeDown", cuda::MoeDown, act.f32(), inter, idx, weights, slots, ptrs, E, hidden, table->aligned,
          slot_out.f32(), stream_);
  SumSlotsInto(slot_out.f32(), rows, k, hidden, out, residual);
}

// The slots' sum into out, or with `residual` into the residual add and norm (one kernel: the
// MoeSumSlots launch is saved).
void CudaBackend::SumSlotsInto(const float* slot_out, int64_t rows, int64_t k, int64_t hidden, float* out,
                               const ResidualNorm* residual) {
  if (!residual) {
    Enqueue("MoeSumSlots", cuda::MoeSumSlots, slot_out, rows, k, hidden, out, stream_);
    return;
  }
  Enqueue("MoeSumSlotsAddRmsNorm", cuda::MoeSumSlotsAddRmsNorm, slot_out, rows, k, hidden, residual->extra,
          residual->h, residual->w, residual->eps, residual->one_plus, residual->y, out, stream_);
}

void CudaBackend::MoeExperts(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                             int64_t k, const std::vector<ExpertWeights>& experts, float* out) {
  ExpertsInto(x, rows, hidden, idx, weights, k, experts, out, nullptr);
}

void CudaBackend::ExpertsInto(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                              int64_t k, const std::vector<ExpertWeights>& experts, float* out,
                              const ResidualNorm* residual, bool gelu) {
  if (rows == 0) return;
  const int64_t E = static_cast<int64_t>(experts.size()), slots = rows * k;
  const int64_t inter = experts.at(0).gate.dim(0);
  const bool quantized = experts[0].gate.quantized();
  // Quantized: per pair on the tiled kernels (few rows), else grouped by expert on tensor cores; the
  // staged per-pair kernels and the host-grouped products take the matrices those do not. The tiled
  // and staged kernels know SiLU only: gelu-tanh experts take the tensor cores or the host-grouped path.
  // The layer's table is looked up (and its 3 E matrices compared) once a call, for every path.
  const QuantExpertTable* qt = quantized ? &QuantExperts(experts) : nullptr;
  if (quantized && !gelu && QuantTiledExperts(*qt, x, rows, hidden, idx, weights, k, experts, out, residual)) return;
  if (quantized && QuantMmaExperts(*qt, x, rows, hidden, idx, weights, k, experts, out, residual, gelu)) return;
  if (quantized && !gelu && slots <= cuda::kQuantMoeMaxSlots && 2 * hidden * 4 <= (200 << 10) &&
      inter * 4 <= (200 << 10)) {
    profiler_->Mark("MoeExperts quantized per-pair");
    const auto* table = static_cast<const cuda::QuantMatrix*>(qt->dev.data());
    DeviceBuffer act = DeviceBuffer::Floats(*this, slots * inter), slot_out = DeviceBuffer::Floats(*this, slots * hidden);
    Enqueue("QuantMoeGateUp", cuda::QuantMoeGateUp, x, hidden, idx, slots, k, table, E, inter, qt->vec, act.f32(),
            stream_);
    Enqueue("QuantMoeDown", cuda::QuantMoeDown, act.f32(), inter, idx, weights, slots, table, E, hidden, qt->vec,
            slot_out.f32(), stream_);
    SumSlotsInto(slot_out.f32(), rows, k, hidden, out, residual);
    return;
  }
  if (quantized) {
    DeviceBuffer slot_out = DeviceBuffer::Floats(*this, slots * hidden);
    HostGroupedExperts(x, rows, hidden, idx, weights, k, experts, slot_out.f32(), gelu);
    SumSlotsInto(slot_out.f32(), rows, k, hidden, out, residual);
    return;
  }
  const ExpertTable& table = ExpertPointers(experts);
  const auto* const* ptrs = static_cast<const uint16_t* const*>(table.dev.data());
  DeviceBuffer slot_out = DeviceBuffer::Floats(*this, slots * hidden);
  const bool vec = table.aligned && hidden % 8 == 0 && inter % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  // Unaligned shapes cannot take the grouped kernels' vector loads: the per-pair kernels up to the
  // CUDA-core limit, the host-grouped GEMMs above it.
  if (slots <= kMoeFusedMaxSlots || (!vec && slots <= kMoeSimtMaxSlots)) {
    profiler_->Mark("MoeExperts fused");
    DeviceBuffer act = DeviceBuffer::Floats(*this, slots * inter);
    Enqueue("MoeGateUp", cuda::MoeGateUp, x, hidden, idx, slots, k, ptrs, E, inter, table.aligned, act.f32(), gelu,
            stream_);
    Enqueue("MoeDown", cuda::MoeDown, act.f32(), inter, idx, weights, slots, ptrs, E, hidden, table.aligned,
            slot_out.f32(), stream_);
  } else if (vec && moe_tensor_cores_ && slots <= moe_device_max_slots_ &&
             slots >= cuda::kQuantWgmmaMinRowsPerExpert * E && cuda::Bf16WgmmaOk(hidden) && cuda::Bf16WgmmaOk(inter)) {
    // Prompt-sized batches on sm_90a: the quantized experts' wgmma kernel, the bf16 rows its operand
    // (H100, 4K prompt of Qwen3-30B-A3B against the tiled kernels: bf16 activations 226 -> 192 ms; f32
    // ones, hi + lo on two warpgroups a block, 293 -> 274 ms on a slower H100 host).
    profiler_->Mark("MoeExperts device-grouped wgmma");
    WgmmaExperts(x, nullptr, rows, hidden, idx, weights, k, E, inter,
                 static_cast<const cuda::QuantMatrix*>(table.wgmma.data()), table.gate0, table.down0,
                 ExactActivations(), gelu, out, residual);
    return;
  } else if (vec && slots <= moe_device_max_slots_) {
    profiler_->Mark("MoeExperts device-grouped");
    const bool mma = moe_tensor_cores_ && hidden % 32 == 0 && inter % 32 == 0;
    const int unit_rows = cuda::MoeUnitRows(mma, slots, E);
    const ExpertUnits g = GroupByExpert(idx, slots, E, unit_rows, slot_out);
    DeviceBuffer act = DeviceBuffer::Floats(*this, slots * inter);
    Enqueue("MoeGroupedGateUp", cuda::MoeGroupedGateUp, unit_rows, x, hidden, k, g.order.i32(), g.list(),
            g.num_units.i32(), g.max_units, ptrs, E, inter, act.f32(), ExactActivations(), gelu, stream_);
    Enqueue("MoeGroupedDown", cuda::MoeGroupedDown, unit_rows, act.f32(), inter, g.order.i32(), g.list(),
            g.num_units.i32(), g.max_units, weights, ptrs, E, hidden, slot_out.f32(), ExactActivations(), stream_);
  } else {
    HostGroupedExperts(x, rows, hidden, idx, weights, k, experts, slot_out.f32(), gelu);
  }
  SumSlotsInto(slot_out.f32(), rows, k, hidden, out, residual);
}

// Quantized experts on the tiled kernels (cuda_quant_tiled.cu), per (row, expert) pair, up to
// kQuantMoePerPairMaxSlots pairs. False (nothing queued) where a matrix or the input cannot take
// them, or for more pairs: the tiled kernels multiply on CUDA cores; grouped by expert (8-row units)
// they had lost to the tensor-core kernels from 256 pairs up (H100, 2026-12-06, Qwen3-30B-A3B fp8: a
// 32-row block 47.6 -> 12.0 ms a step, 64 sequences 93.3 -> 31.5 ms).
bool CudaBackend::QuantTiledExperts(const QuantExpertTable& qt, const float* x, int64_t rows, int64_t hidden,
                                    const int32_t* idx, const float* weights, int64_t k,
                                    const std::vector<ExpertWeights>& experts, float* out,
                                    const ResidualNorm* residual) {
  const int64_t E = static_cast<int64_t>(experts.size()), slots = rows * k;
  const int64_t inter = experts[0].gate.dim(0);
  if (!qt.tiled || slots > cuda::kQuantMoePerPairMaxSlots || (reinterpret_cast<uintptr_t>(x) & 15u) != 0 ||
      hidden % 4 != 0 || inter % 4 != 0)
    return false;
  const auto* table = static_cast<const cuda::QuantMatrix*>(qt.dev.data());
  DeviceBuffer act = DeviceBuffer::Floats(*this, slots * inter), slot_out = DeviceBuffer::Floats(*this, slots * hidden);
  profiler_->Mark("MoeExperts quantized tiled per-pair");
  Enqueue("QuantMoeGateUpTiled", cuda::QuantMoeGateUpTiled, x, hidden, k, idx, slots, table, &qt.gate0, E, inter,
          act.f32(), stream_);
  Enqueue("QuantMoeDownTiled", cuda::QuantMoeDownTiled, act.f32(), inter, idx, slots, weights, table, &qt.down0, E,
          hidden, slot_out.f32(), stream_);
  SumSlotsInto(slot_out.f32(), rows, k, hidden, out, residual);
  return true;
}

// Quantized experts grouped by expert on the device, on the tensor-core kernels: wgmma for
// prompt-sized batches (cuda_quant_wgmma.cu), else mma.sync (cuda_quant_mma.cu, units of
// QuantMoeMmaUnitRows rows). False (nothing queued) where a matrix or the input cannot take them.
bool CudaBackend::QuantMmaExperts(const QuantExpertTable& qt, const float* x, int64_t rows, int64_t hidden,
                                  const int32_t* idx, const float* weights, int64_t k,
                                  const std::vector<ExpertWeights>& experts, float* out, const ResidualNorm* residual,
                                  bool gelu) {
  const int64_t E = static_cast<int64_t>(experts.size()), slots = rows * k;
  const int64_t inter = experts[0].gate.dim(0);
  if (!qt.mma || (reinterpret_cast<uintptr_t>(x) & 15u) != 0) return false;
  if (qt.w8a8 && slots < cuda::kQuantMoeW8a8MmaMinSlots) return false;
  const auto* table = static_cast<const cuda::QuantMatrix*>(qt.dev.data());
  // Prompt-sized batches take the wgmma kernel (units of kQuantWgmmaUnitRows rows), others mma.sync.
  const bool wgmma = qt.wgmma && slots >= cuda::kQuantWgmmaMinRowsPerExpert * E;
  profiler_->Mark(wgmma ? (qt.w8a8 ? "MoeExperts quantized wgmma w8a8" : "MoeExperts quantized wgmma")
                        : (qt.w8a8 ? "MoeExperts quantized mma w8a8" : "MoeExperts quantized mma"));
  // W8A8: each row of x as its codes once for every gate and up (the experts share the rule), each
  // pair's activations once for its down; the codes are exact in bf16 (one MMA, hi alone) and the
  // kernels scale the sums by the rows' factors (as QuantMatMul's dense products do).
  DeviceBuffer x_codes, x_scale;
  const float* gate_in = x;
  if (qt.w8a8) {
    x_codes = DeviceBuffer::Floats(*this, rows * hidden), x_scale = DeviceBuffer::Floats(*this, rows);
    Enqueue("QuantPrepareInputCodes", cuda::QuantPrepareInputCodes, x, rows, hidden, &qt.gate0, x_codes.f32(),
            x_scale.f32(), stream_);
    gate_in = x_codes.f32();
  }
  const bool exact = ExactActivations() && !qt.w8a8;
  if (wgmma) {
    WgmmaExperts(gate_in, qt.w8a8 ? x_scale.f32() : nullptr, rows, hidden, idx, weights, k, E, inter, table, qt.gate0,
                 qt.down0, exact, gelu, out, residual);
    return true;
  }
  const int unit_rows = cuda::QuantMoeMmaUnitRows(slots, E);
  DeviceBuffer slot_out = DeviceBuffer::Floats(*this, slots * hidden);
  const ExpertUnits g = GroupByExpert(idx, slots, E, unit_rows, slot_out);
  DeviceBuffer act = DeviceBuffer::Floats(*this, slots * inter), act_codes, act_scale;
  if (qt.w8a8) act_codes = DeviceBuffer::Floats(*this, slots * inter), act_scale = DeviceBuffer::Floats(*this, slots);
  Enqueue("QuantMoeMmaGateUp", cuda::QuantMoeMmaGateUp, unit_rows, gate_in, hidden, k, g.order.i32(), g.list(),
          g.num_units.i32(), g.max_units, table, &qt.gate0, E, inter, act.f32(), exact, gelu,
          static_cast<const float*>(x_scale.f32()), stream_);
  const float* down_in = act.f32();
  if (qt.w8a8) {
    Enqueue("QuantPrepareInputCodes", cuda::QuantPrepareInputCodes, act.f32(), slots, inter, &qt.down0,
            act_codes.f32(), act_scale.f32(), stream_);
    down_in = act_codes.f32();
  }
  Enqueue("QuantMoeMmaDown", cuda::QuantMoeMmaDown, unit_rows, down_in, inter, g.order.i32(), g.list(),
          g.num_units.i32(), g.max_units, weights, table, &qt.down0, E, hidden, slot_out.f32(), exact,
          static_cast<const float*>(act_scale.f32()), stream_);
  SumSlotsInto(slot_out.f32(), rows, k, hidden, out, residual);
  return true;
}

CudaBackend::ExpertUnits CudaBackend::GroupByExpert(const int32_t* idx, int64_t slots, int64_t E, int unit_rows,
                                                     const DeviceBuffer& slot_out) {
  ExpertUnits g;
  g.max_units = cuda::MoeMaxUnits(slots, E, unit_rows);
  g.order = DeviceBuffer(*this, slots * sizeof(int32_t));
  g.units = DeviceBuffer(*this, g.max_units * sizeof(int4));
  g.num_units = DeviceBuffer(*this, sizeof(int32_t));
  Zero(slot_out.data(), slot_out.bytes());
  Enqueue("MoeGroupByExpert", cuda::MoeGroupByExpert, idx, slots, E, unit_rows, g.order.i32(),
          static_cast<int4*>(g.units.data()), g.num_units.i32(), stream_);
  return g;
}

void CudaBackend::WgmmaExperts(const float* x, const float* x_scale, int64_t rows, int64_t hidden, const int32_t* idx,
                               const float* weights, int64_t k, int64_t E, int64_t inter,
                               const cuda::QuantMatrix* table, const cuda::QuantMatrix& gate0,
                               const cuda::QuantMatrix& down0, bool exact, bool gelu, float* out,
                               const ResidualNorm* residual) {
  const int64_t slots = rows * k;
  DeviceBuffer slot_out = DeviceBuffer::Floats(*this, slots * hidden);
  const ExpertUnits g = GroupByExpert(idx, slots, E, cuda::kQuantWgmmaUnitRows, slot_out);
  // x gathered in sorted order (split, or as int8 codes) and the activations written for the down
  // launch by the kernel itself; W8A8 codes the pairs' activations in between (act -> act_codes).
  DeviceBuffer act, act_codes, act_scale;
  if (x_scale) {
    act = DeviceBuffer::Floats(*this, slots * inter), act_codes = DeviceBuffer::Floats(*this, slots * inter);
    act_scale = DeviceBuffer::Floats(*this, slots);
  }
  const int64_t parts = exact ? 2 : 1;
  DeviceBuffer xs(*this, parts * slots * hidden * static_cast<int64_t>(sizeof(uint16_t)));
  DeviceBuffer as(*this, parts * slots * inter * static_cast<int64_t>(sizeof(uint16_t)));
  Enqueue("QuantMoeWgmma", cuda::QuantMoeWgmma, x, hidden, k, slots, static_cast<const int32_t*>(g.order.i32()),
          g.list(), static_cast<const int32_t*>(g.num_units.i32()), g.max_units, table,
          &gate0, &down0, E, inter, gelu, weights, static_cast<uint16_t*>(xs.data()),
          static_cast<uint16_t*>(as.data()), exact, x_scale, act.f32(), act_codes.f32(), act_scale.f32(),
          slot_out.f32(), stream_);
  SumSlotsInto(slot_out.f32(), rows, k, hidden, out, residual);
}

// (row, slot) pairs sorted by expert on the host (one copy of the routing), gathered, one product per
// active expert and matrix (MatMul: bf16 or quantized weights), scattered into slot_out weighted.
void CudaBackend::HostGroupedExperts(const float* x, int64_t rows, int64_t hidden, const int32_t* idx,
                                     const float* weights, int64_t k, const std::vector<ExpertWeights>& experts,
                                     float* slot_out_ptr, bool gelu) {
  const int64_t E = static_cast<int64_t>(experts.size()), slots = rows * k;
  const int64_t inter = experts.at(0).gate.dim(0);
  // Grouped: (row, slot) pairs sorted by expert, gathered, one GEMM per active expert and matrix.
  profiler_->Mark("MoeExperts host-grouped");
  std::vector<int32_t> hidx(slots);
  Download(hidx.data(), idx, slots * sizeof(int32_t));
  std::vector<std::vector<int32_t>> by_expert(E);
  for (int64_t i = 0; i < slots; ++i) {
    if (hidx[i] < 0 || hidx[i] >= E) Fail(ErrorKind::kInternal, "expert id {} out of range", hidx[i]);
    by_expert[hidx[i]].push_back(static_cast<int32_t>(i));
  }
  std::vector<int32_t> order;
  std::vector<std::pair<int64_t, int64_t>> spans(E);  // offset, count
  for (int64_t e = 0; e < E; ++e) {
    spans[e] = {static_cast<int64_t>(order.size()), static_cast<int64_t>(by_expert[e].size())};
    order.insert(order.end(), by_expert[e].begin(), by_expert[e].end());
  }
  const ScratchArray dorder = UploadScratch(order.data(), order.size() * sizeof(int32_t));
  DeviceBuffer xs = DeviceBuffer::Floats(*this, slots * hidden);
  DeviceBuffer g = DeviceBuffer::Floats(*this, slots * inter), u = DeviceBuffer::Floats(*this, slots * inter);
  DeviceBuffer d = DeviceBuffer::Floats(*this, slots * hidden);
  Enqueue("GatherRows", cuda::GatherRows, x, hidden, dorder.i32(), slots, k, xs.f32(), stream_);
  for (int64_t e = 0; e < E; ++e) {
    const auto [off, cnt] = spans[e];
    if (cnt == 0) continue;
    MatMul(xs.f32() + off * hidden, cnt, experts[e].gate, g.f32() + off * inter, false);
    MatMul(xs.f32() + off * hidden, cnt, experts[e].up, u.f32() + off * inter, false);
  }
  if (gelu)
    GeluTanhMul(g.f32(), u.f32(), slots * inter, g.f32());
  else
    SiluMul(g.f32(), u.f32(), slots * inter, g.f32());
  for (int64_t e = 0; e < E; ++e) {
    const auto [off, cnt] = spans[e];
    if (cnt == 0) continue;
    MatMul(g.f32() + off * inter, cnt, experts[e].down, d.f32() + off * hidden, false);
  }
  Enqueue("ScatterScaledRows", cuda::ScatterScaledRows, d.f32(), hidden, dorder.i32(), slots, weights, slot_out_ptr,
          stream_);
}

const CudaBackend::QuantExpertTable& CudaBackend::QuantExperts(const std::vector<ExpertWeights>& experts) {
  const int64_t E = static_cast<int64_t>(experts.size());
  std::vector<const void*> codes(3 * E);
  std::vector<cuda::QuantMatrix> mats(3 * E);
  bool vec = true, tiled = E > 0, mma = E > 0, wgmma = E > 0;
  for (int64_t e = 0; e < E; ++e) {
    const Tensor* t[3] = {&experts[e].gate, &experts[e].up, &experts[e].down};
    for (int j = 0; j < 3; ++j) {
      if (!t[j]->quantized()) Fail(ErrorKind::kUnsupported, "cuda MoE: expert {} mixes float and quantized weights", e);
      codes[j * E + e] = t[j]->data;
      const cuda::QuantMatrix& q = mats[j * E + e] = *QuantView(*t[j]);
      vec = vec && cuda::QuantVecOk(q);
      const cuda::QuantMatrix& ref = mats[j == 2 ? 2 * E : 0];
      tiled = tiled && cuda::QuantTiledOk(q) && q.kind == ref.kind && (q.zeros == nullptr) == (ref.zeros == nullptr) &&
              q.group == ref.group && q.row_bytes == ref.row_bytes;
      mma = mma && cuda::QuantMmaOk(q, t[j]->dim(1)) && q.perm == nullptr && q.kind == ref.kind &&
            (q.zeros == nullptr) == (ref.zeros == nullptr) && q.group == ref.group && q.act == ref.act &&
            q.act_scale == ref.act_scale && (q.act == 0) == (mats[0].act == 0);
      wgmma = wgmma && cuda::QuantWgmmaOk(q, cuda::kQuantWgmmaMinRows, t[j]->dim(1));
    }
  }
  auto& slot = quant_expert_tables_[experts.data()];
  if (!slot || slot->codes != codes) {
    slot = std::make_unique<QuantExpertTable>();
    slot->codes = codes;
    slot->vec = vec;
    slot->mma = mma;
    slot->w8a8 = mma && mats[0].act != 0;
    slot->wgmma = mma && wgmma;
    slot->tiled = tiled && mats[0].kind == mats[2 * E].kind &&
                  (mats[0].zeros == nullptr) == (mats[2 * E].zeros == nullptr);
    if (E > 0) slot->gate0 = mats[0], slot->down0 = mats[2 * E];
    slot->dev = DeviceBuffer(*this, mats.size() * sizeof(cuda::QuantMatrix));
    Upload(slot->dev.data(), mats.data(), mats.size() * sizeof(cuda::QuantMatrix));
  }
  return *slot;
}

}  // namespace tessera

// tessera cuda backend: the attention layer's ops of CudaBackend: q / k norms + RoPE (with the
// committed rows' cache writes), the paged KV cache writes and its element type, and the batched
// attention call with its kernel choice (flash / decode / per-head) and key-split plan. Calls with a
// sliding window or DiffusionGemma canvas rows take the flash kernel (keys [first, last] a row), never
// the decode kernel. See cuda_backend.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_attention_mask.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

namespace tessera {

// --- Attention ops ---------------------------------------------------------------------------

void CudaBackend::QkNormRope(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride,
                             int64_t k_heads, int64_t rows, int64_t head_dim, const float* q_norm,
                             const float* k_norm, float eps, bool one_plus, int64_t rotary_dim,
                             const int64_t* positions, double theta) {
  if (!cuda::QkNormRopeFits(q, q_stride, k, k_stride, head_dim, q_norm, k_norm, rotary_dim)) {
    Backend::QkNormRope(q, q_stride, q_heads, k, k_stride, k_heads, rows, head_dim, q_norm, k_norm, eps, one_plus,
                        rotary_dim, positions, theta);
    return;
  }
  profiler_->Mark("QkNormRope");
  if (rows == 0) return;
  const float* inv_freq = RopeInvFreq(theta, rotary_dim);
  const ScratchArray d = UploadScratch(positions, rows * sizeof(int64_t));
  Enqueue("QkNormRope", cuda::QkNormRope, q, q_stride, q_heads, k, k_stride, k_heads, rows, head_dim, q_norm, k_norm,
          eps, one_plus, rotary_dim, static_cast<const int64_t*>(d.data), inv_freq, nullptr, nullptr, cuda::KvLayout::kF32,
          nullptr, nullptr, stream_);
}

void CudaBackend::QkNormRopeKvWrite(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride,
                                    int64_t k_heads, int64_t rows, int64_t head_dim, const float* q_norm,
                                    const float* k_norm, float eps, bool one_plus, int64_t rotary_dim,
                                    const int64_t* positions, double theta, const KvRowWrites& kv) {
  // One cache row per source row at most (the kernel maps a row to one destination); anything else,
  // or a shape the kernel does not take, goes through the two ops.
  std::vector<int64_t> pos_dst;
  bool fused = kv.n > 0 && cuda::QkNormRopeFits(q, q_stride, k, k_stride, head_dim, q_norm, k_norm, rotary_dim);
  if (fused) {
    pos_dst.assign(positions, positions + rows);
    pos_dst.resize(2 * rows, -1);
    for (int64_t i = 0; i < kv.n && fused; ++i) {
      const int64_t r = kv.src_rows[i];
      fused = r >= 0 && r < rows && pos_dst[rows + r] < 0 && kv.cache_rows[i] >= 0;
      if (fused) pos_dst[rows + r] = kv.cache_rows[i];
    }
  }
  if (!fused) {
    Backend::QkNormRopeKvWrite(q, q_stride, q_heads, k, k_stride, k_heads, rows, head_dim, q_norm, k_norm, eps,
                               one_plus, rotary_dim, positions, theta, kv);
    return;
  }
  profiler_->Mark("QkNormRopeKvWrite");
  const float* inv_freq = RopeInvFreq(theta, rotary_dim);
  const ScratchArray d = UploadScratch(pos_dst.data(), pos_dst.size() * sizeof(int64_t));
  const auto* pd = static_cast<const int64_t*>(d.data);
  Enqueue("QkNormRopeKvWrite", cuda::QkNormRope, q, q_stride, q_heads, k, k_stride, k_heads, rows, head_dim, q_norm,
          k_norm, eps, one_plus, rotary_dim, pd, inv_freq, kv.v, pd + rows, KvLayoutFor(k_heads * head_dim),
          kv.k_cache, kv.v_cache, stream_);
}

void CudaBackend::KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim,
                          int64_t first_pos, const int32_t* pages, int64_t page_size, void* k_cache,
                          void* v_cache) {
  profiler_->Mark("KvWrite");
  if (T == 0) return;
  const int64_t num = (first_pos + T - 1) / page_size + 1;
  const ScratchArray d = UploadScratch(pages, num * sizeof(int32_t));
  Enqueue("KvWrite", cuda::KvWrite, k, v, kv_stride, T, kv_dim, first_pos, d.i32(), page_size, KvLayoutFor(kv_dim),
          k_cache, v_cache, stream_);
}

void CudaBackend::KvWriteRows(const float* k, const float* v, int64_t kv_stride, int64_t kv_dim,
                              const int64_t* src_rows, const int64_t* cache_rows, int64_t n, void* k_cache,
                              void* v_cache) {
  profiler_->Mark("KvWriteRows");
  if (n == 0) return;
  std::vector<int64_t> pairs(2 * n);
  for (int64_t i = 0; i < n; ++i) pairs[2 * i] = src_rows[i], pairs[2 * i + 1] = cache_rows[i];
  const ScratchArray d = UploadScratch(pairs.data(), pairs.size() * sizeof(int64_t));
  Enqueue("KvWriteRows", cuda::KvWriteRows, k, v, kv_stride, kv_dim, static_cast<const int64_t*>(d.data), n,
          KvLayoutFor(kv_dim), k_cache, v_cache, stream_);
}

void CudaBackend::SetKvCacheDType(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    Fail(ErrorKind::kUnsupported, "cuda: a KV cache of {} (expected f32 or bf16)", DTypeName(dtype));
  kv_dtype_ = dtype;
}

void CudaBackend::SetActivationPrecision(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    Fail(ErrorKind::kUnsupported, "cuda: activation precision {} (expected f32 or bf16)", DTypeName(dtype));
  exact_activations_ = dtype == DType::kF32;
}

void CudaBackend::Attention(const AttentionArgs& a) { AttentionBatch({a}); }

void CudaBackend::AttentionBatch(const std::vector<AttentionArgs>& args) {
  profiler_->Mark("AttentionBatch");
  // Keys per block when a row's keys are split across blocks (decode: few rows, long context).
  constexpr int64_t kKeyChunk = 128;
  if (args.empty()) return;
  // Masks whose first visible key is not 0 (a sliding window; canvas rows, which also see keys past
  // themselves) never take the decode kernel: it assumes keys [0, last]. Same argument rules as the CPU
  // backend.
  bool masked = false;
  for (const AttentionArgs& a : args) {
    if (a.sliding_window > 0 && a.block_size > 0)
      Fail(ErrorKind::kUnsupported, "attention: a sliding window with a block-causal mask is not defined");
    if (a.canvas_begin >= 0 && (a.block_size > 0 || a.canvas_begin >= a.T))
      Fail(ErrorKind::kInvalidArgument, "attention: canvas rows from {} of {} with block size {}", a.canvas_begin,
           a.T, a.block_size);
    masked = masked || a.sliding_window > 0 || a.canvas_begin >= 0;
  }
  const int64_t heads = args[0].num_heads, D = args[0].head_dim, kv_heads = args[0].num_kv_heads;
  const int64_t kv_dim = kv_heads * D;
  // A bf16 or split cache (cuda_kv_layout.h): the kernels read every K/V row in the cache's layout, keys
  // up to first_pos + commit_len from the cache (the committed rows were written before this call) and
  // the uncommitted rows from KvStage's copy (cuda_kernels.h, AttentionParams).
  const cuda::KvLayout layout = KvLayoutFor(kv_dim);
  const bool packed = layout != cuda::KvLayout::kF32;  // reads the cache's layout only
  const size_t elem_bytes = layout == cuda::KvLayout::kBf16 ? 2 : 4;
  auto cached_keys = [&](const AttentionArgs& a) { return packed ? a.first_pos + a.commit_len : a.first_pos; };
  // The tensor-core kernels copy cache rows (and KvStage's copies) in 16-byte pieces.
  const auto aligned = cuda::Aligned16;
  bool rows_aligned = true;
  std::vector<int32_t> pages;
  std::vector<size_t> page_off(args.size());
  int64_t staged = 0;  // bf16 / split: uncommitted rows, copied by KvStage
  for (size_t i = 0; i < args.size(); ++i) {
    const AttentionArgs& a = args[i];
    if (a.head_dim > cuda::kAttentionMaxHeadDim)
      Fail(ErrorKind::kUnsupported, "cuda attention: head_dim {} > {}", a.head_dim, cuda::kAttentionMaxHeadDim);
    if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0)
      Fail(ErrorKind::kInvalidArgument, "attention: {} heads over {} kv heads", a.num_heads, a.num_kv_heads);
    if (a.num_heads != heads || a.head_dim != D || a.num_kv_heads != kv_heads)
      Fail(ErrorKind::kInvalidArgument, "attention batch: sequences with different head shapes");
    if (a.commit_len < 0 || a.commit_len > a.T)
      Fail(ErrorKind::kInvalidArgument, "attention: commit_len {} outside [0, {}]", a.commit_len, a.T);
    const int64_t cached = cached_keys(a);  // keys read from the cache
    rows_aligned = rows_aligned && (cached == 0 || (aligned(a.k_cache) && aligned(a.v_cache)));
    page_off[i] = pages.size();
    if (cached > 0) {
      if (!a.pages || a.page_size <= 0 || !a.k_cache || !a.v_cache)
        Fail(ErrorKind::kInvalidArgument, "attention: a cached prefix needs pages and a cache");
      pages.insert(pages.end(), a.pages, a.pages + (cached - 1) / a.page_size + 1);
    }
    if (packed) staged += a.T - a.commit_len;
  }
  const ScratchArray dpages = UploadScratch(pages.data(), pages.size() * sizeof(int32_t));
  DeviceBuffer fresh;  // bf16 / split: [staged, kv_dim] K rows, then the V rows, in the cache's layout
  if (staged > 0) fresh = DeviceBuffer(*this, static_cast<size_t>(2 * staged * kv_dim) * elem_bytes);
  auto* k_new = static_cast<unsigned char*>(fresh.data());
  unsigned char* v_new = staged > 0 ? k_new + staged * kv_dim * elem_bytes : nullptr;
  std::vector<cuda::AttentionParams> descs;
  std::vector<int2> rows, stage_rows;
  int64_t max_keys = 0, staged_row0 = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const AttentionArgs& a = args[i];
    const int64_t cached = cached_keys(a);
    const bool has_new = packed && a.T > a.commit_len;
    descs.push_back({a.q, a.q_stride, a.k, a.v, a.kv_stride, a.T, a.num_heads, a.num_kv_heads, a.head_dim,
                     a.first_pos, a.k_cache, a.v_cache, cached > 0 ? dpages.i32() + page_off[i] : nullptr,
                     a.page_size, a.block_size, a.scale, a.out, a.out_stride, a.commit_len,
                     has_new ? k_new + staged_row0 * kv_dim * elem_bytes : nullptr,
                     has_new ? v_new + staged_row0 * kv_dim * elem_bytes : nullptr, a.sliding_window,
                     a.canvas_begin});
    for (int64_t t = 0; t < a.T; ++t) rows.push_back(make_int2(static_cast<int>(i), static_cast<int>(t)));
    if (has_new)
      for (int64_t t = a.commit_len; t < a.T; ++t)
        stage_rows.push_back(make_int2(static_cast<int>(i), static_cast<int>(t)));
    if (packed) staged_row0 += a.T - a.commit_len;
    max_keys = std::max(max_keys, a.first_pos + a.T);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  if (R == 0) return;
  const ScratchArray ddescs = UploadScratch(descs.data(), descs.size() * sizeof(cuda::AttentionParams));
  const auto* dd = static_cast<const cuda::AttentionParams*>(ddescs.data);
  if (!stage_rows.empty()) {
    const ScratchArray dstage = UploadScratch(stage_rows.data(), stage_rows.size() * sizeof(int2));
    Enqueue("KvStage", cuda::KvStage, dd, static_cast<const int2*>(dstage.data),
            static_cast<int64_t>(stage_rows.size()), kv_dim, layout, stream_);
  }
  // Flash-style kernel on tensor cores (cuda_attention_flash.cu): a block per (tile of rows of one
  // sequence, KV head, key split), K/V read once per tile. Decode calls take the decode kernel
  // (cuda_attention_decode.cu, same tiles and partials), or with TESSERA_CUDA_ATTENTION_DECODE=0 the
  // flash kernel's few-row block shape. Tiles are queued longest first (a prompt's last rows see
  // the most keys), so the long blocks do not end up in the last wave.
  if (flash_attention_ && rows_aligned && cuda::AttentionFlashSupported(heads, kv_heads, D, layout)) {
    const int64_t group = heads / kv_heads;
    int64_t max_t = 0;
    for (const AttentionArgs& a : args) max_t = std::max(max_t, a.T);
    const bool few_rows = max_t <= cuda::AttentionFlashTileRows(group, D, true);
    // Decode steps (one row a sequence) take the decode kernel: its tiles hold fewer rows.
    const bool decode = decode_attention_ && !masked && cuda::AttentionDecodeSupported(heads, kv_heads, D) &&
                        max_t <= cuda::AttentionDecodeTileRows(group);
    // Other calls of more rows than a decode tile: the wgmma kernel where it applies (sm_90a, 128-dim
    // heads), else the flash kernel's many-row shape.
    const bool wgmma =
        !decode && !few_rows && wgmma_attention_ && cuda::AttentionWgmmaSupported(heads, kv_heads, D, layout);
    const int64_t tile_rows = decode  ? cuda::AttentionDecodeTileRows(group)
                              : wgmma ? cuda::AttentionWgmmaTileRows(group)
                                      : cuda::AttentionFlashTileRows(group, D, few_rows);
    std::vector<int4> tiles;
    std::vector<std::pair<int64_t, size_t>> order;  // (keys the tile's rows see, tile)
    int64_t row0 = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      const AttentionArgs& a = args[i];
      for (int64_t t0 = 0; t0 < a.T; t0 += tile_rows) {
        const int64_t nr = std::min(tile_rows, a.T - t0);
        const auto keys = [&](int64_t t) {
          return cuda::AttentionKeyRange(a.first_pos, a.T, a.block_size, a.sliding_window, a.canvas_begin, t);
        };
        order.emplace_back(keys(t0 + nr - 1).last + 1 - keys(t0).first, tiles.size());
        tiles.push_back(make_int4(static_cast<int>(i), static_cast<int>(t0), static_cast<int>(row0 + t0),
                                  static_cast<int>(nr)));
      }
      row0 += a.T;
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    std::vector<int4> sorted(tiles.size());
    for (size_t i = 0; i < order.size(); ++i) sorted[i] = tiles[order[i].second];
    const int64_t num_tiles = static_cast<int64_t>(sorted.size());
    // Key splits for few tiles; both plans move in steps of the context (graph-friendly), and prompts
    // (many tiles) take every key in one block. Splits cover keys from 0: those before a window are
    // empty (their blocks end at once). Decode calls: whole waves of the decode kernel's
    // resident blocks (a tile's splits take even shares of its keys); others ~4 blocks an SM (at least
    // 128 keys a split for many-row tiles).
    int splits = 1;
    int64_t chunk = std::numeric_limits<int64_t>::max();
    if (decode)
      cuda::AttentionDecodeSplitPlan(num_tiles, kv_heads, max_keys,
                                     cuda::AttentionDecodeResidentBlocks(heads, kv_heads, D, layout), &splits, &chunk);
    else
      cuda::AttentionFlashSplitPlan(num_tiles, kv_heads * cuda::AttentionFlashOutputParts(D), max_keys, few_rows,
                                    sm_count_, &splits, &chunk);
    const ScratchArray dtiles = UploadScratch(sorted.data(), sorted.size() * sizeof(int4));
    const auto* dt = static_cast<const int4*>(dtiles.data);
    DeviceBuffer partial;
    if (splits > 1) partial = DeviceBuffer::Floats(*this, R * heads * splits * (D + 2));
    if (decode) {
      Enqueue("AttentionDecode", cuda::AttentionDecode, dd, dt, num_tiles, heads, kv_heads, D, layout, splits, chunk,
              partial.f32(), stream_);
    } else if (wgmma) {
      Enqueue("AttentionWgmma", cuda::AttentionWgmma, dd, dt, num_tiles, heads, kv_heads, layout, splits, chunk,
              partial.f32(), ExactActivations(), stream_);
    } else {
      Enqueue("AttentionFlash", cuda::AttentionFlash, dd, dt, num_tiles, heads, kv_heads, D, few_rows, layout,
              splits, chunk, partial.f32(), ExactActivations(), stream_);
    }
    if (splits > 1) {
      const ScratchArray drows = UploadScratch(rows.data(), rows.size() * sizeof(int2));
      Enqueue("AttentionMerge", cuda::AttentionMerge, dd, static_cast<const int2*>(drows.data), R, heads, D, splits,
              partial.f32(), stream_);
    }
    return;
  }
  // The per-(row, head) kernel for every other shape and cache. Few blocks over many keys would leave
  // most SMs idle: split each row's keys into whole 128-key groups across blocks and merge. One split
  // takes every key: its chunk is a constant, not the growing context length, so that decode steps
  // keep their graph (cuda_step_graph.h).
  const int64_t blocks = R * heads, want = 2 * sm_count_;
  int splits = 1;
  int64_t chunk = std::numeric_limits<int64_t>::max();
  if (blocks < want && max_keys > 2 * kKeyChunk) {
    const int64_t groups = (max_keys + kKeyChunk - 1) / kKeyChunk;
    splits = static_cast<int>(std::min<int64_t>({64, groups, (want + blocks - 1) / blocks}));
    chunk = (groups + splits - 1) / splits * kKeyChunk;
    splits = static_cast<int>((max_keys + chunk - 1) / chunk);
    if (splits == 1) chunk = std::numeric_limits<int64_t>::max();
  }
  const ScratchArray drows = UploadScratch(rows.data(), rows.size() * sizeof(int2));
  const auto* dr = static_cast<const int2*>(drows.data);
  DeviceBuffer partial;
  if (splits > 1) partial = DeviceBuffer::Floats(*this, R * heads * splits * (D + 2));
  Enqueue("AttentionBatch", cuda::AttentionBatch, dd, dr, R, heads, D, layout, splits, chunk, partial.f32(), stream_);
}

}  // namespace tessera

// tessera backend: the op-level interface every model layer computes through. The CPU backend
// (src/backend/cpu) is the reference; a CUDA backend implements the same ops on device buffers.
// Activations are f32 buffers addressed by raw pointers (host memory on the CPU backend, device
// memory on a GPU backend); weights are `Tensor` views (bf16 read in place from the checkpoint
// mapping, or f32 converted once at load time).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "core/error.h"

namespace tessera {

// A read-only view of a weight: data, element type and shape. Linear weights are [n, k] (HF order);
// quantized ones keep their logical shape [n, k] and describe their codes in `quant`.
struct Tensor {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  WeightQuant quant;

  bool quantized() const { return quant.kind != QuantKind::kNone; }
  // Bytes of the codes plus scales / zero points / permutation (what a product streams).
  int64_t Bytes() const;

  int64_t dim(size_t i) const { return i < shape.size() ? shape[i] : 1; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  const float* f32() const { return static_cast<const float*>(data); }
};

// One routed expert: SiLU(x gate^T) * (x up^T) -> down.
struct ExpertWeights {
  Tensor gate;  // [inter, hidden]
  Tensor up;    // [inter, hidden]
  Tensor down;  // [hidden, inter]
};

// Attention of T new query rows of one sequence over its cached prefix plus the new rows.
struct AttentionArgs {
  const float* q = nullptr;  // [T, num_heads * head_dim], row stride q_stride
  int64_t q_stride = 0;
  const float* k = nullptr;  // [T, num_kv_heads * head_dim] (new keys, after norm + rope)
  const float* v = nullptr;  // [T, num_kv_heads * head_dim]
  int64_t kv_stride = 0;
  int64_t T = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t first_pos = 0;  // absolute position of row 0; keys [0, first_pos) come from the cache
  // The paged cache, [num_pages * page_size, num_kv_heads, head_dim] of Backend::KvCacheDType().
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* pages = nullptr;  // page ids covering [0, first_pos + commit_len)
  // Rows [0, commit_len) of k / v were written to the cache at positions first_pos.. (KvWrite,
  // KvWriteRows or QkNormRopeKvWrite) before this call; a backend may read them from there. Later
  // rows (an uncommitted diffusion block) are only in k / v.
  int64_t commit_len = 0;
  int64_t page_size = 0;
  int64_t block_size = 0;  // 0: causal; >0: block-causal (blocks aligned at multiples from position 0)
  // Sliding window W > 0 (causal only, block_size 0): the query at position p sees keys (p - W, p].
  // 0: no window.
  int64_t sliding_window = 0;
  // >= 0: rows [canvas_begin, T) are a canvas (DiffusionGemma's decoder, docs/DIFFUSION_GEMMA.md 3.2):
  // each sees every key before the canvas and every canvas key (bidirectional), or with a sliding
  // window W the last W-1 keys before the canvas and the whole canvas, the same set for every canvas
  // row (transformers' cached generation path). Rows before it keep the causal (windowed) rule.
  // Needs block_size 0. -1: no canvas.
  int64_t canvas_begin = -1;
  float scale = 1.0f;
  float* out = nullptr;  // [T, num_heads * head_dim], row stride out_stride
  int64_t out_stride = 0;
};

// Gated delta rule over T tokens of one sequence, starting from (and updating) `state`.
// q and k are L2-normalised inside the op and q is scaled by 1/sqrt(key_dim); value head h reads
// key head h / (value_heads / key_heads).
struct GatedDeltaArgs {
  const float* q = nullptr;  // [T, key_heads * key_dim], row stride qk_stride
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;  // [T, value_heads * value_dim], row stride v_stride
  int64_t v_stride = 0;
  const float* g = nullptr;     // [T, value_heads] log decay (<= 0)
  const float* beta = nullptr;  // [T, value_heads]
  int64_t T = 0, key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  float* state = nullptr;  // [value_heads, key_dim, value_dim], in/out
  float* out = nullptr;    // [T, value_heads * value_dim]
};

enum class GdnMode { kAuto, kChunked, kRecurrent };

// The activation of a gated MLP / expert: act(x gate^T) * (x up^T). SiLU (Qwen) or the tanh
// approximation of GELU (Gemma: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
enum class GluAct { kSilu, kGeluTanh };

// How one logits row becomes a token (Backend::SampleRows): the engine's Sampler rule without the
// penalties (engine/sampler.h; backend/sampling.h holds the reference). temperature <= 0: greedy,
// the largest logit other than `exclude` (ties: lowest id), whose probability is softmax(row) at
// that id over the whole row. Otherwise: softmax(row / temperature) with `exclude` removed, sorted
// by probability (ties: lower id), cut to the top_k first (0: all), renormalised, cut to the
// shortest prefix whose probability reaches top_p (at least one), cut to the tokens of at least
// min_p times the first one's, renormalised; the token is the first whose cumulative probability
// exceeds `uniform` (none: the last one with a positive probability), and its probability is the
// one in that final distribution.
struct RowSampling {
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  int32_t exclude = -1;  // never chosen (the diffusion mask token); -1: none
  double uniform = 0.0;  // the draw in [0, 1) from the sequence's generator (unused when greedy)
};

// One row of a canvas-diffusion step (DiffusionGemma's sampler, engine_canvas.cpp; Backend::
// CanvasSampleRows): the step's temperature and the draw of the row's multinomial sample.
struct CanvasRowRule {
  float temperature = 1.f;  // t > 0: z = logits / t, divided in f32 as transformers divides
  double uniform = 0.0;     // in [0, 1), from the sequence's generator
};

// What the step's host-side rules (acceptance, re-noising, the stop rule, the commit) need of a canvas
// row's processed logits z. CanvasRowReference (backend/sampling.h) defines each field.
struct CanvasRowPick {
  double entropy = 0;        // nats of softmax(z), summed in double
  int32_t argmax = 0;        // the first index of the largest z
  int32_t sampled = 0;       // softmax(z)'s inverse CDF at the rule's uniform, in token order
  float argmax_prob = 0.f;   // softmax(z) at argmax
  int32_t reserved = 0;
};
static_assert(sizeof(CanvasRowPick) == 24, "CanvasRowPick is copied from device memory as is");

// Pointer conventions of the ops below. Activations (float*), weight data, caches and the MoE
// routing outputs (idx / weights) live in the backend's memory: host memory on the CPU backend,
// device memory on a GPU backend; allocate them through Allocate / DeviceBuffer. Integer metadata
// the model builds on the host (token ids, positions, page tables) is passed as host pointers on
// every backend.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* Name() const = 0;

  // --- Memory. The defaults are the host-memory versions the CPU backend uses.
  // True when the backend's memory is not host-addressable.
  virtual bool IsDevice() const { return false; }
  // Zero-filled on the CPU backend; uninitialised on device backends (use Zero).
  virtual void* Allocate(size_t bytes) {
    void* p = std::calloc(bytes ? bytes : 1, 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  virtual void Free(void* p) { std::free(p); }
  // Zero-byte copies may come with null pointers (e.g. a forward that wants no logits rows).
  virtual void Upload(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  virtual void Download(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  virtual void CopyBuffer(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memmove(dst, src, bytes);
  }
  virtual void Zero(void* dst, size_t bytes) {
    if (bytes) std::memset(dst, 0, bytes);
  }
  // Waits for queued work (device backends run ops asynchronously).
  virtual void Synchronize() {}
  // Device memory free / total in bytes (device backends); false on host backends.
  virtual bool MemoryInfo(int64_t* free_bytes, int64_t* total_bytes) {
    (void)free_bytes, (void)total_bytes;
    return false;
  }
  // The ops from BeginStep to EndStep (or to the next Download, Upload or Synchronize, which end
  // the step first) form one step of a forward. A device backend may record them and queue the
  // step as a whole: the CUDA backend replays a CUDA graph when the same step (same kernels,
  // pointers, sizes and scalars) ran before. Results are the same either way; host backends run
  // every op at once and ignore the marks.
  virtual void BeginStep() {}
  virtual void EndStep() {}
  // One line on how steps were queued (the CUDA backend: graphs replayed, captured, op by op).
  virtual std::string StepSummary() { return {}; }
  // Per-op profile (the CUDA backend with TESSERA_CUDA_PROFILE=1; others have none): start a fresh
  // one, and the table of what was recorded since (synchronises; empty when not profiling).
  virtual void ProfileReset() {}
  virtual std::string ProfileReport() { return {}; }
  // Fills n elements (bf16 or f32) with uniform values in [-scale, scale] + offset, never exactly
  // zero before the offset (dummy weights); deterministic per seed.
  virtual void FillRandom(void* dst, DType dtype, int64_t n, float scale, float offset, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      float r = u(rng);
      if (r > -1e-3f && r < 1e-3f) r = r < 0 ? -1e-3f : 1e-3f;
      const float v = r * scale + offset;
      if (dtype == DType::kBF16)
        static_cast<uint16_t*>(dst)[i] = F32ToBf16(v);
      else
        static_cast<float*>(dst)[i] = v;
    }
  }

  // y[m, n] = x[m, k] * w[n, k]^T (+ y when accumulate); w bf16 or f32.
  virtual void MatMul(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate = false) = 0;
  // Products of one input with several weights of the same k (projections reading the same
  // activations: q / k / v, the router and the shared expert): outs[i].y = x * outs[i].w^T. Device
  // backends run them in one launch where they can. Each result equals its MatMul.
  struct MatMulOut {
    const Tensor* w = nullptr;
    float* y = nullptr;
  };
  virtual void MatMulMulti(const float* x, int64_t m, const std::vector<MatMulOut>& outs) {
    for (const MatMulOut& o : outs) MatMul(x, m, *o.w, o.y);
  }
  // y[m, k] = x[m, n] * w[n, k] (no transpose: each output row a weighted sum of w's rows), f32
  // accumulation, w bf16 or f32 and not quantized. DiffusionGemma's self-conditioning input
  // (docs/DIFFUSION_GEMMA.md 5): a step's probabilities [canvas, vocab] times the [vocab, hidden]
  // embedding, which MatMul would need transposed (a second copy of the table). Default refuses
  // (the CPU and CUDA backends implement it).
  virtual void MatMulNoTrans(const float* x, int64_t m, const Tensor& w, float* y) {
    (void)x, (void)m, (void)w, (void)y;
    Fail(ErrorKind::kUnsupported, "backend {} does not implement MatMulNoTrans (the self-conditioning input)",
         Name());
  }
  // out[i, :] = table[ids[i], :] as f32.
  virtual void Embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) = 0;

  // y = x / rms(x) * w (or * (1 + w)); rows of `dim` with row strides; y may alias x.
  virtual void RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w,
                       float eps, bool one_plus, float* y, int64_t y_stride) = 0;
  // y = w * x / rms(x) * silu(z) over rows of `dim` (the GDN output norm); y may alias x.
  virtual void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                            float eps, float* y) = 0;
  // Rotates the first rotary_dim dims of each head (rotate_half convention) in place.
  // x: [rows, heads, head_dim] with row stride; positions: one per row.
  virtual void Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                    int64_t rotary_dim, const int64_t* positions, double theta) = 0;
  // The attention layer's q / k preparation: per-head RmsNorm of q ([rows, q_heads, head_dim], row
  // stride q_stride) with q_norm and of k with k_norm, in place, then RoPE of both at `positions`.
  // The default runs RmsNorm and Rope on each; device backends fuse them.
  virtual void QkNormRope(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride, int64_t k_heads,
                          int64_t rows, int64_t head_dim, const float* q_norm, const float* k_norm, float eps,
                          bool one_plus, int64_t rotary_dim, const int64_t* positions, double theta) {
    if (q_stride == q_heads * head_dim && k_stride == k_heads * head_dim) {
      RmsNorm(q, rows * q_heads, head_dim, head_dim, q_norm, eps, one_plus, q, head_dim);
      RmsNorm(k, rows * k_heads, head_dim, head_dim, k_norm, eps, one_plus, k, head_dim);
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        RmsNorm(q + r * q_stride, q_heads, head_dim, head_dim, q_norm, eps, one_plus, q + r * q_stride, head_dim);
        RmsNorm(k + r * k_stride, k_heads, head_dim, head_dim, k_norm, eps, one_plus, k + r * k_stride, head_dim);
      }
    }
    Rope(q, rows, q_stride, q_heads, head_dim, rotary_dim, positions, theta);
    Rope(k, rows, k_stride, k_heads, head_dim, rotary_dim, positions, theta);
  }
  // The committed rows an attention call writes into the paged KV cache (KvWriteRows' arguments; k is
  // QkNormRope's k, v has k's row stride).
  struct KvRowWrites {
    const float* v = nullptr;
    const int64_t* src_rows = nullptr;  // host indices, n of each
    const int64_t* cache_rows = nullptr;
    int64_t n = 0;
    void* k_cache = nullptr;
    void* v_cache = nullptr;
  };
  // QkNormRope, then KvWriteRows of the normalised, rotated k and of v for kv.n rows. The default runs
  // the two; device backends write the cache rows from the kernel that normalises k (one launch).
  virtual void QkNormRopeKvWrite(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride,
                                 int64_t k_heads, int64_t rows, int64_t head_dim, const float* q_norm,
                                 const float* k_norm, float eps, bool one_plus, int64_t rotary_dim,
                                 const int64_t* positions, double theta, const KvRowWrites& kv) {
    QkNormRope(q, q_stride, q_heads, k, k_stride, k_heads, rows, head_dim, q_norm, k_norm, eps, one_plus, rotary_dim,
               positions, theta);
    if (kv.n > 0)
      KvWriteRows(k, kv.v, k_stride, k_heads * head_dim, kv.src_rows, kv.cache_rows, kv.n, kv.k_cache, kv.v_cache);
  }
  // General rotary embedding (rotate-half pairs): for i < rotated_pairs, dims (i, i + pair_offset) of
  // each head turn by positions[r] * inv_freq[i]; the other dims pass unchanged. inv_freq is host
  // memory ([rotated_pairs], the caller's f32 table). Covers full RoPE (pairs = offset = d/2) and
  // Gemma 4's proportional RoPE (pairs < offset = d/2). cos / sin in f32. The default refuses:
  // backends that serve Gemma implement it (the CPU and CUDA backends do).
  virtual void RopePairs(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                         int64_t pair_offset, int64_t rotated_pairs, const float* inv_freq, const int64_t* positions) {
    (void)x, (void)rows, (void)row_stride, (void)heads, (void)head_dim, (void)pair_offset, (void)rotated_pairs,
        (void)inv_freq, (void)positions;
    Fail(ErrorKind::kUnsupported, "backend {} does not implement RopePairs (Gemma RoPE)", Name());
  }
  // out = gelu_tanh(gate) * up, n elements (Gemma's MLPs). Default refuses.
  virtual void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
    (void)gate, (void)up, (void)n, (void)out;
    Fail(ErrorKind::kUnsupported, "backend {} does not implement GeluTanhMul", Name());
  }
  // x[i] *= s, n elements. Default refuses.
  virtual void Scale(float* x, int64_t n, float s) {
    (void)x, (void)n, (void)s;
    Fail(ErrorKind::kUnsupported, "backend {} does not implement Scale", Name());
  }
  // x[i] = cap * tanh(x[i] / cap), n elements (Gemma's final logit soft-cap). Default refuses.
  virtual void SoftCap(float* x, int64_t n, float cap) {
    (void)x, (void)n, (void)cap;
    Fail(ErrorKind::kUnsupported, "backend {} does not implement SoftCap", Name());
  }
  // x[i] *= table[idx[i]], n elements (Gemma's router: the top-k weights times a per-expert scale
  // after renormalisation); x, idx, table in backend memory. Default refuses.
  virtual void ScaleByIndex(float* x, const int32_t* idx, int64_t n, const float* table) {
    (void)x, (void)idx, (void)n, (void)table;
    Fail(ErrorKind::kUnsupported, "backend {} does not implement ScaleByIndex", Name());
  }
  // x[i] *= sigmoid(gate[i]) for rows with independent strides.
  virtual void SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate,
                           int64_t gate_stride) = 0;
  // x[r, :] *= sigmoid(s[r]) (the shared-expert gate).
  virtual void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* s) = 0;
  // x[r, :] /= divisors[r] (rows of dim, contiguous): the MoE router's per-request temperature,
  // applied to each request's rows of the router logits. `divisors` is host metadata ([rows]), like
  // positions: the engine sets it per segment, so it changes from step to step.
  virtual void DivideRows(float* x, int64_t rows, int64_t dim, const float* divisors) = 0;
  // out = silu(gate) * up, n elements.
  virtual void SiluMul(const float* gate, const float* up, int64_t n, float* out) = 0;
  // out[r, :] = silu(gate[r, :]) * up[r, :] * sigmoid(s[r]), rows of dim (the shared expert's
  // activation and gate): SiluMul then SigmoidScaleRows, one launch on a GPU; same results.
  virtual void SiluMulScaleRows(const float* gate, const float* up, int64_t rows, int64_t dim, const float* s,
                                float* out) {
    SiluMul(gate, up, rows * dim, out);
    SigmoidScaleRows(out, rows, dim, s);
  }
  // y += x, n elements.
  virtual void Add(const float* x, int64_t n, float* y) = 0;
  // h += delta, then y = RmsNorm(h) (rows of dim, contiguous; y must not alias h or delta): a layer's
  // residual add and the norm after it in one op. Same result as Add then RmsNorm.
  virtual void AddRmsNorm(const float* delta, float* h, int64_t rows, int64_t dim, const float* w, float eps,
                          bool one_plus, float* y) {
    Add(delta, rows * dim, h);
    RmsNorm(h, rows, dim, dim, w, eps, one_plus, y, dim);
  }
  // dst[r, 0:cols] = src[r, 0:cols] with row strides (gathers a column block or de-interleaves).
  virtual void Copy2D(const float* src, int64_t rows, int64_t cols, int64_t src_stride, float* dst,
                      int64_t dst_stride) = 0;

  // Element type of the paged KV cache (KvWrite, KvWriteRows, AttentionArgs::k_cache). f32 unless set:
  // bf16 halves the bytes a decode step's attention reads and doubles the tokens a pool holds, at the
  // price of rounding K and V to 8 mantissa bits (vLLM's cache for bf16 models). Set it before any cache
  // is allocated; a backend that cannot keep `dtype` throws Error(kUnsupported).
  virtual DType KvCacheDType() const { return DType::kF32; }
  virtual void SetKvCacheDType(DType dtype) {
    if (dtype != DType::kF32)
      Fail(ErrorKind::kUnsupported, "this backend keeps an f32 KV cache (kv cache dtype {} needs --device cuda)",
           DTypeName(dtype));
  }
  // What the matrix products (MatMul*, the MoE experts, attention's Q K^T and P V) feed the tensor
  // cores: f32 (default: the activations split into bf16 hi + lo parts, ~16 mantissa bits, the
  // fixtures' 1e-3 precision) or bf16 (the activations rounded to bf16, one product instead of two or
  // three: what other engines serve; accumulation, norms, softmax, routing, recurrent state and the
  // residual stream stay f32). Products that are not on tensor cores (the CPU's, the GPU's few-row
  // GEMV) keep f32 either way. A backend without bf16 products throws Error(kUnsupported).
  virtual DType ActivationPrecision() const { return DType::kF32; }
  virtual void SetActivationPrecision(DType dtype) {
    if (dtype != DType::kF32)
      Fail(ErrorKind::kUnsupported,
           "this backend multiplies f32 activations (activation precision {} needs --device cuda)", DTypeName(dtype));
  }
  // Paged KV cache: writes T rows of k/v ([T, kv_dim] f32, stride kv_stride) at positions first_pos..
  // into k_cache/v_cache ([num_pages * page_size, kv_dim] of KvCacheDType(), rounded to nearest).
  virtual void KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim,
                       int64_t first_pos, const int32_t* pages, int64_t page_size, void* k_cache,
                       void* v_cache) = 0;
  // The batched form of KvWrite (all segments of a batch in one call): k_cache[cache_rows[i]] =
  // k[src_rows[i]] (rows of kv_dim; k/v row stride kv_stride), the same for v. Host indices. The
  // default is for f32 caches.
  virtual void KvWriteRows(const float* k, const float* v, int64_t kv_stride, int64_t kv_dim, const int64_t* src_rows,
                           const int64_t* cache_rows, int64_t n, void* k_cache, void* v_cache) {
    for (int64_t i = 0; i < n; ++i) {
      CopyBuffer(static_cast<float*>(k_cache) + cache_rows[i] * kv_dim, k + src_rows[i] * kv_stride,
                 kv_dim * sizeof(float));
      CopyBuffer(static_cast<float*>(v_cache) + cache_rows[i] * kv_dim, v + src_rows[i] * kv_stride,
                 kv_dim * sizeof(float));
    }
  }
  virtual void Attention(const AttentionArgs& a) = 0;
  // Attention of several sequences' rows (the segments of a batch, same heads) in one call; device
  // backends launch once for all of them. The default runs Attention per entry.
  virtual void AttentionBatch(const std::vector<AttentionArgs>& args) {
    for (const AttentionArgs& a : args) Attention(a);
  }

  // Depthwise causal conv1d + SiLU over T rows of `channels` (x row stride x_stride), continuing
  // from `state` ([channels, K-1]: the K-1 previous inputs, oldest first). w: [channels, K] f32.
  virtual void CausalConv1dSilu(const float* x, int64_t T, int64_t x_stride, int64_t channels,
                                const float* w, int64_t K, const float* state, float* y) = 0;
  // Shifts the first T rows of x into the conv state.
  virtual void CausalConv1dUpdateState(const float* x, int64_t T, int64_t x_stride, int64_t channels,
                                       int64_t K, float* state) = 0;
  virtual void GatedDeltaRule(const GatedDeltaArgs& a, GdnMode mode) = 0;

  // Batched forms over the sequences of a batch (device backends launch once for all of them; the
  // defaults run the single op per sequence). Rows are the batch's rows: a segment covers rows
  // [row0, row0 + T) of x (row stride x_stride) and of y (row stride channels).
  struct ConvSegment {
    int64_t row0 = 0, T = 0;
    float* state = nullptr;  // [channels, K - 1] of this sequence
  };
  virtual void CausalConv1dSiluBatch(const float* x, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                                     const std::vector<ConvSegment>& segs, float* y) {
    for (const ConvSegment& s : segs)
      CausalConv1dSilu(x + s.row0 * x_stride, s.T, x_stride, channels, w, K, s.state, y + s.row0 * channels);
  }
  // Shifts each segment's first T rows into its state.
  virtual void CausalConv1dUpdateStateBatch(const float* x, int64_t x_stride, int64_t channels, int64_t K,
                                            const std::vector<ConvSegment>& segs) {
    for (const ConvSegment& s : segs) CausalConv1dUpdateState(x + s.row0 * x_stride, s.T, x_stride, channels, K, s.state);
  }
  // CausalConv1dSiluBatch then CausalConv1dUpdateStateBatch over the same segments (every row of
  // each segment committed, as in a decode step). A device backend does both in one pass when every
  // segment is one row; the default calls the two ops.
  virtual void CausalConv1dSiluUpdateBatch(const float* x, int64_t x_stride, int64_t channels, const float* w,
                                           int64_t K, const std::vector<ConvSegment>& segs, float* y) {
    CausalConv1dSiluBatch(x, x_stride, channels, w, K, segs, y);
    CausalConv1dUpdateStateBatch(x, x_stride, channels, K, segs);
  }
  // Independent runs (distinct states, same head shape).
  virtual void GatedDeltaRuleBatch(const std::vector<GatedDeltaArgs>& runs, GdnMode mode) {
    for (const GatedDeltaArgs& a : runs) GatedDeltaRule(a, mode);
  }
  // g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]); beta[t, h] = sigmoid(b[t, h]). a, b,
  // g and beta have their own row strides; g / beta may be a / b themselves (in place).
  virtual void GdnGates(const float* a, const float* b, int64_t T, int64_t heads, int64_t a_stride,
                        int64_t b_stride, const float* a_log, const float* dt_bias, float* g, float* beta,
                        int64_t out_stride) = 0;

  // counts[e] += how many of idx[0..n) equal e (ids outside [0, num_experts) are not counted): the
  // routing statistics of a forward, kept in backend memory so that reading them costs one copy
  // after the step, not a host round trip per layer.
  virtual void CountIds(const int32_t* idx, int64_t n, int64_t num_experts, int32_t* counts) {
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] >= 0 && idx[i] < num_experts) ++counts[idx[i]];
  }
  // Router: softmax (f32) over E logits per row, top-k (ties -> lower index), renormalised when
  // renormalize. idx/weights: [rows, k].
  virtual void MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k,
                        bool renormalize, int32_t* idx, float* weights) = 0;
  // out[r] = sum_j weights[r, j] * Expert_{idx[r, j]}(x[r]) (summed in j order, deterministic per row).
  virtual void MoeExperts(const float* x, int64_t rows, int64_t hidden, const int32_t* idx,
                          const float* weights, int64_t k, const std::vector<ExpertWeights>& experts,
                          float* out) = 0;
  // MoeExperts with the experts' activation named: SiLU is MoeExperts itself; other activations
  // (Gemma's gelu-tanh experts) need a backend that implements them (the CPU and CUDA backends do).
  virtual void MoeExpertsAct(const float* x, int64_t rows, int64_t hidden, const int32_t* idx, const float* weights,
                             int64_t k, const std::vector<ExpertWeights>& experts, GluAct act, float* out) {
    if (act == GluAct::kSilu) return MoeExperts(x, rows, hidden, idx, weights, k, experts, out);
    Fail(ErrorKind::kUnsupported, "backend {} does not implement gelu-tanh experts", Name());
  }
  // The residual add and the norm after a MoE block, done by MoeRouteExperts' last step when given:
  // out += extra (when not null), then h += out and y = RmsNorm(h; w) as AddRmsNorm(out, h, ...).
  struct ResidualNorm {
    float* h = nullptr;             // [rows, hidden], updated in place
    const float* extra = nullptr;   // [rows, hidden] added to the experts' sum first (a shared expert)
    const float* w = nullptr;       // [hidden]
    float eps = 0;
    bool one_plus = false;
    float* y = nullptr;             // [rows, hidden]; may be the MoE input x
  };
  // MoeRoute then MoeExperts on its idx / weights (both still written: expert statistics read idx),
  // then, with `residual`, its add and norm (out is scratch then). A device backend routes inside
  // the expert kernels of a few-token step and sums the experts inside the norm (a launch less
  // each); the same results as the separate ops.
  virtual void MoeRouteExperts(const float* logits, const float* x, int64_t rows, int64_t hidden, int64_t k,
                               bool renormalize, int32_t* idx, float* weights,
                               const std::vector<ExpertWeights>& experts, float* out,
                               const ResidualNorm* residual = nullptr) {
    MoeRoute(logits, rows, static_cast<int64_t>(experts.size()), k, renormalize, idx, weights);
    MoeExperts(x, rows, hidden, idx, weights, k, experts, out);
    if (residual) {
      if (residual->extra) Add(residual->extra, rows * hidden, out);
      AddRmsNorm(out, residual->h, rows, hidden, residual->w, residual->eps, residual->one_plus, residual->y);
    }
  }

  virtual void Softmax(float* x, int64_t rows, int64_t n) = 0;
  virtual void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out) = 0;
  // One token per logits row by RowSampling (params: host, one per row); tokens / probs: backend
  // memory, [rows]. A backend may answer token -1 for a row it cannot finish (the CUDA kernel: only
  // a one-token vocabulary whose token is excluded); the caller then samples that row from its
  // logits with SampleRowReference. The default runs the reference on host memory (the CPU backend).
  virtual void SampleRows(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params,
                          int32_t* tokens, float* probs);
  // Structured output where the logits are: row rows[i] of logits (backend memory, [.., vocab]) keeps
  // token t only where bit t % 32 of words[i * W + t / 32] is set (W = (vocab + 31) / 32; words and rows
  // on the host, n rows), every other logit becomes -inf (a grammar's mask, applied before SampleRows).
  // The default runs on host memory (the CPU backend).
  virtual void MaskLogitsRows(float* logits, int64_t vocab, const int64_t* rows, int64_t n, const uint32_t* words);
  // Canvas rows (rules: host, one per row; logits and picks: backend memory): each row of logits
  // becomes its z = logits / t in place, then picks[r] = CanvasRowReference(z). With round_z_to_bf16,
  // z is then rounded to bf16 in place: the S of the next step's self-conditioning input in a bf16
  // model (docs/DIFFUSION_GEMMA.md 5). The default runs the reference on host memory.
  virtual void CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowRule* rules,
                                bool round_z_to_bf16, CanvasRowPick* picks);
};

// An owned allocation in a backend's memory (RAII; move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& be, size_t bytes) : be_(&be), bytes_(bytes), p_(be.Allocate(bytes)) {}
  static DeviceBuffer Floats(Backend& be, int64_t n) { return DeviceBuffer(be, static_cast<size_t>(n) * 4); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      be_ = std::exchange(o.be_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Release(); }

  void* data() const { return p_; }
  float* f32() const { return static_cast<float*>(p_); }
  int32_t* i32() const { return static_cast<int32_t*>(p_); }
  size_t bytes() const { return bytes_; }
  bool empty() const { return p_ == nullptr; }
  // The content as host floats (a copy).
  std::vector<float> ToHost() const {
    std::vector<float> out(bytes_ / 4);
    if (p_ && bytes_) be_->Download(out.data(), p_, out.size() * 4);
    return out;
  }

 private:
  void Release() {
    if (p_) be_->Free(p_);
    p_ = nullptr;
  }
  Backend* be_ = nullptr;
  size_t bytes_ = 0;
  void* p_ = nullptr;
};

std::unique_ptr<Backend> MakeCpuBackend();
// The CUDA backend on the current device; throws Error(kUnsupported) when this build has no CUDA
// or no device is present.
std::unique_ptr<Backend> MakeCudaBackend();
// Visible CUDA devices; 0 when this build has no CUDA or the driver reports none / fails.
int CudaDeviceCount();
// "cpu" or "cuda".
inline std::unique_ptr<Backend> MakeBackend(const std::string& device) {
  if (device == "cpu") return MakeCpuBackend();
  if (device == "cuda") return MakeCudaBackend();
  Fail(ErrorKind::kInvalidArgument, "unknown device \"{}\" (expected cpu or cuda)", device);
}

}  // namespace tessera

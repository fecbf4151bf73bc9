// tessera tests: the CUDA backend's AttentionBatch against the CPU backend's per-sequence Attention on
// random non-zero inputs, for both target attention shapes (32 / 4 heads of 128, 16 / 2 heads of 256)
// and the call shapes that pick different kernels and block shapes: a prompt (tiles of rows, key
// splits merged), a ragged mix, and prompts with enough tiles to run unsplit; the flash kernel's other
// shapes (2 query heads a KV head, heads of 512 dims: two blocks a tile); and DiffusionGemma's
// sliding-window and canvas masks (heads of up to 512 dims). Each runs with the
// tensor-core kernels (TESSERA_CUDA_ATTENTION_FLASH=1: flash, and the decode kernel for decode calls)
// and without them (the per-head kernel); decode calls also on the flash kernel's few-row shape
// (TESSERA_CUDA_ATTENTION_DECODE=0). Each also runs on a bf16 KV cache
// (--kv-cache-dtype bf16) with K and V drawn as bf16 values, so the cache is exact and the CPU's f32
// reference still applies (the kernels' own error only). Causal sequences (prompts, decode rows) pass
// commit_len = T with their rows written to the cache first, as the model's attention layer does; a
// bf16 call must then read them from the cache, so its k / v rows of those sequences are NaN on the
// device. Diffusion blocks stay uncommitted (their bf16 rows come from KvStage). Every call runs twice
// on its backend. Prints the relative error (max |gpu - cpu| / max |cpu|). Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "kv_cache_host.h"
#include "test_util.h"

namespace tessera {
namespace {

constexpr double kTol = 1e-4;
// Q, K, P and V rounded to bf16 (2^-9 relative each): a wrong fragment or layout is off by O(1).
constexpr double kTolBf16Activations = 3e-2;

// Random inputs, never zero (tests/test_util.h).
constexpr auto& Rand = testing::NonZeroUniform;

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, ref = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    ref = std::max(ref, std::fabs(static_cast<double>(want[i])));
  }
  return diff / ref;
}

// Sets an environment variable for the lifetime of the object, then restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct Shape {
  int64_t heads, kv_heads, hd;
};
struct Seq {
  int64_t first_pos, T, block;
  int64_t window = 0;   // AttentionArgs::sliding_window
  int64_t canvas = -1;  // AttentionArgs::canvas_begin: rows from it on are a DiffusionGemma canvas
};

// One AttentionBatch call: host inputs, the CPU reference output, and what the device run needs.
// Rows are padded (q, k/v, out strides a little wider than the heads) so strides are exercised;
// the paged caches hold random values everywhere, prefixes on pages of 16 in a shuffled order.
class Call {
 public:
  // reference = false skips the CPU run (timing only); bf16: K and V values are bf16-exact.
  Call(const Shape& sh, const std::vector<Seq>& seqs, uint64_t seed, bool reference = true, bool bf16 = false)
      : sh_(sh), seqs_(seqs), bf16_(bf16) {
    kv_dim_ = sh.kv_heads * sh.hd;
    q_stride_ = sh.heads * sh.hd + 8;
    kv_stride_ = kv_dim_ + 4;  // keeps K/V rows 16-byte aligned (the tensor-core kernel needs it)
    out_stride_ = sh.heads * sh.hd + 4;
    for (const Seq& s : seqs) {
      rows_ += s.T;
      pages_total_ += (s.first_pos + s.T + kPage - 1) / kPage + 1;
    }
    q_ = Rand(rows_ * q_stride_, -2, 2, seed);
    k_ = Rand(rows_ * kv_stride_, -1, 1, seed + 1);
    v_ = Rand(rows_ * kv_stride_, -1, 1, seed + 2);
    kc_ = Rand(pages_total_ * kPage * kv_dim_, -1, 1, seed + 3);
    vc_ = Rand(pages_total_ * kPage * kv_dim_, -1, 1, seed + 4);
    if (bf16) {
      for (auto* x : {&k_, &v_, &kc_, &vc_})
        for (float& e : *x) e = Bf16ToF32(F32ToBf16(e));
    }
    std::vector<int32_t> perm(pages_total_);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<unsigned>(seed)));
    int64_t next = 0;
    for (const Seq& s : seqs) {
      const int64_t np = (s.first_pos + s.T + kPage - 1) / kPage + 1;
      pages_.emplace_back(perm.begin() + next, perm.begin() + next + np);
      next += np;
    }
    // Committed rows into the cache (what KvWriteRows does before the model's attention call).
    int64_t row0 = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      for (int64_t t = 0; t < CommitLen(seqs[i]); ++t) {
        const int64_t pos = seqs[i].first_pos + t, row = pages_[i][pos / kPage] * kPage + pos % kPage;
        std::copy_n(k_.begin() + (row0 + t) * kv_stride_, kv_dim_, kc_.begin() + row * kv_dim_);
        std::copy_n(v_.begin() + (row0 + t) * kv_stride_, kv_dim_, vc_.begin() + row * kv_dim_);
      }
      row0 += seqs[i].T;
    }
    want_.assign(rows_ * out_stride_, 0.0f);
    if (!reference) return;
    auto cpu = MakeCpuBackend();
    for (const AttentionArgs& a : Args(q_.data(), k_.data(), v_.data(), kc_.data(), vc_.data(), want_.data()))
      cpu->Attention(a);
  }

  // The same call on `gpu` (its KvCacheDType() picks the cache's element type; an f32 cache of these
  // shapes' rows is split); returns the relative error against the CPU.
  double RunOn(Backend& gpu) const {
    auto dev = [&](const std::vector<float>& h) {
      DeviceBuffer b(gpu, h.size() * sizeof(float));
      gpu.Upload(b.data(), h.data(), h.size() * sizeof(float));
      return b;
    };
    const bool bf16 = gpu.KvCacheDType() == DType::kBF16;
    EXPECT_TRUE(!bf16 || bf16_) << "a bf16 cache needs bf16-exact K / V";
    // The caches in the backend's layout (f32, split f32 or bf16: cuda_kv_layout.h), written as the model
    // writes them: every row through KvWriteRows.
    const int64_t cache_rows = static_cast<int64_t>(kc_.size()) / kv_dim_;
    DeviceBuffer hk = dev(kc_), hv = dev(vc_);
    DeviceBuffer dkc(gpu, kc_.size() * DTypeSize(gpu.KvCacheDType()));
    DeviceBuffer dvc(gpu, vc_.size() * DTypeSize(gpu.KvCacheDType()));
    std::vector<int64_t> all_rows(cache_rows);
    std::iota(all_rows.begin(), all_rows.end(), 0);
    gpu.KvWriteRows(hk.f32(), hv.f32(), kv_dim_, kv_dim_, all_rows.data(), all_rows.data(), cache_rows, dkc.data(),
                    dvc.data());
    // bf16 and split calls read committed rows from the cache only: NaN in k / v would show if they did not.
    std::vector<float> k = k_, v = v_;
    if (bf16 || cuda::F32KvLayout(kv_dim_) == cuda::KvLayout::kSplit) {
      int64_t row0 = 0;
      for (const Seq& s : seqs_) {
        for (int64_t t = 0; t < CommitLen(s); ++t) {
          std::fill_n(k.begin() + (row0 + t) * kv_stride_, kv_dim_, NAN);
          std::fill_n(v.begin() + (row0 + t) * kv_stride_, kv_dim_, NAN);
        }
        row0 += s.T;
      }
    }
    DeviceBuffer dq = dev(q_), dk = dev(k), dv = dev(v);
    // The gaps between output rows stay 0 on both sides: a stray write shows as an error. Twice on the
    // same backend: nothing a call leaves behind (scratch, cached descriptors) may change the next.
    double err = 0;
    for (int round = 0; round < 2; ++round) {
      DeviceBuffer dout = dev(std::vector<float>(want_.size(), 0.0f));
      gpu.AttentionBatch(Args(dq.f32(), dk.f32(), dv.f32(), dkc.data(), dvc.data(), dout.f32()));
      std::vector<float> got(want_.size());
      gpu.Download(got.data(), dout.data(), got.size() * sizeof(float));
      err = std::max(err, RelErr(got, want_));
    }
    return err;
  }

  // Microseconds per call on `gpu` (mean of `iters` calls queued back to back after a warm-up call).
  double TimeOn(Backend& gpu, int iters) const {
    auto dev = [&](const std::vector<float>& h) {
      DeviceBuffer b(gpu, h.size() * sizeof(float));
      gpu.Upload(b.data(), h.data(), h.size() * sizeof(float));
      return b;
    };
    // The cache's bytes (f32, or as many bf16: values do not matter for timing).
    const size_t cache_bytes = kc_.size() * DTypeSize(gpu.KvCacheDType());
    DeviceBuffer dq = dev(q_), dk = dev(k_), dv = dev(v_), dout = dev(want_);
    DeviceBuffer dkc(gpu, cache_bytes), dvc(gpu, cache_bytes);
    gpu.Upload(dkc.data(), kc_.data(), cache_bytes);
    gpu.Upload(dvc.data(), vc_.data(), cache_bytes);
    const auto args = Args(dq.f32(), dk.f32(), dv.f32(), dkc.data(), dvc.data(), dout.f32());
    gpu.AttentionBatch(args);
    gpu.Synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) gpu.AttentionBatch(args);
    gpu.Synchronize();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
  }

  int64_t rows() const { return rows_; }

 private:
  static constexpr int64_t kPage = 16;

  // Causal sequences (prompts, decode rows) commit their rows; diffusion blocks do not, nor canvas rows.
  static int64_t CommitLen(const Seq& s) { return s.block > 0 ? 0 : s.canvas >= 0 ? s.canvas : s.T; }

  std::vector<AttentionArgs> Args(const float* q, const float* k, const float* v, const void* kc, const void* vc,
                                  float* out) const {
    std::vector<AttentionArgs> args;
    int64_t row0 = 0;
    for (size_t i = 0; i < seqs_.size(); ++i) {
      const Seq& s = seqs_[i];
      AttentionArgs a;
      a.q = q + row0 * q_stride_;
      a.q_stride = q_stride_;
      a.k = k + row0 * kv_stride_;
      a.v = v + row0 * kv_stride_;
      a.kv_stride = kv_stride_;
      a.T = s.T;
      a.num_heads = sh_.heads;
      a.num_kv_heads = sh_.kv_heads;
      a.head_dim = sh_.hd;
      a.first_pos = s.first_pos;
      a.commit_len = CommitLen(s);
      a.k_cache = kc;
      a.v_cache = vc;
      a.pages = pages_[i].data();
      a.page_size = kPage;
      a.block_size = s.block;
      a.sliding_window = s.window;
      a.canvas_begin = s.canvas;
      a.scale = 1.0f / std::sqrt(static_cast<float>(sh_.hd));
      a.out = out + row0 * out_stride_;
      a.out_stride = out_stride_;
      args.push_back(a);
      row0 += s.T;
    }
    return args;
  }

  Shape sh_;
  std::vector<Seq> seqs_;
  bool bf16_ = false;
  int64_t kv_dim_ = 0, q_stride_ = 0, kv_stride_ = 0, out_stride_ = 0, rows_ = 0, pages_total_ = 0;
  std::vector<float> q_, k_, v_, kc_, vc_, want_;
  std::vector<std::vector<int32_t>> pages_;
};

// The shapes of the two target models: Qwen3-30B-A3B (32 / 4 heads of 128) and Qwen3.5-35B-A3B (16 / 2
// heads of 256), plus group sizes 4 and 16 of the tensor-core kernel.
const Shape kShapes[] = {{32, 4, 128}, {16, 2, 256}};
const Shape kOtherGroups[] = {{16, 4, 128}, {32, 2, 256}};

// The call on CUDA backends made with each kernel choice: the tensor-core kernels (decode calls on
// the decode kernel, many-row calls of 128-dim heads on the wgmma kernel in sm_90a builds), the flash
// kernel's few-row shape for decode calls too (TESSERA_CUDA_ATTENTION_DECODE=0; only where
// `decode_off`), its many-row shape for the others (TESSERA_CUDA_ATTENTION_WGMMA=0; not where
// `decode_off`), and with FLASH=0 the per-head kernel. An
// f32 cache of these shapes is split (cuda_kv_layout.h).
void RunKernels(const std::string& what, const Shape& sh, const std::vector<Seq>& seqs, uint64_t seed,
                bool decode_off) {
  struct Choice {
    const char *flash, *decode, *wgmma, *label;
  };
  const Choice choices[] = {{"1", "1", "1", "flash=1"},
                            {"1", "0", "1", "flash=1 decode=0"},
                            {"1", "1", "0", "flash=1 wgmma=0"},
                            {"0", "1", "1", "flash=0"}};
  for (const bool bf16 : {false, true}) {
    const Call call(sh, seqs, seed, /*reference=*/true, bf16);
    for (const Choice& ch : choices) {
      if (!decode_off && std::string(ch.decode) == "0") continue;
      if (decode_off && std::string(ch.wgmma) == "0") continue;  // decode calls never take the wgmma kernel
      // bf16 activations (Q, K, P, V rounded to bf16 in the tensor-core kernels of prompts and
      // blocks): within kTolBf16Activations of the f32 reference.
      for (const bool act_bf16 : {false, true}) {
        if (act_bf16 && (decode_off || std::string(ch.flash) == "0")) continue;
        std::unique_ptr<Backend> gpu;
        {
          ScopedEnv flash("TESSERA_CUDA_ATTENTION_FLASH", ch.flash);
          ScopedEnv decode("TESSERA_CUDA_ATTENTION_DECODE", ch.decode);
          ScopedEnv wgmma("TESSERA_CUDA_ATTENTION_WGMMA", ch.wgmma);
          gpu = MakeCudaBackend();
        }
        if (bf16) gpu->SetKvCacheDType(DType::kBF16);
        if (act_bf16) gpu->SetActivationPrecision(DType::kBF16);
        const double err = call.RunOn(*gpu);
        char name[176];
        std::snprintf(name, sizeof(name), "%s heads=%ld/%ld hd=%ld rows=%ld %s kv=%s%s", what.c_str(),
                      static_cast<long>(sh.heads), static_cast<long>(sh.kv_heads), static_cast<long>(sh.hd),
                      static_cast<long>(call.rows()), ch.label, bf16 ? "bf16" : "f32", act_bf16 ? " act=bf16" : "");
        std::printf("attention %-80s rel err %.3e\n", name, err);
        EXPECT_LE(err, act_bf16 ? kTolBf16Activations : kTol) << name;
      }
    }
  }
}

void RunBoth(const std::string& what, const Shape& sh, const std::vector<Seq>& seqs, uint64_t seed) {
  RunKernels(what, sh, seqs, seed, /*decode_off=*/false);
}

// Decode calls: every kernel choice, the flash kernel's few-row shape included.
void RunDecode(const std::string& what, const Shape& sh, const std::vector<Seq>& seqs, uint64_t seed) {
  RunKernels(what, sh, seqs, seed, /*decode_off=*/true);
}

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  }
};

// (a) One prompt of 300 rows (not a multiple of any tile), causal, no prefix: tiles with a partial
// last tile, and key splits (too few tiles to fill the device).
TEST_F(CudaAttention, PromptCausal) {
  for (const Shape& sh : kShapes) RunBoth("prompt T=300", sh, {{0, 300, 0}}, 100);
}

// (b) Eight diffusion blocks of 32 rows (block-causal, block_size 32) over 1,000-token prefixes on
// shuffled pages.
TEST_F(CudaAttention, DiffusionBlocks) {
  std::vector<Seq> seqs;
  for (int i = 0; i < 8; ++i) seqs.push_back({1000, 32, 32});
  for (const Shape& sh : kShapes) RunBoth("8 x 32-row blocks, prefix 1000", sh, seqs, 200);
  // Prefixes that do not end on a block boundary, and a block whose rows see keys past the tile.
  for (const Shape& sh : kShapes)
    RunBoth("blocks, ragged prefixes", sh, {{1000, 32, 32}, {45, 32, 32}, {7, 20, 16}}, 210);
}

// (c) Batched decode: 64 sequences of one row, prefixes of 1 to 2,000 keys.
TEST_F(CudaAttention, BatchedDecode) {
  std::vector<Seq> seqs;
  std::mt19937 rng(5);
  for (int i = 0; i < 64; ++i) seqs.push_back({1 + static_cast<int64_t>(rng() % 2000), 1, 0});
  seqs[0].first_pos = 1, seqs[1].first_pos = 2000;
  for (const Shape& sh : kShapes) RunDecode("decode 64 x 1", sh, seqs, 300);
  // One and two sequences: many key splits, some of them empty for the shorter sequence.
  for (const Shape& sh : kShapes) RunDecode("decode 2 x 1", sh, {{3000, 1, 0}, {40, 1, 0}}, 310);
  for (const Shape& sh : kShapes) RunDecode("decode 1 x 1", sh, {{1, 1, 0}}, 320);
  // A one-token prompt (every key is a new row) and a row whose keys end mid-tile after 16-key tiles.
  for (const Shape& sh : kShapes) RunDecode("decode, no prefix + 37 keys", sh, {{0, 1, 0}, {36, 1, 0}}, 325);
  // Group sizes 4 and 16 on the few-row tiles (4 rows of 4 heads, 1 row of 16), one partly filled;
  // the decode kernel's tiles: 2 rows of 4 heads (one with 2 rows, one with 1), 1 row of 16.
  for (const Shape& sh : kOtherGroups) {
    RunDecode("decode 2 x 1", sh, {{3000, 1, 0}, {40, 1, 0}}, 330);
    RunDecode("decode 2 + 1 rows", sh, {{700, 2, 0}, {40, 1, 0}}, 335);
    RunBoth("decode 1 + 3 rows", sh, {{700, 1, 0}, {40, 3, 0}}, 340);
  }
}

// (d) A ragged mix in one call: decode rows, a prompt with a prefix, a diffusion block, a short prompt.
TEST_F(CudaAttention, RaggedMix) {
  const std::vector<Seq> seqs = {{40, 1, 0}, {0, 20, 0}, {64, 32, 32}, {300, 1, 0}, {17, 5, 0}, {129, 70, 0}};
  for (const Shape& sh : kShapes) RunBoth("ragged mix", sh, seqs, 400);
  for (const Shape& sh : kOtherGroups) RunBoth("ragged mix", sh, seqs, 410);
}

// (e) Prompts with enough tiles to fill the device: every block takes all its keys (no split).
TEST_F(CudaAttention, PromptsUnsplit) {
  std::vector<Seq> seqs;
  for (int i = 0; i < 8; ++i) seqs.push_back({i % 2 == 0 ? 0 : 37 * i, 280, 0});
  for (const Shape& sh : kShapes) RunBoth("8 prompts of 280", sh, seqs, 500);
  for (const Shape& sh : kOtherGroups) RunBoth("8 prompts of 280", sh, seqs, 510);
}

// (f) DiffusionGemma's masks (AttentionArgs::sliding_window, canvas_begin; docs/DIFFUSION_GEMMA.md 3.2),
// on the flash kernel (keys [first, last] a row; never the decode kernel) and the per-head kernel (the
// tiny shapes always, every shape with FLASH=0): windowed causal prompts and chunks whose
// window reaches into the paged prefix, canvases after a prefix (window: only its last W - 1 keys; none:
// every key), a commit fused with the next canvas, a windowed decode row (key splits mostly empty), all
// batched. Shapes: the published 26B-A4B's sliding (16 / 8 heads of 256) and global layers (16 / 2 heads
// of 512), the same masks at 128 dims, and the tiny fixtures' (4 / 2 of 16, 4 / 1 of 32: plain f32 rows).
TEST_F(CudaAttention, SlidingWindowAndCanvasRows) {
  const Shape shapes[] = {{16, 8, 256}, {16, 2, 512}, {8, 2, 128}, {4, 2, 16}, {4, 1, 32}};
  const std::vector<Seq> seqs = {
      {0, 40, 0, 8},            // windowed prompt, no prefix
      {30, 20, 0, 8},           // a chunk whose window starts in the cache
      {24, 16, 0, 8, 0},        // a canvas after a 24-key prefix: its last 7 keys and the canvas
      {20, 4 + 16, 0, 8, 4},    // 4 committed rows (windowed) and the next canvas in one call
      {300, 33, 0, 0, 0},       // a canvas over every key of a prefix (global layers)
      {2000, 1, 0, 1024},       // a windowed decode row: splits before the window are empty
      {1500, 256, 0, 1024, 0},  // a full-size canvas: the window's 1023 keys before it
  };
  for (const Shape& sh : shapes) {
    RunBoth("window + canvas mix", sh, seqs, 700);
    // Alone (fewer rows: key splits), all but the 256-row canvas, whose CPU reference is the slow one.
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].T < 256) RunBoth("window / canvas alone", sh, {seqs[i]}, 710 + i);
  }
}

// (g) The flash kernel's shapes beyond the Qwen models': 2 query heads a KV head (DiffusionGemma's
// sliding layers), and heads of 512 dims (its global layers: two blocks a tile, each with half of the
// output and every score), on causal prompts, diffusion blocks, decode rows (the few-row shape, key
// splits; the decode kernel does not take these shapes) and a ragged mix.
TEST_F(CudaAttention, GroupTwoAndWideHeads) {
  const Shape shapes[] = {{16, 8, 256}, {8, 4, 128}, {16, 2, 512}, {16, 8, 512}};
  for (const Shape& sh : shapes) {
    RunBoth("prompt T=300", sh, {{0, 300, 0}}, 800);
    RunBoth("blocks, ragged prefixes", sh, {{1000, 32, 32}, {45, 32, 32}, {7, 20, 16}}, 810);
    RunDecode("decode 2 x 1", sh, {{3000, 1, 0}, {40, 1, 0}}, 820);
    RunBoth("ragged mix", sh, {{40, 1, 0}, {0, 20, 0}, {64, 32, 32}, {300, 1, 0}, {17, 5, 0}, {129, 70, 0}}, 830);
  }
}

// KvWrite and KvWriteRows into a bf16 cache: every written element is the host's round-to-nearest-even
// bf16 of its f32 input, bit for bit (ties included), and rows nobody wrote keep their bytes.
TEST_F(CudaAttention, KvWriteBf16Cache) {
  auto gpu = MakeCudaBackend();
  gpu->SetKvCacheDType(DType::kBF16);
  constexpr int64_t kv_dim = 512, page = 16, stride = kv_dim + 4, T = 37, first_pos = 21;
  const std::vector<int32_t> pages = {5, 2, 7, 0, 3, 6, 1, 4};  // 128 cache rows
  const int64_t cache_elems = static_cast<int64_t>(pages.size()) * page * kv_dim;
  std::vector<float> k = Rand(T * stride, -3, 3, 700), v = Rand(T * stride, -3, 3, 701);
  // Exact ties between two bf16 values (1 + 2^-8: to even 1; 1 + 3 * 2^-8: to even 1 + 2^-6).
  k[0] = 1.00390625f, k[1] = 1.01171875f, v[2] = -1.00390625f;
  auto dev = [&](const void* h, size_t bytes) {
    DeviceBuffer b(*gpu, bytes);
    gpu->Upload(b.data(), h, bytes);
    return b;
  };
  const std::vector<uint16_t> fill(cache_elems, 0xabcd);
  DeviceBuffer dk = dev(k.data(), k.size() * 4), dv = dev(v.data(), v.size() * 4);
  DeviceBuffer dkc = dev(fill.data(), fill.size() * 2), dvc = dev(fill.data(), fill.size() * 2);
  auto cache_row = [&](int64_t pos) { return int64_t{pages[pos / page]} * page + pos % page; };
  // Rows 0..T-1 at positions first_pos.. (KvWrite), then rows 3, 9, 30 at positions 100..102 (KvWriteRows).
  gpu->KvWrite(dk.f32(), dv.f32(), stride, T, kv_dim, first_pos, pages.data(), page, dkc.data(), dvc.data());
  const std::vector<int64_t> src = {3, 9, 30}, dst = {cache_row(100), cache_row(101), cache_row(102)};
  gpu->KvWriteRows(dk.f32(), dv.f32(), stride, kv_dim, src.data(), dst.data(), 3, dkc.data(), dvc.data());
  std::vector<uint16_t> want_k = fill, want_v = fill;
  auto expect_row = [&](int64_t t, int64_t row) {
    for (int64_t d = 0; d < kv_dim; ++d) {
      want_k[row * kv_dim + d] = F32ToBf16(k[t * stride + d]);
      want_v[row * kv_dim + d] = F32ToBf16(v[t * stride + d]);
    }
  };
  for (int64_t t = 0; t < T; ++t) expect_row(t, cache_row(first_pos + t));
  for (size_t i = 0; i < src.size(); ++i) expect_row(src[i], dst[i]);
  ASSERT_EQ(want_k[cache_row(first_pos) * kv_dim], 0x3f80) << "the host's rounding of the tie";
  std::vector<uint16_t> got_k(cache_elems), got_v(cache_elems);
  gpu->Download(got_k.data(), dkc.data(), cache_elems * 2);
  gpu->Download(got_v.data(), dvc.data(), cache_elems * 2);
  int64_t wrong = 0;
  for (int64_t i = 0; i < cache_elems; ++i) wrong += (got_k[i] != want_k[i]) + (got_v[i] != want_v[i]);
  std::printf("bf16 KV cache writes: %ld of %ld elements differ from the host's rounding\n", static_cast<long>(wrong),
              static_cast<long>(2 * cache_elems));
  EXPECT_EQ(wrong, 0);
}

// KvWrite and KvWriteRows into an f32 cache: rows of 512 values are split (each 128-value chunk 128 bf16
// hi then 128 lo, both the host's round-to-nearest-even, ties included); rows of 64 values (not whole
// chunks) stay plain f32, bit for bit; rows nobody wrote keep their bytes.
TEST_F(CudaAttention, KvWriteSplitCache) {
  for (const int64_t kv_dim : {int64_t{512}, int64_t{64}}) {
    auto gpu = MakeCudaBackend();
    ASSERT_EQ(KvCacheSplit(kv_dim), kv_dim == 512);
    const int64_t page = 16, stride = kv_dim + 4, T = 37, first_pos = 21;
    const std::vector<int32_t> pages = {5, 2, 7, 0, 3, 6, 1, 4};  // 128 cache rows
    const int64_t cache_elems = static_cast<int64_t>(pages.size()) * page * kv_dim;
    std::vector<float> k = Rand(T * stride, -3, 3, 710), v = Rand(T * stride, -3, 3, 711);
    // hi rounds a tie to even (1 + 2^-8 -> 1, lo 2^-8); a lo that is itself a tie (x - hi = 1.5 * 2^-16 +
    // 2^-24 ... exact in f32: 1 + 2^-9 + 2^-17 has hi 1 and lo 2^-9 + 2^-17, a bf16 tie -> even).
    k[0] = 1.00390625f, k[1] = 1.0f + 0x1p-9f + 0x1p-17f, v[2] = -1.00390625f;
    auto dev = [&](const void* h, size_t bytes) {
      DeviceBuffer b(*gpu, bytes);
      gpu->Upload(b.data(), h, bytes);
      return b;
    };
    const std::vector<uint32_t> fill(cache_elems, 0xabcd1234u);
    DeviceBuffer dk = dev(k.data(), k.size() * 4), dv = dev(v.data(), v.size() * 4);
    DeviceBuffer dkc = dev(fill.data(), fill.size() * 4), dvc = dev(fill.data(), fill.size() * 4);
    auto cache_row = [&](int64_t pos) { return int64_t{pages[pos / page]} * page + pos % page; };
    gpu->KvWrite(dk.f32(), dv.f32(), stride, T, kv_dim, first_pos, pages.data(), page, dkc.data(), dvc.data());
    const std::vector<int64_t> src = {3, 9, 30}, dst = {cache_row(100), cache_row(101), cache_row(102)};
    gpu->KvWriteRows(dk.f32(), dv.f32(), stride, kv_dim, src.data(), dst.data(), 3, dkc.data(), dvc.data());
    // Expected cache words (as uint16 pairs: a split row is 2 kv_dim bf16, a plain one kv_dim floats).
    std::vector<uint32_t> want_k = fill, want_v = fill;
    auto expect_row = [&](int64_t t, int64_t row) {
      for (int64_t x = 0; x < kv_dim; ++x)
        for (int kv = 0; kv < 2; ++kv) {
          const float value = (kv == 0 ? k : v)[t * stride + x];
          auto* words = (kv == 0 ? want_k : want_v).data() + row * kv_dim;
          if (kv_dim == 512) {
            auto* half = reinterpret_cast<uint16_t*>(words);
            const auto [hi, lo] = KvSplitParts(value);
            half[cuda::KvSplitHiIndex(x)] = hi;
            half[cuda::KvSplitHiIndex(x) + cuda::kKvSplitChunk] = lo;
          } else {
            std::memcpy(words + x, &value, 4);
          }
        }
    };
    for (int64_t t = 0; t < T; ++t) expect_row(t, cache_row(first_pos + t));
    for (size_t i = 0; i < src.size(); ++i) expect_row(src[i], dst[i]);
    if (kv_dim == 512) {
      const auto tie = KvSplitParts(k[1]);
      ASSERT_EQ(KvSplitParts(k[0]).first, 0x3f80) << "the host's rounding of a hi tie";
      ASSERT_EQ(tie.first, 0x3f80);
      ASSERT_EQ(Bf16ToF32(tie.second), 0x1p-9f) << "the host's rounding of a lo tie (to even)";
    }
    std::vector<uint32_t> got_k(cache_elems), got_v(cache_elems);
    gpu->Download(got_k.data(), dkc.data(), cache_elems * 4);
    gpu->Download(got_v.data(), dvc.data(), cache_elems * 4);
    int64_t wrong = 0;
    for (int64_t i = 0; i < cache_elems; ++i) wrong += (got_k[i] != want_k[i]) + (got_v[i] != want_v[i]);
    std::printf("f32 KV cache writes, rows of %ld (%s): %ld of %ld words differ from the host's\n",
                static_cast<long>(kv_dim), kv_dim == 512 ? "split" : "plain", static_cast<long>(wrong),
                static_cast<long>(2 * cache_elems));
    EXPECT_EQ(wrong, 0);
  }
}

// The attention layer's q / k preparation with the committed rows' cache writes in one launch
// (QkNormRopeKvWrite) against the two ops on the same GPU (QkNormRope, then KvWriteRows): q, k and
// both caches bit-identical, for f32 and bf16 caches, Qwen3 (head_dim 128) and Qwen3.5 (256, rotary
// 64, 1+w norm) heads, rows committed in scrambled cache order and rows not committed. The two-op
// path is checked against the CPU by CudaConformance.QkNormRopeMatchesCpu and KvWriteBf16Cache.
TEST_F(CudaAttention, QkNormRopeKvWriteEqualsTwoOps) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    using Heads = std::tuple<int64_t, int64_t, int64_t, int64_t, bool>;  // q, kv heads, head_dim, rotary, 1+w
    for (auto [qh, kh, hd, rd, one_plus] : {Heads{32, 4, 128, 128, false}, Heads{16, 2, 256, 64, true}}) {
      auto gpu = MakeCudaBackend();
      gpu->SetKvCacheDType(dtype);
      const int64_t R = 6, qd = qh * hd, kv_dim = kh * hd, cache_rows = 16;
      const size_t elem = dtype == DType::kBF16 ? 2 : 4, cache_bytes = cache_rows * kv_dim * elem;
      const auto q = Rand(R * qd, -2, 2, 800 + hd), k = Rand(R * kv_dim, -2, 2, 801 + hd);
      const auto v = Rand(R * kv_dim, -2, 2, 802 + hd);
      const auto qn = Rand(hd, -0.5f, 1.5f, 803), kn = Rand(hd, -0.5f, 1.5f, 804);
      const std::vector<uint8_t> fill(cache_bytes, 0x5a);
      std::vector<int64_t> pos(R);
      for (int64_t i = 0; i < R; ++i) pos[i] = 40 + 3 * i;
      const std::vector<int64_t> src = {4, 0, 2, 5}, dst = {3, 11, 7, 0};  // rows 1 and 3 not committed
      auto dev = [&](const void* h, size_t bytes) {
        DeviceBuffer b(*gpu, bytes);
        gpu->Upload(b.data(), h, bytes);
        return b;
      };
      DeviceBuffer dqn = dev(qn.data(), hd * 4), dkn = dev(kn.data(), hd * 4), dv = dev(v.data(), v.size() * 4);
      struct Out {
        std::vector<float> q, k;
        std::vector<uint8_t> kc, vc;
      };
      // Copies: clang 14 cannot capture structured bindings.
      auto run = [&, qh = qh, kh = kh, hd = hd, rd = rd, one_plus = one_plus](bool fused) {
        DeviceBuffer dq = dev(q.data(), q.size() * 4), dk = dev(k.data(), k.size() * 4);
        DeviceBuffer dkc = dev(fill.data(), cache_bytes), dvc = dev(fill.data(), cache_bytes);
        if (fused) {
          Backend::KvRowWrites w;
          w.v = dv.f32(), w.src_rows = src.data(), w.cache_rows = dst.data(), w.n = 4;
          w.k_cache = dkc.data(), w.v_cache = dvc.data();
          gpu->QkNormRopeKvWrite(dq.f32(), qd, qh, dk.f32(), kv_dim, kh, R, hd, dqn.f32(), dkn.f32(), 1e-6f, one_plus,
                                 rd, pos.data(), 1e7, w);
        } else {
          gpu->QkNormRope(dq.f32(), qd, qh, dk.f32(), kv_dim, kh, R, hd, dqn.f32(), dkn.f32(), 1e-6f, one_plus, rd,
                          pos.data(), 1e7);
          gpu->KvWriteRows(dk.f32(), dv.f32(), kv_dim, kv_dim, src.data(), dst.data(), 4, dkc.data(), dvc.data());
        }
        Out o{std::vector<float>(q.size()), std::vector<float>(k.size()), std::vector<uint8_t>(cache_bytes),
              std::vector<uint8_t>(cache_bytes)};
        gpu->Download(o.q.data(), dq.data(), q.size() * 4);
        gpu->Download(o.k.data(), dk.data(), k.size() * 4);
        gpu->Download(o.kc.data(), dkc.data(), cache_bytes);
        gpu->Download(o.vc.data(), dvc.data(), cache_bytes);
        return o;
      };
      const Out fused = run(true), two = run(false);
      const std::string what = std::string(DTypeName(dtype)) + " cache, head_dim " + std::to_string(hd);
      EXPECT_EQ(fused.q, two.q) << what;
      EXPECT_EQ(fused.k, two.k) << what;
      EXPECT_TRUE(fused.kc == two.kc) << "k cache, " << what;
      EXPECT_TRUE(fused.vc == two.vc) << "v cache, " << what;
      EXPECT_NE(two.kc, std::vector<uint8_t>(fill)) << "the two-op path wrote rows, " << what;
      std::printf("QkNormRopeKvWrite %s: q, k and caches identical to QkNormRope + KvWriteRows: %s\n", what.c_str(),
                  fused.q == two.q && fused.k == two.k && fused.kc == two.kc && fused.vc == two.vc ? "yes" : "no");
    }
  }
}

// Timing of the calls of issue 5's rows (one layer's attention), the tensor-core kernels against the
// flash kernel alone and the per-head kernel, and the tensor-core kernels on a bf16 cache: only with
// TESSERA_CUDA_ATTENTION_BENCH=1 (no reference, prints microseconds per call).
TEST_F(CudaAttention, Timing) {
  if (const char* e = std::getenv("TESSERA_CUDA_ATTENTION_BENCH"); e == nullptr || std::string(e) != "1")
    GTEST_SKIP() << "skipped: set TESSERA_CUDA_ATTENTION_BENCH=1";
  std::vector<Seq> denoise, decode;
  for (int i = 0; i < 8; ++i) denoise.push_back({1024, 32, 32});
  for (int i = 0; i < 64; ++i) decode.push_back({1024, 1, 0});
  const std::vector<std::pair<std::string, std::vector<Seq>>> rows = {
      {"decode b1 ctx 1K", {{1024, 1, 0}}}, {"decode b64 ctx 1K", decode}, {"denoise 1x32 ctx 1K", {{1024, 32, 32}}},
      {"denoise 8x32 ctx 1K", denoise},     {"prefill 4096", {{0, 4096, 0}}},
      // DiffusionGemma 26B-A4B's canvas calls (context 1K): a sliding layer (window 1024) and a global one.
      {"canvas 256 ctx 1K W1K", {{1024, 256, 0, 1024, 0}}}, {"canvas 256 ctx 1K", {{1024, 256, 0, 0, 0}}}};
  // Group sizes 4 and 16 (other models' decode rows) at batch 64 only; DiffusionGemma's layers at their
  // canvas rows.
  std::vector<std::pair<Shape, size_t>> calls;
  for (const Shape& sh : kShapes)
    for (size_t r = 0; r < 5; ++r) calls.emplace_back(sh, r);
  for (const Shape& sh : kOtherGroups) calls.emplace_back(sh, 1);
  calls.emplace_back(Shape{16, 8, 256}, 5);
  calls.emplace_back(Shape{16, 2, 512}, 6);
  for (const auto& [sh, r] : calls) {
    const auto& [what, seqs] = rows[r];
    const Call call(sh, seqs, 600, /*reference=*/false);
    // Tensor cores (decode rows on the decode kernel; split f32 cache), the flash kernel alone, the
    // per-head kernel, the tensor cores on a bf16 cache.
    double us[4];
    for (int f = 0; f < 4; ++f) {
      std::unique_ptr<Backend> gpu;
      {
        ScopedEnv flash("TESSERA_CUDA_ATTENTION_FLASH", f != 2 ? "1" : "0");
        ScopedEnv decode("TESSERA_CUDA_ATTENTION_DECODE", f == 1 ? "0" : "1");
        gpu = MakeCudaBackend();
      }
      if (f == 3) gpu->SetKvCacheDType(DType::kBF16);
      us[f] = call.TimeOn(*gpu, 20);
    }
    std::printf(
        "attention timing heads=%ld/%ld hd=%ld %-22s tensor cores %9.1f us  flash only %9.1f us  per-head %9.1f us  "
        "bf16 cache %9.1f us\n",
        static_cast<long>(sh.heads), static_cast<long>(sh.kv_heads), static_cast<long>(sh.hd), what.c_str(), us[0],
        us[1], us[2], us[3]);
  }
}

}  // namespace
}  // namespace tessera

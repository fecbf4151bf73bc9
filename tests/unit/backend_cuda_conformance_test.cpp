// tessera tests: CUDA backend conformance: every op of backend.h on the CPU backend (the reference)
// and the CUDA backend on the same random non-zero inputs of real-model shapes (hidden 2048,
// head_dim 128 / 256, 128-512 experts, top-8 / top-10), reporting the relative error
// (max |gpu - cpu| / max |cpu|); bf16-level ops must agree within 1e-2. Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/sampling.h"
#include "core/dtype.h"
#include "test_util.h"
#include "unit/backend_cuda_conformance.h"
#include "unit/gdn_test_args.h"

namespace tessera::cuda_conformance {
namespace {

TEST_F(CudaConformance, EmbeddingNormsRope) {
  const int64_t V = 1000, H = 2048, n = 7;
  const auto table = Bf16s(Rand(V * H, -1, 1, 5));
  const std::vector<int32_t> ids = {0, 999, 17, 17, 500, 3, 42};
  std::vector<float> want(n * H);
  cpu_->Embedding(HostBf16(table, V, H), ids.data(), n, want.data());
  float* de = Dev(std::vector<float>(n * H));
  gpu_->Embedding(DevBf16(table, V, H), ids.data(), n, de);
  Report("Embedding bf16", RelErr(Host(de, n * H), want));

  const auto x = Rand(n * H * 2, -2, 2, 6), w = Rand(H, -0.5f, 1.5f, 7);
  for (bool one_plus : {false, true}) {
    std::vector<float> y(n * H);
    cpu_->RmsNorm(x.data(), n, H, 2 * H, w.data(), 1e-6f, one_plus, y.data(), H);
    float* dy = Dev(std::vector<float>(n * H));
    gpu_->RmsNorm(Dev(x), n, H, 2 * H, Dev(w), 1e-6f, one_plus, dy, H);
    Report(one_plus ? "RmsNorm (1+w)" : "RmsNorm w", RelErr(Host(dy, n * H), y));
  }
  const int64_t rows = 64, dv = 128;
  const auto gx = Rand(rows * dv, -2, 2, 8), gz = Rand(rows * dv, -3, 3, 9), gw = Rand(dv, 0.5f, 1.5f, 10);
  std::vector<float> gy(rows * dv);
  cpu_->GatedRmsNorm(gx.data(), gz.data(), rows, dv, gw.data(), 1e-6f, gy.data());
  float* dgy = Dev(std::vector<float>(rows * dv));
  gpu_->GatedRmsNorm(Dev(gx), Dev(gz), rows, dv, Dev(gw), 1e-6f, dgy);
  Report("GatedRmsNorm dv=128", RelErr(Host(dgy, gy.size()), gy));

  // Partial RoPE (Qwen3.5: head_dim 256, rotary 64) and full (Qwen3: head_dim 128).
  for (auto [heads, hd, rd] : {std::tuple<int64_t, int64_t, int64_t>{16, 256, 64}, {32, 128, 128}}) {
    const int64_t R = 9;
    auto q = Rand(R * heads * hd, -1, 1, 11 + hd);
    std::vector<int64_t> pos(R);
    for (int64_t i = 0; i < R; ++i) pos[i] = i * 911 + 3;
    float* dq = Dev(q);
    cpu_->Rope(q.data(), R, heads * hd, heads, hd, rd, pos.data(), 1e7);
    gpu_->Rope(dq, R, heads * hd, heads, hd, rd, pos.data(), 1e7);
    Report(("Rope hd=" + std::to_string(hd) + " rot=" + std::to_string(rd)).c_str(), RelErr(Host(dq, q.size()), q),
           1e-4);
  }
}

// The fused q / k head norm + RoPE against the CPU's four ops: Qwen3 (head_dim 128, full rotary),
// Qwen3.5 (256, rotary 64, 1+w norm), a batch of rows at scattered positions, and q / k rows with
// gaps (one [rows, q | k | pad] buffer).
TEST_F(CudaConformance, QkNormRopeMatchesCpu) {
  for (auto [qh, kh, hd, rd, one_plus] : {std::tuple<int64_t, int64_t, int64_t, int64_t, bool>{32, 4, 128, 128, false},
                                          {16, 2, 256, 64, true}}) {
    for (int64_t R : {1, 33}) {
      for (bool packed : {false, true}) {
        const int64_t qd = qh * hd, kd = kh * hd, qs = packed ? qd + kd + 4 : qd, ks = packed ? qs : kd;
        auto buf = Rand(R * (packed ? qs : qd + kd), -2, 2, 60 + hd + R);
        const auto qn = Rand(hd, -0.5f, 1.5f, 61), kn = Rand(hd, -0.5f, 1.5f, 62);
        std::vector<int64_t> pos(R);
        for (int64_t i = 0; i < R; ++i) pos[i] = i * 257 + 11;
        float* dbuf = Dev(buf);
        float* cq = buf.data();
        float* ck = packed ? buf.data() + qd : buf.data() + R * qd;
        cpu_->QkNormRope(cq, qs, qh, ck, ks, kh, R, hd, qn.data(), kn.data(), 1e-6f, one_plus, rd, pos.data(), 1e7);
        gpu_->QkNormRope(dbuf, qs, qh, dbuf + (ck - cq), ks, kh, R, hd, Dev(qn), Dev(kn), 1e-6f, one_plus, rd,
                         pos.data(), 1e7);
        Report(("QkNormRope hd=" + std::to_string(hd) + " R=" + std::to_string(R) + (packed ? " packed" : "")).c_str(),
               RelErr(Host(dbuf, buf.size()), buf), 1e-4);
      }
    }
  }
}

// The router temperature's op on the GPU is the CPU's division, exactly. Run in recorded steps of
// the same shape with other divisors each time: the divisors travel through the scratch ring, so
// a replayed CUDA graph must read the new ones, not those of the step it was captured from.
TEST_F(CudaConformance, DivideRowsExactAndFreshInReplayedSteps) {
  const int64_t R = 7, E = 128;
  const auto x = Rand(R * E, -6, 6, 30);
  float* dx = Dev(x);  // one buffer: the same pointers each round, so rounds 2+ replay a graph
  for (int round = 0; round < 4; ++round) {
    std::vector<float> d(R);
    for (int64_t r = 0; r < R; ++r) d[r] = r % 3 == 0 ? 1.f : 0.05f + 0.37f * static_cast<float>(r + round);
    std::vector<float> want = x;
    cpu_->DivideRows(want.data(), R, E, d.data());
    gpu_->Upload(dx, x.data(), x.size() * sizeof(float));
    gpu_->BeginStep();
    gpu_->DivideRows(dx, R, E, d.data());
    gpu_->EndStep();
    EXPECT_EQ(RelErr(Host(dx, x.size()), want), 0.0) << "round " << round;
  }
}

TEST_F(CudaConformance, ElementwiseOps) {
  const int64_t R = 13, D = 2048;
  auto x = Rand(R * D, -2, 2, 20);
  const auto g = Rand(R * D, -4, 4, 21), s = Rand(R, -3, 3, 22);
  float* dx = Dev(x);
  cpu_->SigmoidGate(x.data(), R, D, D, g.data(), D);
  gpu_->SigmoidGate(dx, R, D, D, Dev(g), D);
  cpu_->SigmoidScaleRows(x.data(), R, D, s.data());
  gpu_->SigmoidScaleRows(dx, R, D, Dev(s));
  cpu_->Add(g.data(), R * D, x.data());
  gpu_->Add(Dev(g), R * D, dx);
  Report("SigmoidGate+ScaleRows+Add", RelErr(Host(dx, x.size()), x), 1e-5);
  std::vector<float> out(R * D);
  cpu_->SiluMul(g.data(), x.data(), R * D, out.data());
  float* dout = Dev(out);
  gpu_->SiluMul(Dev(g), dx, R * D, dout);
  Report("SiluMul", RelErr(Host(dout, out.size()), out), 1e-5);
  std::vector<float> c(R * 100, 0.0f);
  float* dc = Dev(c);
  cpu_->Copy2D(x.data() + 7, R, 100, D, c.data(), 100);
  gpu_->Copy2D(dx + 7, R, 100, D, dc, 100);
  Report("Copy2D", RelErr(Host(dc, c.size()), c), 1e-6);
  // Softmax / argmax over a vocabulary row.
  const int64_t V = 151936;
  auto l = Rand(3 * V, -10, 10, 23);
  std::vector<int32_t> am(3);
  cpu_->Argmax(l.data(), 3, V, am.data());
  float* dl = Dev(l);
  int32_t* dam = Dev(std::vector<int32_t>(3));
  gpu_->Argmax(dl, 3, V, dam);
  EXPECT_EQ(Host(dam, 3), am);
  cpu_->Softmax(l.data(), 3, V);
  gpu_->Softmax(dl, 3, V);
  Report("Softmax vocab=151936", RelErr(Host(dl, l.size()), l), 1e-4);
  // DiffusionGemma's vocabulary (the long-row kernel), with masked (-inf) values: a leading run longer
  // than a thread's pieces, and scattered ones; and a short unaligned width (the other kernel).
  for (const auto& [rows, width] : {std::pair<int64_t, int64_t>{4, 262144}, {3, 1001}}) {
    auto m = Rand(rows * width, -30, 30, 24);
    for (int64_t i = 0; i < std::min<int64_t>(width / 2, 20000); ++i) m[width + i] = -INFINITY;
    for (int64_t i = 0; i < rows * width; i += 7) m[i] = -INFINITY;
    float* dm = Dev(m);
    cpu_->Softmax(m.data(), rows, width);
    gpu_->Softmax(dm, rows, width);
    const std::string what = "Softmax " + std::to_string(rows) + " x " + std::to_string(width) + " (masked values)";
    Report(what.c_str(), RelErr(Host(dm, m.size()), m), 1e-4);
  }
}

// Structured output's masks where the logits are: chosen rows of a logits block keep only the tokens
// whose bits are set, bit for bit as the CPU backend, on Qwen's vocabulary and a width that ends inside a
// mask word; rows not listed are untouched.
TEST_F(CudaConformance, MaskLogitsRowsMatchesCpu) {
  for (const int64_t V : {int64_t{151936}, int64_t{1001}}) {
    const int64_t W = (V + 31) / 32;
    auto l = Rand(6 * V, -5, 5, 40);
    std::vector<uint32_t> words(3 * W);
    std::mt19937 rng(41);
    for (uint32_t& w : words) w = rng() & rng();  // about a quarter of the bits
    words[W] = 0xffffffffu, words[2 * W + 1] = 0u;  // whole words kept and cleared
    const int64_t rows[] = {0, 3, 5};
    float* dl = Dev(l);
    cpu_->MaskLogitsRows(l.data(), V, rows, 3, words.data());
    gpu_->MaskLogitsRows(dl, V, rows, 3, words.data());
    const std::vector<float> got = Host(dl, l.size());
    int64_t diff = 0, masked = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      diff += std::memcmp(&got[i], &l[i], sizeof(float)) != 0;
      masked += std::isinf(l[i]);
    }
    EXPECT_EQ(diff, 0) << "vocab " << V;
    EXPECT_GT(masked, V) << "the masks took effect";
  }
}

TEST_F(CudaConformance, AddRmsNormMatchesAddThenRmsNorm) {
  // The fused residual add + norm (hidden 2048 of both models, a 4096 width, and an odd width that
  // takes the unfused fallback), both norm styles, 1 and 64 rows: h and y against the CPU's Add then
  // RmsNorm.
  for (const auto& [R, D] : {std::pair<int64_t, int64_t>{1, 2048}, {64, 2048}, {5, 4096}, {3, 8193}}) {
    for (bool one_plus : {false, true}) {
      auto h = Rand(R * D, -2, 2, 30 + R), delta = Rand(R * D, -1, 1, 31 + R);
      const auto w = Rand(D, -1, 1, 32);
      std::vector<float> y(R * D);
      float* dh = Dev(h);
      float* dy = Dev(y);
      cpu_->Add(delta.data(), R * D, h.data());
      cpu_->RmsNorm(h.data(), R, D, D, w.data(), 1e-6f, one_plus, y.data(), D);
      gpu_->AddRmsNorm(Dev(delta), dh, R, D, Dev(w), 1e-6f, one_plus, dy);
      const std::string what = "AddRmsNorm " + std::to_string(R) + "x" + std::to_string(D) + (one_plus ? " 1+w" : "");
      Report((what + " h").c_str(), RelErr(Host(dh, h.size()), h), 1e-6);
      Report((what + " y").c_str(), RelErr(Host(dy, y.size()), y), 1e-5);
    }
  }
}

TEST_F(CudaConformance, PagedAttention) {
  struct Case {
    int64_t heads, kv_heads, hd, first_pos, T, block;
  };
  for (const Case& c : {Case{32, 4, 128, 300, 1, 0}, Case{32, 4, 128, 20, 37, 0}, Case{16, 2, 256, 64, 32, 32},
                        Case{16, 2, 256, 1000, 1, 0}, Case{32, 4, 128, 0, 70, 0}}) {
    const int64_t page = 16, kv_dim = c.kv_heads * c.hd, total = c.first_pos + c.T;
    const int64_t npages = (total + page - 1) / page + 3;
    std::vector<int32_t> pages(npages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(c.first_pos));
    // The cached prefix, written through KvWrite on both backends.
    std::vector<float> kc(npages * page * kv_dim, 0.0f), vc = kc;
    const auto pk = Rand(std::max<int64_t>(c.first_pos, 1) * kv_dim, -1, 1, 30 + c.T);
    const auto pv = Rand(std::max<int64_t>(c.first_pos, 1) * kv_dim, -1, 1, 31 + c.T);
    float* dkc = Dev(kc);
    float* dvc = Dev(vc);
    if (c.first_pos > 0) {
      cpu_->KvWrite(pk.data(), pv.data(), kv_dim, c.first_pos, kv_dim, 0, pages.data(), page, kc.data(), vc.data());
      gpu_->KvWrite(Dev(pk), Dev(pv), kv_dim, c.first_pos, kv_dim, 0, pages.data(), page, dkc, dvc);
      // Exactly what the cache's layout keeps of each value (a split cache: hi + lo).
      Report("KvWrite", RelErr(HostKvCache(dkc, kc.size(), kv_dim), KvStoredValues(kc, kv_dim)), 1e-6);
    }
    const auto q = Rand(c.T * c.heads * c.hd, -1, 1, 32 + c.T), k = Rand(c.T * kv_dim, -1, 1, 33 + c.T),
               v = Rand(c.T * kv_dim, -1, 1, 34 + c.T);
    AttentionArgs a;
    a.q = q.data();
    a.q_stride = c.heads * c.hd;
    a.k = k.data();
    a.v = v.data();
    a.kv_stride = kv_dim;
    a.T = c.T;
    a.num_heads = c.heads;
    a.num_kv_heads = c.kv_heads;
    a.head_dim = c.hd;
    a.first_pos = c.first_pos;
    a.k_cache = kc.data();
    a.v_cache = vc.data();
    a.pages = pages.data();
    a.page_size = page;
    a.block_size = c.block;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    std::vector<float> want(c.T * c.heads * c.hd);
    a.out = want.data();
    a.out_stride = c.heads * c.hd;
    cpu_->Attention(a);
    AttentionArgs d = a;
    d.q = Dev(q);
    d.k = Dev(k);
    d.v = Dev(v);
    d.k_cache = dkc;
    d.v_cache = dvc;
    d.out = Dev(std::vector<float>(want.size()));
    gpu_->Attention(d);
    char name[96];
    std::snprintf(name, sizeof(name), "Attention hd=%ld T=%ld prefix=%ld block=%ld", static_cast<long>(c.hd),
                  static_cast<long>(c.T), static_cast<long>(c.first_pos), static_cast<long>(c.block));
    Report(name, RelErr(Host(d.out, want.size()), want), 1e-4);
  }
}

// Several sequences in one AttentionBatch call against the CPU backend's per-sequence Attention; the
// caches are filled through KvWriteRows. The decode-only batch has few (row, head) blocks and long
// prefixes, so the GPU splits the keys across blocks and merges; the mixed batch does not.
TEST_F(CudaConformance, PagedAttentionBatch) {
  struct Seq {
    int64_t first_pos, T, block;
  };
  const int64_t heads = 32, kv_heads = 4, hd = 128, page = 16, kv_dim = kv_heads * hd;
  // The third batch repeats the second with K/V rows one float off 16-byte alignment (the kernel
  // must not assume vector-aligned rows).
  const std::vector<Seq> mixed = {{40, 1, 0}, {0, 20, 0}, {64, 32, 32}, {300, 1, 0}, {17, 5, 0}};
  const std::vector<std::vector<Seq>> batches = {{{40, 1, 0}, {700, 1, 0}, {3000, 1, 0}}, mixed, mixed};
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const std::vector<Seq>& seqs = batches[bi];
    const bool misaligned = bi == 2;
    int64_t total_pages = 0, rows = 0;
    for (const Seq& q : seqs) total_pages += (q.first_pos + q.T + page - 1) / page + 1, rows += q.T;
    std::vector<int32_t> perm(total_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<unsigned>(rows)));
    std::vector<float> kc(total_pages * page * kv_dim, 0.0f), vc = kc;
    float* dkc = Dev(kc);
    float* dvc = Dev(vc);
    const auto q = Rand(rows * heads * hd, -1, 1, 70 + rows), k = Rand(rows * kv_dim, -1, 1, 71 + rows),
               v = Rand(rows * kv_dim, -1, 1, 72 + rows);
    float* dq = Dev(q);
    auto shifted = [&](const std::vector<float>& h) {
      std::vector<float> padded(h.size() + 1, 0.0f);
      std::copy(h.begin(), h.end(), padded.begin() + 1);
      return Dev(padded) + 1;
    };
    float* dk = misaligned ? shifted(k) : Dev(k);
    float* dv = misaligned ? shifted(v) : Dev(v);
    std::vector<float> want(rows * heads * hd);
    float* dout = Dev(std::vector<float>(want.size()));
    std::vector<std::vector<int32_t>> pages(seqs.size());
    std::vector<AttentionArgs> cpu_args, gpu_args;
    int64_t row0 = 0, next_page = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Seq& sq = seqs[i];
      const int64_t np = (sq.first_pos + sq.T + page - 1) / page + 1;
      pages[i].assign(perm.begin() + next_page, perm.begin() + next_page + np);
      next_page += np;
      // The cached prefix, written row by row through KvWriteRows on both backends.
      if (sq.first_pos > 0) {
        const auto pk = Rand(sq.first_pos * kv_dim, -1, 1, 80 + i), pv = Rand(sq.first_pos * kv_dim, -1, 1, 90 + i);
        std::vector<int64_t> src(sq.first_pos), dst(sq.first_pos);
        for (int64_t p = 0; p < sq.first_pos; ++p) src[p] = p, dst[p] = int64_t{pages[i][p / page]} * page + p % page;
        cpu_->KvWriteRows(pk.data(), pv.data(), kv_dim, kv_dim, src.data(), dst.data(), sq.first_pos, kc.data(),
                          vc.data());
        gpu_->KvWriteRows(Dev(pk), Dev(pv), kv_dim, kv_dim, src.data(), dst.data(), sq.first_pos, dkc, dvc);
      }
      AttentionArgs a;
      a.q = q.data() + row0 * heads * hd;
      a.q_stride = heads * hd;
      a.k = k.data() + row0 * kv_dim;
      a.v = v.data() + row0 * kv_dim;
      a.kv_stride = kv_dim;
      a.T = sq.T;
      a.num_heads = heads;
      a.num_kv_heads = kv_heads;
      a.head_dim = hd;
      a.first_pos = sq.first_pos;
      a.k_cache = kc.data();
      a.v_cache = vc.data();
      a.pages = pages[i].data();
      a.page_size = page;
      a.block_size = sq.block;
      a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      a.out = want.data() + row0 * heads * hd;
      a.out_stride = heads * hd;
      cpu_args.push_back(a);
      a.q = dq + row0 * heads * hd;
      a.k = dk + row0 * kv_dim;
      a.v = dv + row0 * kv_dim;
      a.k_cache = dkc;
      a.v_cache = dvc;
      a.out = dout + row0 * heads * hd;
      gpu_args.push_back(a);
      row0 += sq.T;
    }
    Report("KvWriteRows", RelErr(HostKvCache(dkc, kc.size(), kv_dim), KvStoredValues(kc, kv_dim)), 1e-6);
    for (const AttentionArgs& a : cpu_args) cpu_->Attention(a);
    gpu_->AttentionBatch(gpu_args);
    const std::string name = "AttentionBatch seqs=" + std::to_string(seqs.size()) + " rows=" + std::to_string(rows) +
                             (misaligned ? " unaligned" : "");
    Report(name.c_str(), RelErr(Host(dout, want.size()), want), 1e-4);
  }
}

TEST_F(CudaConformance, GatedDeltaNetPieces) {
  // Qwen3.5-35B-A3B: 16 key heads, 32 value heads, dk = dv = 128, conv kernel 4.
  const int64_t kh = 16, vh = 32, dk = 128, dv = 128, K = 4;
  const int64_t conv_dim = 2 * kh * dk + vh * dv;
  for (int64_t T : {1, 40}) {
    const auto x = Rand(T * conv_dim, -1, 1, 40 + T), w = Rand(conv_dim * K, -0.5f, 0.5f, 41);
    auto st = Rand(conv_dim * (K - 1), -1, 1, 42);
    std::vector<float> y(T * conv_dim);
    float* dst = Dev(st);
    float* dy = Dev(y);
    const float* dx = Dev(x);
    cpu_->CausalConv1dSilu(x.data(), T, conv_dim, conv_dim, w.data(), K, st.data(), y.data());
    gpu_->CausalConv1dSilu(dx, T, conv_dim, conv_dim, Dev(w), K, dst, dy);
    Report(("CausalConv1dSilu T=" + std::to_string(T)).c_str(), RelErr(Host(dy, y.size()), y), 1e-5);
    cpu_->CausalConv1dUpdateState(x.data(), T, conv_dim, conv_dim, K, st.data());
    gpu_->CausalConv1dUpdateState(dx, T, conv_dim, conv_dim, K, dst);
    Report("CausalConv1dUpdateState", RelErr(Host(dst, st.size()), st), 1e-6);

    // Gates: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b).
    auto ab = Rand(T * 2 * vh, -3, 3, 43);
    const auto a_log = Rand(vh, -1, 1, 44), dt = Rand(vh, -1, 1, 45);
    float* dab = Dev(ab);
    // Out of place into compact [T, vh] (the layer's use), then in place.
    std::vector<float> cg(T * vh), cb(T * vh);
    float* dg = Dev(cg);
    float* db = Dev(cb);
    cpu_->GdnGates(ab.data(), ab.data() + vh, T, vh, 2 * vh, 2 * vh, a_log.data(), dt.data(), cg.data(), cb.data(), vh);
    gpu_->GdnGates(dab, dab + vh, T, vh, 2 * vh, 2 * vh, Dev(a_log), Dev(dt), dg, db, vh);
    Report("GdnGates g", RelErr(Host(dg, cg.size()), cg), 1e-5);
    Report("GdnGates beta", RelErr(Host(db, cb.size()), cb), 1e-5);
    EXPECT_EQ(Host(dab, ab.size()), ab) << "out of place leaves a and b alone";
    cpu_->GdnGates(ab.data(), ab.data() + vh, T, vh, 2 * vh, 2 * vh, a_log.data(), dt.data(), ab.data(),
                   ab.data() + vh, 2 * vh);
    gpu_->GdnGates(dab, dab + vh, T, vh, 2 * vh, 2 * vh, Dev(a_log), Dev(dt), dab, dab + vh, 2 * vh);
    Report("GdnGates in place", RelErr(Host(dab, ab.size()), ab), 1e-5);

    std::vector<float> g(T * vh), beta(T * vh);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < vh; ++h) g[t * vh + h] = ab[t * 2 * vh + h], beta[t * vh + h] = ab[t * 2 * vh + vh + h];
    const auto qkv = Rand(T * conv_dim, -1, 1, 46);
    auto state = Rand(vh * dk * dv, -0.2f, 0.2f, 47);
    std::vector<float> out(T * vh * dv);
    GatedDeltaArgs ga;
    ga.q = qkv.data();
    ga.k = qkv.data() + kh * dk;
    ga.qk_stride = conv_dim;
    ga.v = qkv.data() + 2 * kh * dk;
    ga.v_stride = conv_dim;
    ga.g = g.data();
    ga.beta = beta.data();
    ga.T = T;
    ga.key_heads = kh;
    ga.value_heads = vh;
    ga.key_dim = dk;
    ga.value_dim = dv;
    ga.state = Dev(state);  // the device state before the CPU updates its copy
    GatedDeltaArgs gd = ga;
    const float* dqkv = Dev(qkv);
    gd.q = dqkv;
    gd.k = dqkv + kh * dk;
    gd.v = dqkv + 2 * kh * dk;
    gd.g = Dev(g);
    gd.beta = Dev(beta);
    gd.out = Dev(out);
    ga.state = state.data();
    ga.out = out.data();
    cpu_->GatedDeltaRule(ga, GdnMode::kAuto);
    gpu_->GatedDeltaRule(gd, GdnMode::kAuto);
    Report(("GatedDeltaRule out T=" + std::to_string(T)).c_str(), RelErr(Host(gd.out, out.size()), out), 1e-3);
    Report(("GatedDeltaRule state T=" + std::to_string(T)).c_str(), RelErr(Host(gd.state, state.size()), state),
           1e-3);
  }
}

// The batched Gated DeltaNet ops (several sequences of a batch, one launch each on the GPU) against
// the CPU backend's per-sequence ops: conv from each sequence's state, the delta rule of each run
// with its own state, the conv-state shift.
TEST_F(CudaConformance, GatedDeltaNetBatch) {
  const int64_t kh = 16, vh = 32, dk = 128, dv = 128, K = 4, conv_dim = 2 * kh * dk + vh * dv;
  const std::vector<int64_t> lengths = {1, 5, 1, 17};
  int64_t R = 0;
  for (int64_t T : lengths) R += T;
  const auto x = Rand(R * conv_dim, -1, 1, 140), w = Rand(conv_dim * K, -0.5f, 0.5f, 141);
  const auto g = Rand(R * vh, -2, -0.01f, 142), beta = Rand(R * vh, 0.05f, 0.95f, 143);
  const int64_t conv_state = conv_dim * (K - 1), rec = vh * dk * dv, n = static_cast<int64_t>(lengths.size());
  auto conv_states = Rand(n * conv_state, -1, 1, 144), rec_states = Rand(n * rec, -0.2f, 0.2f, 145);
  float* dconv = Dev(conv_states);
  float* drec = Dev(rec_states);
  const float* dx = Dev(x);
  float* dg = Dev(g);
  float* dbeta = Dev(beta);
  std::vector<float> y(R * conv_dim), out(R * vh * dv);
  float* dy = Dev(y);
  float* dout = Dev(out);
  std::vector<Backend::ConvSegment> cpu_segs, gpu_segs;
  int64_t row0 = 0;
  for (int64_t i = 0; i < n; ++i) {
    cpu_segs.push_back({row0, lengths[i], conv_states.data() + i * conv_state});
    gpu_segs.push_back({row0, lengths[i], dconv + i * conv_state});
    row0 += lengths[i];
  }
  cpu_->CausalConv1dSiluBatch(x.data(), conv_dim, conv_dim, w.data(), K, cpu_segs, y.data());
  gpu_->CausalConv1dSiluBatch(dx, conv_dim, conv_dim, Dev(w), K, gpu_segs, dy);
  Report("CausalConv1dSiluBatch", RelErr(Host(dy, y.size()), y), 1e-5);
  // The delta rule over the conv output (as the layer runs it), one run per sequence.
  std::vector<GatedDeltaArgs> cpu_runs, gpu_runs;
  const testing::GdnShape shape{kh, vh, dk, dv};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r0 = cpu_segs[i].row0;
    cpu_runs.push_back(testing::GdnRunArgs(shape, y.data() + r0 * conv_dim, conv_dim, lengths[i], g.data() + r0 * vh,
                                           beta.data() + r0 * vh, rec_states.data() + i * rec,
                                           out.data() + r0 * vh * dv));
    gpu_runs.push_back(testing::GdnRunArgs(shape, dy + r0 * conv_dim, conv_dim, lengths[i], dg + r0 * vh,
                                           dbeta + r0 * vh, drec + i * rec, dout + r0 * vh * dv));
  }
  cpu_->GatedDeltaRuleBatch(cpu_runs, GdnMode::kRecurrent);
  gpu_->GatedDeltaRuleBatch(gpu_runs, GdnMode::kAuto);
  Report("GatedDeltaRuleBatch out", RelErr(Host(dout, out.size()), out), 1e-3);
  Report("GatedDeltaRuleBatch states", RelErr(Host(drec, rec_states.size()), rec_states), 1e-3);
  cpu_->CausalConv1dUpdateStateBatch(x.data(), conv_dim, conv_dim, K, cpu_segs);
  gpu_->CausalConv1dUpdateStateBatch(dx, conv_dim, conv_dim, K, gpu_segs);
  Report("CausalConv1dUpdateStateBatch", RelErr(Host(dconv, conv_states.size()), conv_states), 1e-6);
}

// Expert statistics counted on the device (Backend::CountIds), ids out of range included: the same
// totals as the CPU backend, added to counts already there.
TEST_F(CudaConformance, CountIdsMatchesCpu) {
  const int64_t E = 128, n = 5000;
  std::mt19937 rng(77);
  std::vector<int32_t> idx(n);
  for (auto& id : idx) id = static_cast<int32_t>(rng() % (E + 4)) - 2;  // -2 .. E + 1
  std::vector<int32_t> want(E);
  for (int64_t e = 0; e < E; ++e) want[e] = static_cast<int32_t>(e % 3);
  std::vector<int32_t> start = want;
  cpu_->CountIds(idx.data(), n, E, want.data());
  int32_t* dcounts = Dev(start);
  gpu_->CountIds(Dev(idx), n, E, dcounts);
  EXPECT_EQ(Host(dcounts, E), want);
  int64_t counted = 0;
  for (int64_t e = 0; e < E; ++e) counted += want[e] - start[e];
  EXPECT_GT(counted, n * 9 / 10);  // the CPU reference counted the in-range ids
  Report("CountIds", counted == std::count_if(idx.begin(), idx.end(), [&](int32_t i) { return i >= 0 && i < E; }) ? 0 : 1);
}

TEST_F(CudaConformance, MoeRouteAndExperts) {
  // Routing: Qwen3-30B-A3B (128 experts, top-8, renormalised), Qwen3-Next (512, top-10).
  for (auto [E, k, renorm] : {std::tuple<int64_t, int64_t, bool>{128, 8, true}, {512, 10, true}, {256, 8, false}}) {
    const int64_t R = 33;
    const auto logits = Rand(R * E, -4, 4, 50 + E);
    std::vector<int32_t> idx(R * k);
    std::vector<float> wts(R * k);
    cpu_->MoeRoute(logits.data(), R, E, k, renorm, idx.data(), wts.data());
    int32_t* didx = Dev(idx);
    float* dw = Dev(wts);
    gpu_->MoeRoute(Dev(logits), R, E, k, renorm, didx, dw);
    EXPECT_EQ(Host(didx, idx.size()), idx) << "E=" << E;
    Report(("MoeRoute E=" + std::to_string(E) + " k=" + std::to_string(k)).c_str(), RelErr(Host(dw, wts.size()), wts),
           1e-5);
  }
  // Experts: 128 experts, top-8, hidden 2048 (intermediate kept small to bound host memory).
  const int64_t E = 128, k = 8, H = 2048, I = 128;
  const RandomExperts experts = MakeExperts(E, I, H, 1000);
  const std::vector<ExpertWeights>& host = experts.host;
  const std::vector<ExpertWeights>& dev = experts.dev;
  // Rows 1-2: the fused per-pair path (<= 16 pairs); 4-520: device-grouped on tensor cores, the
  // pipelined kernels (64 skewed so that one expert gets every row: 4 units of it); 2048 (16,384 pairs,
  // 1,152 units of 16): the tiled kernels of 64-row units, which prompt chunks take; then 40 and 64 rows again on the
  // CUDA-core grouped kernels and (520 rows, 4160 pairs) on the host-grouped cuBLASLt path, through
  // backends made with the environment switches that select them.
  struct Path {
    const char* name;
    const char* kernel;     // TESSERA_CUDA_MOE_KERNEL
    const char* max_slots;  // TESSERA_CUDA_MOE_GROUPED_MAX_SLOTS
    int64_t rows;
  };
  const Path paths[] = {{"", nullptr, nullptr, 1},      {"", nullptr, nullptr, 2},
                        {"", nullptr, nullptr, 4},      {"", nullptr, nullptr, 40},
                        {"", nullptr, nullptr, 64},     {"", nullptr, nullptr, 520},
                        {"", nullptr, nullptr, 2048},   {" simt", "simt", nullptr, 40},
                        {" simt", "simt", nullptr, 64}, {" host-grouped", nullptr, "4096", 520}};
  for (const Path& path : paths) {
    const int64_t R = path.rows;
    std::unique_ptr<Backend> other = CudaBackendForMoePath(path.kernel, path.max_slots);
    Backend& gpu = other ? *other : *gpu_;
    const auto x = Rand(R * H, -1, 1, 60 + R);
    auto logits = Rand(R * E, -4, 4, 61 + R);
    if (R == 64)
      for (int64_t r = 0; r < R; ++r) logits[r * E + 5] = 10.0f;
    std::vector<int32_t> idx(R * k);
    std::vector<float> wts(R * k), want(R * H);
    cpu_->MoeRoute(logits.data(), R, E, k, true, idx.data(), wts.data());
    cpu_->MoeExperts(x.data(), R, H, idx.data(), wts.data(), k, host, want.data());
    float* dout = Dev(want);
    float* dx = Dev(x);
    int32_t* didx = Dev(idx);
    float* dw = Dev(wts);
    gpu_->Synchronize();  // the inputs are on gpu_'s stream; `gpu` may be another backend
    gpu.MoeExperts(dx, R, H, didx, dw, k, dev, dout);
    gpu.Synchronize();
    Report(("MoeExperts E=128 k=8 rows=" + std::to_string(R) + path.name).c_str(), RelErr(Host(dout, want.size()), want),
           1e-3);
  }
}

// The fused few-token path at the models' expert widths (MoeRouteAndExperts uses inter 128, where
// a down row is half a lane-segment): Qwen3-30B-A3B (inter 768, top-8: three 256-wide segments a
// down row) and Qwen3-Next (inter 512, top-10), batch-1 and batch-2 decode. Fewer experts than the
// models keep host memory small.
TEST_F(CudaConformance, MoeFusedExpertsAtModelWidths) {
  for (auto [E, k, I] : {std::tuple<int64_t, int64_t, int64_t>{16, 8, 768}, {24, 10, 512}}) {
    const int64_t H = 2048;
    const RandomExperts experts = MakeExperts(E, I, H, 2000);
    for (int64_t R : {1, 2}) {
      const auto x = Rand(R * H, -1, 1, 70 + R);
      const auto logits = Rand(R * E, -4, 4, 71 + R + E);
      std::vector<int32_t> idx(R * k);
      std::vector<float> wts(R * k), want(R * H);
      cpu_->MoeRoute(logits.data(), R, E, k, true, idx.data(), wts.data());
      cpu_->MoeExperts(x.data(), R, H, idx.data(), wts.data(), k, experts.host, want.data());
      float* dout = Dev(std::vector<float>(R * H, 7.0f));
      gpu_->MoeExperts(Dev(x), R, H, Dev(idx), Dev(wts), k, experts.dev, dout);
      Report(("MoeExperts fused E=" + std::to_string(E) + " k=" + std::to_string(k) + " inter=" + std::to_string(I) +
              " rows=" + std::to_string(R))
                 .c_str(),
             RelErr(Host(dout, want.size()), want), 1e-3);
    }
  }
}

// Host metadata (here: token ids) reaches the GPU through a pinned scratch ring of two 4 MiB
// halves. 4 KiB uploads fill a half exactly, the edge case a first version got wrong; 2600 of them
// wrap the ring more than once, and every output must still hold its own ids' rows.
TEST_F(CudaConformance, ScratchRingWrapsWithoutCorruption) {
  const int64_t vocab = 4096, dim = 8, n = 1024, calls = 2600;
  std::vector<float> table(vocab * dim);
  for (int64_t i = 0; i < vocab * dim; ++i) table[i] = static_cast<float>(i);
  Tensor t{Dev(table), DType::kF32, {vocab, dim}, {}};
  float* out = Dev(std::vector<float>((calls + 63) / 64 * n * dim));  // one slot per 64 calls
  int64_t bad = 0;
  std::vector<int32_t> ids(n);
  for (int64_t c = 0; c < calls; ++c) {
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((c * 131 + i * 7) % vocab);
    float* dst = out + (c / 64) * n * dim;
    gpu_->Embedding(t, ids.data(), n, dst);
    if (c % 64 == 63) {
      const std::vector<float> got = Host(dst, n * dim);
      for (int64_t i = 0; i < n; ++i)
        if (got[i * dim + 3] != static_cast<float>(ids[i] * dim + 3)) ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "rows read from a scratch slot overwritten too early";
}

TEST_F(CudaConformance, DummyFillIsNonZeroAndBounded) {
  const int64_t n = 1 << 20;
  DeviceBuffer b(*gpu_, n * 2);
  gpu_->FillRandom(b.data(), DType::kBF16, n, 0.02f, 0.0f, 7);
  std::vector<uint16_t> h(n);
  gpu_->Download(h.data(), b.data(), n * 2);
  int64_t zeros = 0;
  double mx = 0, sum = 0;
  for (uint16_t v : h) {
    const float f = Bf16ToF32(v);
    zeros += f == 0.0f;
    mx = std::max(mx, static_cast<double>(std::fabs(f)));
    sum += f;
  }
  EXPECT_EQ(zeros, 0);
  EXPECT_LE(mx, 0.0201);
  EXPECT_GT(mx, 0.019);
  EXPECT_LT(std::fabs(sum / n), 1e-3);
}


// --- SampleRows: the device draw against SampleRowReference, row by row -------------------------

// Logits rows: 0 "peaked" (normal, sd 2, a few strongly preferred tokens, like a model's), 1 "flat"
// (uniform in [-1, 1]: top_p and the draw reach deep into the row), 2 "grid" (normal rounded to
// halves: many tokens share each probability, so ties are ordered by id), 3 every logit equal.
std::vector<float> SamplingRow(int kind, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  std::vector<float> v(V, 0.75f);
  if (kind != 3)
    for (auto& x : v) x = kind == 1 ? ud(rng) : nd(rng);
  if (kind == 0)
    for (int j = 0; j < 8; ++j) v[rng() % V] += 6.f + j;
  if (kind == 2)
    for (auto& x : v) x = std::round(x * 2.f) / 2.f;
  return v;
}

// A sampled row's position of token t in the reference's order (probability desc, id asc).
int64_t OrderPosition(const float* row, int64_t V, const RowSampling& p, int32_t t) {
  auto logit = [&](int64_t i) { return i == p.exclude ? -INFINITY : row[i]; };
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logit(i));
  const float inv_t = 1.0f / p.temperature;
  auto prob = [&](int64_t i) { return std::exp((logit(i) - mx) * inv_t); };
  const float pt = prob(t);
  int64_t pos = 0;
  for (int64_t i = 0; i < V; ++i) pos += prob(i) > pt || (prob(i) == pt && i < t);
  return pos;
}

struct SampleStats {
  int64_t rows = 0, mismatches = 0, unexplained = 0;
  double max_prob_err = 0;
};

// Device tokens and probabilities against the reference on every row. A sampled row's token may
// differ only where the draw sits on a boundary of the cumulative distribution within rounding
// (expf's last bit on the device and the host, summation order): then the device's token must lie,
// in the order, between the reference's for uniform -+ 1e-6. Each mismatch is printed.
SampleStats CompareSampling(const std::vector<float>& logits, int64_t V, const std::vector<RowSampling>& rules,
                            const std::vector<int32_t>& tokens, const std::vector<float>& probs) {
  SampleStats st;
  SamplingCandidates scratch;
  for (size_t r = 0; r < rules.size(); ++r) {
    const float* row = logits.data() + r * V;
    const RowSampling& p = rules[r];
    float want_prob = 0;
    const int32_t want = SampleRowReference(row, V, p, &want_prob, &scratch);
    ++st.rows;
    if (tokens[r] == want) {
      const double err = std::fabs(static_cast<double>(probs[r]) - want_prob) / std::max(1e-30, std::fabs(1.0 * want_prob));
      st.max_prob_err = std::max(st.max_prob_err, std::isfinite(err) ? err : 1e30);
      continue;
    }
    ++st.mismatches;
    bool explained = false;
    if (p.temperature > 0.f && tokens[r] >= 0 && tokens[r] < V) {
      RowSampling lo = p, hi = p;
      lo.uniform = std::max(0.0, p.uniform - 1e-6), hi.uniform = p.uniform + 1e-6;  // >= 1: the last token
      float unused;
      const int64_t a = OrderPosition(row, V, p, SampleRowReference(row, V, lo, &unused, &scratch));
      const int64_t b = OrderPosition(row, V, p, SampleRowReference(row, V, hi, &unused, &scratch));
      const int64_t g = OrderPosition(row, V, p, tokens[r]);
      explained = a <= g && g <= b;
    }
    st.unexplained += !explained;
    std::printf("SampleRows mismatch V=%lld row %zu: t=%g top_k=%d top_p=%g min_p=%g exclude=%d u=%.9f: device %d (p=%.9g), "
                "reference %d (p=%.9g)%s\n",
                static_cast<long long>(V), r, p.temperature, p.top_k, p.top_p, p.min_p, p.exclude, p.uniform, tokens[r],
                probs[r], want, want_prob, explained ? " (within rounding of the draw)" : " UNEXPLAINED");
  }
  return st;
}

// Greedy rows (exclude none, id 0, the argmax) and sampled rows over a grid of temperature x top_k x
// top_p x min_p, on each kind of row, with random draws and the edges 0, 0.999999 and 1.5 (past
// every running sum: the reference's last token of the final distribution), all in one batch
// (greedy and sampled interleaved). top_k 5000 is above the kernel's in-shared-memory K; the
// flat rows take top_p, min_p and the draw past the kernel's 2,048 candidates.
TEST_F(CudaConformance, SampleRowsMatchReference) {
  for (const int64_t V : {151936, 1001}) {
    std::mt19937_64 rng(300 + V);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    std::vector<float> logits;
    std::vector<RowSampling> rules;
    auto add = [&](int kind, RowSampling p) {
      const auto row = SamplingRow(kind, V, rng());
      if (p.exclude == -2) p.exclude = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      logits.insert(logits.end(), row.begin(), row.end());
      rules.push_back(p);
    };
    for (int kind = 0; kind < 4; ++kind)
      for (const int32_t ex : {-1, 0, -2}) add(kind, RowSampling{0.f, 0, 1.f, 0.f, ex, 0.0});
    int combo = 0;
    for (const float t : {0.3f, 0.7f, 1.0f, 1.5f})
      for (const int32_t k : {0, 1, 20, 1000, 5000})
        for (const float tp : {1.0f, 0.9f, 0.5f})
          for (const float mp : {0.0f, 0.05f})
            for (int rep = 0; rep < 3; ++rep, ++combo) {
              const double draws[] = {uni(rng), 0.0, 0.999999, 1.5, uni(rng)};
              const int32_t excludes[] = {-1, 0, static_cast<int32_t>(rng() % V), -2};
              add((combo + rep) % 4, RowSampling{t, k, tp, mp, excludes[combo % 4], draws[(combo / 4 + rep) % 5]});
            }
    const int64_t R = static_cast<int64_t>(rules.size());
    int32_t* dtok = Dev(std::vector<int32_t>(R, -7));
    float* dprob = Dev(std::vector<float>(R));
    gpu_->SampleRows(Dev(logits), R, V, rules.data(), dtok, dprob);
    const SampleStats st = CompareSampling(logits, V, rules, Host(dtok, R), Host(dprob, R));
    std::printf("conformance SampleRows V=%-6lld %lld rows, %lld token mismatches (%lld unexplained), max prob rel err %.3e\n",
                static_cast<long long>(V), static_cast<long long>(st.rows), static_cast<long long>(st.mismatches),
                static_cast<long long>(st.unexplained), st.max_prob_err);
    EXPECT_EQ(st.unexplained, 0) << "V=" << V;
    EXPECT_LE(st.mismatches * 100, st.rows) << "V=" << V;
    EXPECT_LE(st.max_prob_err, 1e-5) << "V=" << V;
  }
}

// A batch mixing greedy and sampled rows gives, row for row, what one-row calls give (and the
// reference's tokens).
TEST_F(CudaConformance, SampleRowsMixedBatchEqualsSingleRows) {
  const int64_t V = 151936, R = 12;
  std::vector<float> logits;
  std::vector<RowSampling> rules;
  for (int64_t r = 0; r < R; ++r) {
    const auto row = SamplingRow(static_cast<int>(r % 4), V, 900 + r);
    logits.insert(logits.end(), row.begin(), row.end());
    const float t = r % 3 == 0 ? 0.f : 0.5f + 0.25f * static_cast<float>(r % 4);
    rules.push_back(RowSampling{t, r % 2 ? 20 : 0, r % 5 ? 0.9f : 1.f, r % 4 == 1 ? 0.05f : 0.f,
                                static_cast<int32_t>(r % 3) - 1, 0.1 + 0.07 * static_cast<double>(r)});
  }
  const float* dl = Dev(logits);
  int32_t* dtok = Dev(std::vector<int32_t>(R));
  float* dprob = Dev(std::vector<float>(R));
  gpu_->SampleRows(dl, R, V, rules.data(), dtok, dprob);
  const auto tokens = Host(dtok, R);
  const auto probs = Host(dprob, R);
  for (int64_t r = 0; r < R; ++r) {
    gpu_->SampleRows(dl + r * V, 1, V, &rules[r], dtok, dprob);
    EXPECT_EQ(Host(dtok, 1)[0], tokens[r]) << "row " << r;
    EXPECT_EQ(Host(dprob, 1)[0], probs[r]) << "row " << r;
  }
  const SampleStats st = CompareSampling(logits, V, rules, tokens, probs);
  EXPECT_EQ(st.mismatches, 0);
  Report("SampleRows mixed batch (prob)", st.max_prob_err, 1e-5);
}

}  // namespace
}  // namespace tessera::cuda_conformance

// tessera tests: a micro-benchmark of a full-size config on the CUDA backend with dummy weights
// (--load-format dummy): batch-1 decode tokens/s at a given context and prefill tokens/s of one
// prompt. Not a timed test: it runs only when TESSERA_CUDA_BENCH_CONFIG names a directory holding a
// config.json (scripts/gpu_check.sh sets it), prints its numbers and checks only that the logits
// are finite. Sizes: TESSERA_CUDA_BENCH_CONTEXT (1024), _DECODE (64), _PREFILL (4096).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/model.h"

namespace tessera {
namespace {

int64_t EnvInt(const char* name, int64_t def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : def;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

bool AllFinite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

TEST(CudaBench, DummyDecodeAndPrefill) {
  const char* dir = std::getenv("TESSERA_CUDA_BENCH_CONFIG");
  if (!dir || !*dir) GTEST_SKIP() << "skipped: TESSERA_CUDA_BENCH_CONFIG is not set";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  const int64_t ctx = EnvInt("TESSERA_CUDA_BENCH_CONTEXT", 1024), steps = EnvInt("TESSERA_CUDA_BENCH_DECODE", 64);
  const int64_t prompt = EnvInt("TESSERA_CUDA_BENCH_PREFILL", 4096);

  LoadOptions o;
  o.device = "cuda";
  o.load_format = "dummy";
  auto t0 = std::chrono::steady_clock::now();
  auto model = Model::Load(dir, o);
  std::printf("bench %s: dummy weights ready in %.1f s\n", dir, Seconds(t0));
  const ModelConfig& c = model->config();
  const int64_t page = 16, max_len = std::max(ctx + steps, prompt) + page;
  const int64_t pages_per_seq = max_len / page + 1;
  model->AllocateCaches(2 * pages_per_seq, page, 2);
  const bool hybrid = c.NumLayersOf(LayerKind::kLinearAttention) > 0;
  auto cache_for = [&](int32_t i) {
    SequenceCache s;
    for (int64_t p = 0; p < pages_per_seq; ++p) s.pages.push_back(static_cast<int32_t>(i * pages_per_seq + p));
    s.state_slot = hybrid ? i : -1;
    if (hybrid) model->ResetStateSlot(i);
    return s;
  };
  auto tokens = [&](int64_t n, int64_t salt) {
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + salt * 104729) % c.vocab_size);
    return t;
  };
  auto run = [&](SequenceCache* cache, int64_t first, std::vector<int32_t> toks) {
    Batch b;
    Segment s;
    s.cache = cache;
    s.first_pos = first;
    s.tokens = std::move(toks);
    s.commit_len = static_cast<int64_t>(s.tokens.size());
    s.logits_rows = {static_cast<int32_t>(s.tokens.size()) - 1};
    b.segments.push_back(std::move(s));
    return model->Forward(b);
  };

  // Decode at `ctx` tokens of context (the context is prefilled in chunks of 512).
  SequenceCache a = cache_for(0);
  for (int64_t p = 0; p < ctx; p += 512) run(&a, p, tokens(std::min<int64_t>(512, ctx - p), p));
  run(&a, ctx, {1});  // warm-up step
  model->backend().Synchronize();
  t0 = std::chrono::steady_clock::now();
  ForwardResult r;
  for (int64_t i = 1; i <= steps; ++i) r = run(&a, ctx + i, {static_cast<int32_t>(i % c.vocab_size)});
  const double dec = Seconds(t0);
  EXPECT_TRUE(AllFinite(r.logits));
  std::printf("bench %s: decode batch 1 at context %ld: %.2f ms/token, %.1f tokens/s\n", dir,
              static_cast<long>(ctx), 1e3 * dec / steps, steps / dec);

  // Prefill of one prompt.
  SequenceCache b = cache_for(1);
  run(&b, 0, tokens(128, 3));  // warm-up (plans, allocator)
  if (hybrid) model->ResetStateSlot(1);
  model->backend().Synchronize();
  t0 = std::chrono::steady_clock::now();
  r = run(&b, 0, tokens(prompt, 5));
  const double pre = Seconds(t0);
  EXPECT_TRUE(AllFinite(r.logits));
  std::printf("bench %s: prefill of %ld tokens: %.3f s, %.0f tokens/s\n", dir, static_cast<long>(prompt), pre,
              prompt / pre);
}

}  // namespace
}  // namespace tessera

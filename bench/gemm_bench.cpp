// tessera bench: CPU GEMM kernels (backend/cpu/gemm.h) on LLM-shaped products. For every kernel
// this processor can run, 1 and 2 threads, decode (m = 1, 4) and prefill (m = 32, 128) batches,
// prints time, GB/s of bf16 weight bytes streamed and GFLOP/s, next to the machine's memcpy
// bandwidth (1 GiB buffer) so decode numbers read as a fraction of what memory can deliver; "cpu us"
// is the 1-thread call's CPU time (the wall time minus what other processes took on a shared machine).
// Weights rotate through >= 512 MiB of copies so a repeated call never finds them in cache.
// --quant int4|int8|fp8 times GemmF32xQuant instead (random codes, one f32 scale per 128 columns for
// int4 and per row for int8 / fp8, as --quantization makes them); GB/s then counts codes + scales.
//
// Usage: gemm_bench [--quick] [--kernel NAME] [--m M] [--quant KIND]
//   --quick: m = 1 and 32 only, fewer repetitions; --kernel: one kernel; --m: one batch size.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/gemm.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of the calling thread: with one thread it is the call's time without the stretches the
// scheduler gave the core to other processes, so rows stay comparable on a shared machine.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Bytes copied per second by one memcpy of a 1 GiB buffer (best of 3).
double MemcpyGBps() {
  const size_t bytes = size_t{1} << 30;
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // both touched: no page faults timed
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, Seconds(t0, Clock::now()));
    src[r] = dst[bytes - 1 - r];  // keep the copies observable
  }
  return bytes / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  bool quick = false;
  std::string_view only_kernel;
  std::vector<int64_t> ms = {1, 4, 32, 128};
  QuantKind quant = QuantKind::kNone;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
      ms = {1, 32};
    } else if (arg == "--kernel" && i + 1 < argc) {
      only_kernel = argv[++i];
    } else if (arg == "--m" && i + 1 < argc) {
      ms = {std::atoll(argv[++i])};
    } else if (arg == "--quant" && i + 1 < argc) {
      const std::string_view q = argv[++i];
      quant = q == "int4" ? QuantKind::kInt4 : q == "int8" ? QuantKind::kInt8 : q == "fp8" ? QuantKind::kFp8
                                                                                        : QuantKind::kNone;
      if (quant == QuantKind::kNone) {
        fmt::print(stderr, "gemm_bench: --quant takes int4, int8 or fp8\n");
        return 2;
      }
    } else {
      fmt::print(stderr, "usage: gemm_bench [--quick] [--kernel NAME] [--m M] [--quant int4|int8|fp8]\n");
      return 2;
    }
  }
  const double copy_gbps = MemcpyGBps();
  fmt::print("memcpy 1 GiB (1 thread): {:.1f} GB/s copied (= {:.1f} GB/s read + written)\n",
             copy_gbps, 2 * copy_gbps);
  ForceGemmKernel("");
  fmt::print("automatic kernel: {}\n\n", GemmKernelName());

  const std::pair<int64_t, int64_t> nks[] = {{2048, 2048}, {768, 2048}, {2048, 768}, {32000, 1024},
                                             {1536, 1024}};
  const char* kernels[] = {"generic", "avx2", "avx512", "avx512bf16"};

  // One pool of random bf16 weights (never zero), sliced per call.
  const size_t pool_elems = size_t{1} << 28;  // 512 MiB
  std::vector<uint16_t> weights(pool_elems);
  std::mt19937 rng(1);
  for (auto& v : weights) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x3ff)) | (rng() & 0x8000);
  std::vector<float> x(128 * 2048), y(128 * 32000);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  // Quantized: the same random bytes as codes (every byte is an int8 / int4 code; e4m3's NaN bytes
  // 0x7f / 0xff become 0x7e / 0xfe so fp8 multiplies finite values), f32 scales per group.
  const int64_t group_of_int4 = 128;
  std::vector<float> scales;
  if (quant != QuantKind::kNone) {
    auto* bytes = reinterpret_cast<uint8_t*>(weights.data());
    for (size_t i = 0; i < pool_elems * 2; ++i)
      if ((bytes[i] & 0x7f) == 0x7f) bytes[i] &= 0xfe;  // e4m3 NaN -> 448's neighbour
    scales.resize(size_t{1} << 24);
    for (auto& v : scales) v = std::uniform_real_distribution<float>(1e-3f, 2e-3f)(rng);
  }

  ThreadPool two(2);
  fmt::print("{:<11} {:>3} {:>4} {:>6} {:>5} {:>10} {:>8} {:>7} {:>8} {:>10}\n", "kernel", "thr", "m", "n",
             "k", "us/call", "w GB/s", "%copy", "GFLOP/s", "cpu us");
  for (const char* kernel : kernels) {
    if (!only_kernel.empty() && only_kernel != kernel) continue;
    if (!ForceGemmKernel(kernel)) {
      fmt::print("{:<11} not supported by this processor\n", kernel);
      continue;
    }
    for (int threads : {1, 2}) {
      for (int64_t m : ms) {
        // The portable kernel needs seconds per prefill call; its decode rows make the point.
        if (std::string_view(kernel) == "generic" && m > 4) continue;
        for (auto [n, k] : nks) {
          const size_t w_elems = static_cast<size_t>(n * k);
          WeightQuant q;
          q.kind = quant;
          q.group = quant == QuantKind::kInt4 ? group_of_int4 : k;
          const size_t code_bytes = quant == QuantKind::kNone ? w_elems * 2 : static_cast<size_t>(n * QuantRowBytes(quant, k));
          const size_t scale_count = quant == QuantKind::kNone ? 0 : static_cast<size_t>(n * q.Groups(k));
          const size_t copies = std::max<size_t>(1, pool_elems * 2 / code_bytes);
          const size_t scale_copies = scale_count ? std::max<size_t>(1, scales.size() / scale_count) : 1;
          ThreadPool* pool = threads == 2 ? &two : nullptr;
          size_t slot = 0;
          auto call = [&] {
            const size_t s = slot++;
            if (quant == QuantKind::kNone) {
              GemmF32xBf16(x.data(), m, k, weights.data() + (s % copies) * w_elems, n, y.data(), pool);
              return;
            }
            q.scales = scales.data() + (s % scale_copies) * scale_count;
            GemmF32xQuant(x.data(), m, k, reinterpret_cast<const uint8_t*>(weights.data()) + (s % copies) * code_bytes,
                          q, n, y.data(), pool);
          };
          call();  // warm-up (page-in of x/y, pool wake-up)
          const double budget = quick ? 0.1 : 0.3;
          int reps = 0;
          const double cpu0 = ThreadCpuSeconds();
          auto t0 = Clock::now();
          double elapsed = 0;
          do {
            call();
            ++reps;
            elapsed = Seconds(t0, Clock::now());
          } while (elapsed < budget && reps < 2000);
          const double t = elapsed / reps;
          const double cpu = (ThreadCpuSeconds() - cpu0) / reps;  // 1 thread: the call's own time
          const double gbps = (code_bytes + scale_count * 4.0) / t / 1e9;
          const double gflops = 2.0 * m * n * k / t / 1e9;
          fmt::print("{:<11} {:>3} {:>4} {:>6} {:>5} {:>10.1f} {:>8.1f} {:>6.0f}% {:>8.1f} {:>10}\n", kernel,
                     threads, m, n, k, t * 1e6, gbps, 100 * gbps / copy_gbps, gflops,
                     threads == 1 ? fmt::format("{:.1f}", cpu * 1e6) : std::string("-"));
          std::fflush(stdout);
        }
      }
    }
  }
  ForceGemmKernel("");
  return 0;
}

// tessera tests: the CPU GEMM kernels (backend/cpu/gemm.h). Every kernel this processor can run is
// checked against a double-precision naive product on random data (no zeros) over shapes with
// tails in m, n and k, in accumulate mode, with and without a 2-thread pool, with unaligned
// operands that end right before a PROT_NONE page (so any read past x or w faults).
//
// Error bounds: f32 accumulation of k products satisfies |y - exact| <= (k+1) u sum|x w|
// (u = 2^-24, the standard bound for recursive summation; blocked/vector sums are tighter), and
// we allow 2(k+1) u (sum|x w| + |y0|). The "avx512bf16" kernel rounds activations to bf16 first:
// it is held to the same bound against a reference built from bf16-rounded activations, and to
// 2^-8 sum|x w| against the exact f32-activation product.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tessera {
namespace {

constexpr double kU = 1.0 / (1 << 24);

// Round-to-nearest-even to bf16 (8 significant bits), computed independently of core/dtype.h.
float RoundToBf16(float v) {
  int e = 0;
  const double mant = std::frexp(static_cast<double>(v), &e);  // v = mant * 2^e, 0.5 <= |mant| < 1
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(mant, 8)), e - 8));
}

uint16_t Bf16Bits(float v) {  // v already representable in bf16
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// `count` elements of T ending exactly at a PROT_NONE guard page; the start is then unaligned
// whenever count * sizeof(T) is not a multiple of 64.
template <typename T>
class Guarded {
 public:
  explicit Guarded(size_t count) : count_(count) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = (count * sizeof(T) + page - 1) / page * page;
    size_ = bytes + page;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<char*>(p);
    if (mprotect(base_ + bytes, page, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
    data_ = reinterpret_cast<T*>(base_ + bytes - count * sizeof(T));
  }
  ~Guarded() { munmap(base_, size_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }

 private:
  size_t count_, size_;
  char* base_;
  T* data_;
};

float NonZero(std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.05f, 1.0f);
  return rng() & 1 ? mag(rng) : -mag(rng);
}

// Expected outputs and their error scale, in double.
struct Reference {
  std::vector<double> y, abs_dot;
};
Reference Naive(const std::vector<float>& x, const std::vector<float>& w, int64_t m, int64_t n,
                int64_t k) {
  Reference r;
  r.y.assign(m * n, 0.0);
  r.abs_dot.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, a = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = static_cast<double>(x[i * k + p]) * w[j * k + p];
        s += t;
        a += std::fabs(t);
      }
      r.y[i * n + j] = s;
      r.abs_dot[i * n + j] = a;
    }
  return r;
}

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> Shapes() {
  const int64_t ms[] = {1, 2, 3, 5, 8, 17, 64};
  const std::pair<int64_t, int64_t> nks[] = {{1, 1},    {3, 7},    {17, 16},  {5, 31},   {49, 33},
                                             {8, 64},   {24, 100}, {130, 257}, {33, 1000}, {7, 2051}};
  std::vector<Shape> out;
  for (int64_t m : ms)
    for (auto [n, k] : nks) out.push_back({m, n, k});
  return out;
}

class GemmKernelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!ForceGemmKernel(GetParam()))
      GTEST_SKIP() << "this processor cannot run kernel " << GetParam();
    ASSERT_STREQ(GemmKernelName(), GetParam());
  }
  void TearDown() override { ForceGemmKernel(""); }
  bool bf16_activations() const { return std::string(GetParam()) == "avx512bf16"; }

  // Runs one shape in all four modes (accumulate x pool) and checks every output.
  template <typename WT>
  void Check(const Shape& s, std::mt19937& rng, ThreadPool& pool) {
    const int64_t m = s.m, n = s.n, k = s.k;
    std::vector<float> xv(m * k), wv(n * k), y0(m * n);
    for (auto& v : xv) v = NonZero(rng);
    for (auto& v : wv) v = sizeof(WT) == 2 ? RoundToBf16(NonZero(rng)) : NonZero(rng);
    for (auto& v : y0) v = NonZero(rng);
    Guarded<float> x(m * k);
    Guarded<WT> w(n * k);
    std::memcpy(x.data(), xv.data(), xv.size() * sizeof(float));
    for (int64_t i = 0; i < n * k; ++i) {
      if constexpr (sizeof(WT) == 2) w[i] = Bf16Bits(wv[i]);
      else w[i] = wv[i];
    }
    // A kernel rounding activations to bf16 is compared with a reference that rounds them too.
    const bool rounded = bf16_activations() && sizeof(WT) == 2;
    std::vector<float> xr = xv;
    if (rounded)
      for (auto& v : xr) v = RoundToBf16(v);
    const Reference ref = Naive(xr, wv, m, n, k);
    const Reference exact = rounded ? Naive(xv, wv, m, n, k) : Reference{};

    std::vector<float> first;
    for (int mode = 0; mode < 4; ++mode) {
      const bool accumulate = mode & 1;
      ThreadPool* p = mode & 2 ? &pool : nullptr;
      // y + 1 float: unaligned; 3 sentinels after it must survive.
      std::vector<float> ybuf(m * n + 4, 12345.f);
      float* y = ybuf.data() + 1;
      ybuf[0] = -777.f;
      std::memcpy(y, y0.data(), y0.size() * sizeof(float));
      if constexpr (sizeof(WT) == 2) GemmF32xBf16(x.data(), m, k, w.data(), n, y, p, accumulate);
      else GemmF32xF32(x.data(), m, k, w.data(), n, y, p, accumulate);
      ASSERT_EQ(ybuf[0], -777.f);
      for (int e = 0; e < 3; ++e) ASSERT_EQ(y[m * n + e], 12345.f) << "wrote past y";
      int bad = 0;
      for (int64_t i = 0; i < m * n && bad < 5; ++i) {
        const double prior = accumulate ? y0[i] : 0.0;
        const double want = ref.y[i] + prior;
        const double tol = 2.0 * (k + 1) * kU * (ref.abs_dot[i] + std::fabs(prior)) + 1e-30;
        if (std::fabs(y[i] - want) > tol) {
          ++bad;
          ADD_FAILURE() << GetParam() << " m=" << m << " n=" << n << " k=" << k << " acc=" << accumulate
                        << " pool=" << (p != nullptr) << " at (" << i / n << "," << i % n << "): got "
                        << y[i] << " want " << want << " tol " << tol;
        }
        if (rounded) {
          const double loose = std::ldexp(exact.abs_dot[i], -8) + tol;
          EXPECT_LE(std::fabs(y[i] - (exact.y[i] + prior)), loose) << "bf16 activations too far";
        }
      }
      // Threads must not change a single bit of the result.
      if (!accumulate) {
        if (first.empty()) first.assign(y, y + m * n);
        else
          ASSERT_EQ(0, std::memcmp(first.data(), y, first.size() * sizeof(float)))
              << "pool changed the result m=" << m << " n=" << n << " k=" << k;
      }
    }
  }
};

TEST_P(GemmKernelTest, Bf16WeightsMatchDoubleReference) {
  std::mt19937 rng(1234);
  ThreadPool pool(2);
  for (const Shape& s : Shapes()) {
    Check<uint16_t>(s, rng, pool);
    if (HasFatalFailure()) return;
  }
}

TEST_P(GemmKernelTest, F32WeightsMatchDoubleReference) {
  std::mt19937 rng(99);
  ThreadPool pool(2);
  for (const Shape& s : Shapes()) {
    Check<float>(s, rng, pool);
    if (HasFatalFailure()) return;
  }
}

// Wide n: many column blocks, so the 2-thread split and block tails are exercised for real.
TEST_P(GemmKernelTest, WideMatricesWithPool) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  for (const Shape& s : {Shape{1, 1001, 300}, Shape{4, 777, 129}, Shape{19, 515, 96}}) {
    Check<uint16_t>(s, rng, pool);
    Check<float>(s, rng, pool);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllKernels, GemmKernelTest,
                         ::testing::Values("generic", "avx2", "avx512", "avx512bf16"),
                         [](const auto& info) { return std::string(info.param); });

// /proc/cpuinfo flags of the first processor (an independent view of what cpuid reports).
std::string CpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) return line + " ";
  return "";
}
bool HasFlag(const std::string& flags, const std::string& f) {
  return flags.find(" " + f + " ") != std::string::npos;
}

TEST(GemmDispatch, AutomaticChoiceMatchesCpuinfo) {
  const std::string flags = CpuFlags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
  unsetenv("TESSERA_CPU_BF16_ACTIVATIONS");
  ASSERT_TRUE(ForceGemmKernel(""));
  const bool avx512 = HasFlag(flags, "avx512f") && HasFlag(flags, "avx512bw") &&
                      HasFlag(flags, "avx512vl") && HasFlag(flags, "avx512dq");
  const bool avx2 = HasFlag(flags, "avx2") && HasFlag(flags, "fma");
  EXPECT_STREQ(GemmKernelName(), avx512 ? "avx512" : avx2 ? "avx2" : "generic");
  EXPECT_EQ(CpuHasAvx512(), avx512);
  EXPECT_EQ(CpuHasAvx2Fma(), avx2);
  EXPECT_EQ(CpuHasAvx512Bf16(), avx512 && HasFlag(flags, "avx512_bf16"));
  // Never chosen unless asked for: it changes results beyond the golden tolerances.
  EXPECT_STRNE(GemmKernelName(), "avx512bf16");
}

TEST(GemmDispatch, EnvironmentOptsIntoBf16Activations) {
  setenv("TESSERA_CPU_BF16_ACTIVATIONS", "1", 1);
  ASSERT_TRUE(ForceGemmKernel(""));
  const std::string chosen = GemmKernelName();
  unsetenv("TESSERA_CPU_BF16_ACTIVATIONS");
  ASSERT_TRUE(ForceGemmKernel(""));
  if (CpuHasAvx512Bf16()) EXPECT_EQ(chosen, "avx512bf16");
  else EXPECT_NE(chosen, "avx512bf16");
  EXPECT_STRNE(GemmKernelName(), "avx512bf16");
}

TEST(GemmDispatch, UnknownOrUnsupportedNamesAreRefused) {
  ASSERT_TRUE(ForceGemmKernel("generic"));
  EXPECT_FALSE(ForceGemmKernel("avx1024"));
  EXPECT_FALSE(ForceGemmKernel("AVX512"));
  EXPECT_STREQ(GemmKernelName(), "generic");
  if (!CpuHasAvx512()) {
    EXPECT_FALSE(ForceGemmKernel("avx512"));
  }
  if (!CpuHasAvx512Bf16()) {
    EXPECT_FALSE(ForceGemmKernel("avx512bf16"));
  }
  EXPECT_TRUE(ForceGemmKernel(""));
}

TEST(GemmEdgeCases, EmptyShapesAndZeroK) {
  const float x[2] = {1.f, 2.f};
  const uint16_t w[2] = {0x3f80, 0x3f80};
  float y[4] = {5.f, 6.f, 7.f, 8.f};
  GemmF32xBf16(x, 0, 2, w, 1, y, nullptr);  // m = 0: nothing written
  GemmF32xBf16(x, 1, 2, w, 0, y, nullptr);  // n = 0
  EXPECT_EQ(y[0], 5.f);
  GemmF32xBf16(x, 2, 0, w, 2, y, nullptr, /*accumulate=*/true);  // k = 0: y += 0
  EXPECT_EQ(y[3], 8.f);
  GemmF32xBf16(x, 2, 0, w, 2, y, nullptr);  // k = 0: y = 0
  for (float v : y) EXPECT_EQ(v, 0.f);
  EXPECT_THROW(GemmF32xBf16(x, -1, 2, w, 1, y, nullptr), Error);
  EXPECT_THROW(GemmF32xF32(x, 1, 2, x, -3, y, nullptr), Error);
}

}  // namespace
}  // namespace tessera

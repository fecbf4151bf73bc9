// tessera cuda backend: the switch table and its checks (cuda_switches.h). The values each switch
// takes are the ones its reader distinguishes; docs/CUDA.md says what each variant is.
#include "backend/cuda/cuda_switches.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"

namespace tessera::cuda {

namespace {
constexpr std::string_view kPrefix = "TESSERA_CUDA_";

bool Takes(const SwitchSpec& s, std::string_view value) {
  if (value.empty()) return true;
  switch (s.kind) {
    case SwitchKind::kFlag:
      return value == "0" || value == "1";
    case SwitchKind::kInteger:
      return value.size() <= 18 && value.find_first_not_of("0123456789") == std::string_view::npos;
    case SwitchKind::kChoice: {
      std::string_view rest = s.choices;
      while (!rest.empty()) {
        const size_t bar = rest.find('|');
        if (rest.substr(0, bar) == value) return true;
        rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
      }
      return false;
    }
    case SwitchKind::kText:
      return true;
  }
  return false;
}

const SwitchSpec* Find(std::string_view name) {
  for (const SwitchSpec& s : Switches())
    if (name == s.name) return &s;
  return nullptr;
}

std::string Expected(const SwitchSpec& s) {
  switch (s.kind) {
    case SwitchKind::kFlag:
      return "0 or 1";
    case SwitchKind::kInteger:
      return "a non-negative integer";
    case SwitchKind::kChoice:
      return std::string("one of ") + s.choices;
    case SwitchKind::kText:
      break;
  }
  return "text";
}
}  // namespace

const std::vector<SwitchSpec>& Switches() {
  using K = SwitchKind;
  static const std::vector<SwitchSpec> table = {
      // Every backend switch selects a measured alternative, reaches a default kernel of another regime
      // at the models' shapes for a test, or serves measurement (docs/CUDA.md, "Switches").
      // Step execution: graphs off (comparisons, tests), the chunk size (tests), why a step got a new
      // graph, PDL off (measured: ~0.2 us a boundary), kernels left out (the knockout study), profiles.
      {"TESSERA_CUDA_GRAPHS", K::kFlag, "", false},
      {"TESSERA_CUDA_GRAPH_CHUNK", K::kInteger, "", false},
      {"TESSERA_CUDA_GRAPHS_DEBUG", K::kFlag, "", false},
      {"TESSERA_CUDA_PDL", K::kFlag, "", false},
      {"TESSERA_CUDA_SKIP_KERNELS", K::kText, "", false},
      {"TESSERA_CUDA_PROFILE", K::kFlag, "", false},
      {"TESSERA_CUDA_PROFILER_RANGE", K::kFlag, "", false},
      // Dense products: v2 for every row count (the kernel of builds without sm_90a code and the
      // fallback without a TMA map), the row / work bounds (tests, CudaBench.MatMulRows), v3's two ways
      // of splitting x (tests).
      {"TESSERA_CUDA_SKINNY", K::kChoice, "v2", false},
      {"TESSERA_CUDA_SKINNY_MAX_ROWS", K::kInteger, "", false},
      {"TESSERA_CUDA_SKINNY_MAX_WORK", K::kInteger, "", false},
      {"TESSERA_CUDA_WGMMA_PRESPLIT_TILES", K::kInteger, "", false},
      // Attention: the per-head kernel and the flash kernel's few-row shape at the models' shapes (tests).
      {"TESSERA_CUDA_ATTENTION_FLASH", K::kFlag, "", false},
      {"TESSERA_CUDA_ATTENTION_DECODE", K::kFlag, "", false},
      // ... and the flash kernel's many-row shape where the wgmma one applies (tests).
      {"TESSERA_CUDA_ATTENTION_WGMMA", K::kFlag, "", false},
      // MoE: the CUDA-core grouped kernels and the host-grouped path at the models' shapes (tests).
      {"TESSERA_CUDA_MOE_KERNEL", K::kChoice, "simt", false},
      {"TESSERA_CUDA_MOE_GROUPED_MAX_SLOTS", K::kInteger, "", false},
      // The test suite's benchmarks and multi-GPU tests.
      {"TESSERA_CUDA_BENCH_CONFIG", K::kText, "", true},
      {"TESSERA_CUDA_BENCH_CONTEXTS", K::kText, "", true},
      {"TESSERA_CUDA_BENCH_BATCHES", K::kText, "", true},
      {"TESSERA_CUDA_BENCH_BATCH_CONTEXT", K::kInteger, "", true},
      {"TESSERA_CUDA_BENCH_DECODE", K::kInteger, "", true},
      {"TESSERA_CUDA_BENCH_PREFILL", K::kInteger, "", true},
      {"TESSERA_CUDA_BENCH_DENOISE_BATCH", K::kInteger, "", true},
      {"TESSERA_CUDA_BENCH_KV_DTYPE", K::kChoice, "f32|bf16", true},
      {"TESSERA_CUDA_BENCH_PRECISION", K::kChoice, "f32|bf16", true},
      {"TESSERA_CUDA_BENCH_QUANT", K::kChoice, "none|fp8|int8|int4", true},
      {"TESSERA_CUDA_BENCH_CANVAS_HOST", K::kFlag, "", true},
      {"TESSERA_CUDA_BENCH_LOGITS", K::kFlag, "", true},
      {"TESSERA_CUDA_BENCH_MATMUL", K::kText, "", true},
      {"TESSERA_CUDA_BENCH_GDN", K::kFlag, "", true},
      {"TESSERA_CUDA_ATTENTION_BENCH", K::kFlag, "", true},
      {"TESSERA_CUDA_TP", K::kInteger, "", true},
      {"TESSERA_CUDA_TP_BENCH_CONFIG", K::kText, "", true},
      {"TESSERA_CUDA_TP_BENCH_TP", K::kInteger, "", true},
      {"TESSERA_CUDA_TP_BENCH_CONTEXT", K::kInteger, "", true},
      {"TESSERA_CUDA_TP_BENCH_BATCH", K::kInteger, "", true},
      {"TESSERA_CUDA_TP_BENCH_BATCH_CONTEXT", K::kInteger, "", true},
      {"TESSERA_CUDA_TP_BENCH_DECODE", K::kInteger, "", true},
      {"TESSERA_CUDA_TP_BENCH_PREFILL", K::kInteger, "", true},
  };
  return table;
}

std::string CheckSwitches(const char* const* env) {
  std::string problems;
  for (; env != nullptr && *env != nullptr; ++env) {
    const std::string_view entry(*env);
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    const size_t eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : entry.substr(eq + 1);
    const SwitchSpec* s = Find(name);
    if (s == nullptr)
      problems += std::string(name) + " is not a tessera CUDA switch (docs/CUDA.md lists them)\n";
    else if (!Takes(*s, value))
      problems += std::string(name) + "=" + std::string(value) + ": expected " + Expected(*s) + "\n";
  }
  return problems;
}

std::string SwitchValue(const char* name) {
  if (Find(name) == nullptr) Fail(ErrorKind::kInternal, "{} is read but not in the CUDA switch table", name);
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace tessera::cuda

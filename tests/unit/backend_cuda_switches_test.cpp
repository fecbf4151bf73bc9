// tessera tests: the TESSERA_CUDA_* switch table (src/backend/cuda/cuda_switches.h), host code that
// runs in every build. What a backend being made accepts and refuses, and that the table and the
// sources agree: every TESSERA_CUDA_* name the backend or the tests spell is in the table, every
// backend switch of the table is read somewhere, and nothing in the backend reads the environment
// except through the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_switches.h"
#include "core/error.h"
#include "test_util.h"

namespace tessera::cuda {
namespace {

std::string Check(std::vector<const char*> env) {
  env.push_back(nullptr);
  return CheckSwitches(env.data());
}

TEST(CudaSwitches, AcceptsKnownSwitchesTheirValuesAndOtherVariables) {
  EXPECT_EQ(Check({"PATH=/usr/bin", "TESSERA_CUDA_BENCH_QUANT=int8", "TESSERA_CUDA_SKINNY=v2", "TESSERA_CUDA_PDL=0",
                   "TESSERA_CUDA_GRAPH_CHUNK=12", "TESSERA_CUDA_SKIP_KERNELS=Gemv,Rms", "TESSERA_CUDA_MOE_KERNEL=simt",
                   "TESSERA_CUDA_BENCH_KV_DTYPE=bf16", "TESSERA_CUDA_BENCH_BATCHES=,", "TESSERA_CUDAX=1",
                   "TESSERA_CUDA_BENCH_PRECISION="}),
            "");
  EXPECT_EQ(Check({}), "");
  EXPECT_EQ(CheckSwitches(nullptr), "");
}

TEST(CudaSwitches, RefusesUnknownNamesAndValuesSayingWhich) {
  const std::string unknown = Check({"TESSERA_CUDA_SKINY=v2"});
  EXPECT_NE(unknown.find("TESSERA_CUDA_SKINY is not a tessera CUDA switch"), std::string::npos) << unknown;
  const std::string choice = Check({"TESSERA_CUDA_MOE_KERNEL=simd"});
  EXPECT_NE(choice.find("TESSERA_CUDA_MOE_KERNEL=simd: expected one of simt"), std::string::npos) << choice;
  const std::string flag = Check({"TESSERA_CUDA_PDL=off"});
  EXPECT_NE(flag.find("TESSERA_CUDA_PDL=off: expected 0 or 1"), std::string::npos) << flag;
  const std::string integer = Check({"TESSERA_CUDA_GRAPH_CHUNK=-3"});
  EXPECT_NE(integer.find("expected a non-negative integer"), std::string::npos) << integer;
  EXPECT_NE(Check({"TESSERA_CUDA_SKINNY=v3x"}), "");
  EXPECT_NE(Check({"TESSERA_CUDA_MOE_KERNEL=sim"}), "");  // a prefix of a choice is not the choice
  // Every problem is reported, one line each.
  const std::string two = Check({"TESSERA_CUDA_MOE_KERNEL=x", "TESSERA_CUDA_NOPE=1", "TESSERA_CUDA_PDL=1"});
  EXPECT_EQ(std::count(two.begin(), two.end(), '\n'), 2) << two;
}

// Kernel variants removed with their switches (issue 33: none was a default, none won a measurement;
// then the chunked gated delta rule, which lost to the recurrent kernel): an old command line naming
// one fails at start-up instead of timing the default kernels under its name.
TEST(CudaSwitches, RefusesTheRemovedVariants) {
  for (const char* gone :
       {"TESSERA_CUDA_GEMV=v1", "TESSERA_CUDA_SKINNY=v1", "TESSERA_CUDA_GDN=v1", "TESSERA_CUDA_GDN=chunked",
        "TESSERA_CUDA_GQA=v1", "TESSERA_CUDA_KV_SPLIT=0", "TESSERA_CUDA_MOE_MMA=v1",
        "TESSERA_CUDA_MOE_MMA_DOWN=v2k128", "TESSERA_CUDA_MOE_FUSED=v1", "TESSERA_CUDA_MOE_DOWN=v1",
        "TESSERA_CUDA_MOE_ROUTE_FUSED=0", "TESSERA_CUDA_ATTENTION=per-head", "TESSERA_CUDA_SKINNY_GEMM=0",
        "TESSERA_CUDA_SKINNY_SPLITS=4"})
    EXPECT_NE(Check({gone}), "") << gone;
}

TEST(CudaSwitches, ReadingASwitchNotInTheTableIsABug) {
  try {
    SwitchValue("TESSERA_CUDA_NOT_A_SWITCH");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
  EXPECT_NO_THROW(SwitchValue("TESSERA_CUDA_SKINNY"));
}

TEST(CudaSwitches, TableNamesAreUniqueAndChoicesWellFormed) {
  std::set<std::string> names;
  for (const SwitchSpec& s : Switches()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_EQ(std::string(s.name).rfind("TESSERA_CUDA_", 0), 0u) << s.name;
    EXPECT_EQ(s.kind == SwitchKind::kChoice, std::string(s.choices).size() > 0) << s.name;
  }
}

// The names spelt as string literals in the files under `dir` with one of `exts`, skipping `skip`.
std::set<std::string> SpeltNames(const std::string& dir, const std::set<std::string>& exts, const std::string& skip,
                                 bool* reads_environment) {
  static const std::string open = "\"TESSERA_CUDA_";
  std::set<std::string> out;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    if (!f.is_regular_file() || !exts.count(f.path().extension().string()) || f.path().filename() == skip) continue;
    const std::string text = testing::ReadFile(f.path().string());
    // "TESSERA_CUDA_[A-Z0-9_]+" as a whole string literal (not std::regex: GCC 12 warns inside it
    // under the sanitizers).
    for (size_t at = text.find(open); at != std::string::npos; at = text.find(open, at + 1)) {
      const size_t end = text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", at + open.size());
      if (end != std::string::npos && end > at + open.size() && text[end] == '"')
        out.insert(text.substr(at + 1, end - at - 1));
    }
    if (reads_environment && text.find("getenv(") != std::string::npos) {
      *reads_environment = true;
      ADD_FAILURE() << f.path() << " reads the environment itself: use SwitchValue";
    }
  }
  return out;
}

TEST(CudaSwitches, TableMatchesTheSources) {
  const std::string root = testing::DataPath("") + "../../";
  bool backend_reads_env = false;
  const std::set<std::string> backend = SpeltNames(root + "src/backend/cuda", {".cu", ".cuh", ".cpp", ".h"},
                                                   "cuda_switches.cpp", &backend_reads_env);
  const std::set<std::string> tests = SpeltNames(root + "tests", {".cpp", ".h"}, "backend_cuda_switches_test.cpp", nullptr);
  std::set<std::string> table;
  for (const SwitchSpec& s : Switches()) {
    table.insert(s.name);
    if (s.test_only) {
      EXPECT_TRUE(tests.count(s.name)) << s.name << " is a test switch that no test reads";
    } else {
      EXPECT_TRUE(backend.count(s.name)) << s.name << " is in the table but the backend never reads it";
    }
  }
  for (const std::string& n : backend) EXPECT_TRUE(table.count(n)) << n << " (src/backend/cuda) is not in the table";
  for (const std::string& n : tests) EXPECT_TRUE(table.count(n)) << n << " (tests/) is not in the table";
  EXPECT_GT(backend.size(), 10u);  // the scan found the sources
  EXPECT_FALSE(backend_reads_env);
}

}  // namespace
}  // namespace tessera::cuda

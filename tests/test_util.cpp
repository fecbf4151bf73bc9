// tessera tests: implementation of the shared helpers (see test_util.h).
#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace tessera::testing {

std::vector<float> NonZeroUniform(size_t n, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = u(rng);
    if (x == 0.0f) x = 1e-3f;
  }
  return v;
}

namespace {
template <typename W>
double MaxAbsDiffOf(const float* got, const W* want, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], w = static_cast<double>(want[i]);
    if (g == w) continue;  // equal, the same infinity included
    const double d = std::fabs(g - w);
    if (std::isnan(d) || std::isinf(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}
}  // namespace

double MaxAbsDiff(const float* got, const float* want, size_t n) { return MaxAbsDiffOf(got, want, n); }
double MaxAbsDiff(const float* got, const double* want, size_t n) { return MaxAbsDiffOf(got, want, n); }

std::string DataPath(const std::string& rel) { return std::string(TESSERA_SOURCE_DIR) + "/tests/data/" + rel; }

std::string NpmTokenizerDir(const std::string& package) {
  return std::string(TESSERA_SOURCE_DIR) + "/build-data/npm/" + package;
}

std::string TesseraBinary() { return std::string(TESSERA_BINARY_DIR) + "/tessera"; }

std::string ScratchDir(const std::string& name) {
  // Per process: ctest runs the tests of one binary as parallel processes, and two tests may
  // pick the same name.
  std::filesystem::path p =
      std::filesystem::path(TESSERA_BINARY_DIR) / "test-scratch" / std::to_string(getpid()) / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << content;
}

std::string Python3() {
  const char* env = std::getenv("TESSERA_TEST_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

CommandResult RunCommand(const std::string& command_line) {
  static int counter = 0;
  std::string dir = ScratchDir("cmd-" + std::to_string(counter++));
  std::string out = dir + "/out", err = dir + "/err";
  int status = std::system((command_line + " >" + out + " 2>" + err + " </dev/null").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace tessera::testing

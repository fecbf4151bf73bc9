// tessera CLI: shared helpers (see cli_common.h).
#include "cli_common.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "engine/memory_plan.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

namespace {

// The flag's value as a number, or nullopt when it is not one.
std::optional<double> AsNumber(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isnan(v)) return std::nullopt;
  return v;
}

}  // namespace

const CLI::Validator kPositiveNumber(
    [](std::string& s) -> std::string {
      const std::optional<double> v = AsNumber(s);
      return v && *v > 0 ? "" : fmt::format("must be a positive number, got {}", s);
    },
    "POSITIVE");

const CLI::Validator kNonNegativeNumber(
    [](std::string& s) -> std::string {
      const std::optional<double> v = AsNumber(s);
      return v && *v >= 0 ? "" : fmt::format("must be a number >= 0, got {}", s);
    },
    "NONNEGATIVE");

const CLI::Validator kSeed(
    [](std::string& s) -> std::string {
      const bool digits = !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
      // 20 digits: at most 18446744073709551615 (compared as text: same length, so lexicographic).
      if (digits && (s.size() < 20 || s <= "18446744073709551615")) return "";
      return fmt::format("must be an integer in [0, 2^64), got {}", s);
    },
    "SEED");

std::vector<int32_t> ParseIdList(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&]() {
    if (cur.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &used);
    } catch (...) {
      used = 0;
    }
    if (used != cur.size() || v < 0 || v > INT32_MAX)
      throw UsageError(fmt::format("{}: \"{}\" is not a token id (a non-negative integer)", flag, cur));
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '[' || c == ']' || c == '\n' || c == '\t') flush();
    else cur += c;
  }
  flush();
  if (ids.empty()) throw UsageError(fmt::format("{}: expected a comma-separated list of token ids", flag));
  return ids;
}

std::unique_ptr<Tokenizer> LoadTokenizerIfPresent(const std::string& dir) {
  if (!FileExists(JoinPath(dir, "tokenizer.json"))) return nullptr;
  return Tokenizer::FromDir(dir);
}

std::unique_ptr<Tokenizer> LoadTokenizerRequired(const std::string& dir, const std::string& why) {
  auto tok = LoadTokenizerIfPresent(dir);
  if (!tok)
    throw UsageError(fmt::format("{} has no tokenizer.json; {}", dir, why));
  return tok;
}

std::string DemoModelDir() {
  if (const char* env = std::getenv("TESSERA_DEMO_MODEL"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::canonical("/proc/self/exe", ec);
  std::string looked;
  if (!ec) {
    // build/tessera -> models/demo of the source tree; an install: bin/ -> share/tessera/models/demo.
    for (const char* rel : {"../models/demo", "../share/tessera/models/demo", "../../models/demo"}) {
      const std::filesystem::path dir = (exe.parent_path() / rel).lexically_normal();
      if (FileExists(JoinPath(dir.string(), "config.json"))) return dir.string();
      looked += (looked.empty() ? "" : ", ") + dir.string();
    }
  }
  throw UsageError(fmt::format("no --model given and the demo model is not where it ships ({}); give --model DIR "
                               "or set TESSERA_DEMO_MODEL",
                               looked.empty() ? "the executable's path is unknown" : looked));
}

std::string IdsToJson(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

std::unique_ptr<Model> LoadModelForCli(const std::string& dir, const LoadOptions& lo) {
  try {
    return Model::Load(dir, lo);
  } catch (const Error& e) {
    if (lo.device != "cuda" || std::string(e.what()).find("out of memory") == std::string::npos) throw;
    // The checkpoint's size on disk is what its weights take on the device (less when quantized at load).
    namespace fs = std::filesystem;
    uintmax_t bytes = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".safetensors") bytes += it->file_size(ec);
    const std::string need =
        bytes == 0 ? "" : fmt::format(" the checkpoint's weights are {}{};", HumanBytes(static_cast<double>(bytes)),
                                      lo.tensor_parallel_size > 1
                                          ? fmt::format(" (about 1/{} of them per GPU)", lo.tensor_parallel_size)
                                          : "");
    throw Error(e.kind(), fmt::format("cannot load {} onto the GPU: {};{} free the GPU's memory (other "
                                      "processes), shard the model (--tensor-parallel-size) or quantize it "
                                      "(--quantization)",
                                      dir, e.what(), need));
  }
}

}  // namespace tessera

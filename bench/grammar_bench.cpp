// tessera bench: structured output on a real vocabulary. For each schema of the suite
// (tests/data/grammar/schema_suite.json): the compile time (schema text -> automaton -> token classes
// of every state, with a fresh compiler so nothing is cached), then random walks (random_walk.h)
// timing every FillNextTokenBitmask. Prints per-schema rows and the distribution over all masks.
// One thread: the grammar code runs on the caller's thread.
//
//   grammar_bench [--tokenizer DIR] [--suite FILE] [--walks N] [--filter SUBSTR] [--seed S] [--compile-threads N]
//                 [--no-mask-cache] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar_compiler.h"
#include "grammar/random_walk.h"
#include "tokenizer/tokenizer.h"

using namespace tessera;
using namespace tessera::grammar;

namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Fail(ErrorKind::kNotFound, "cannot read {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_dir = "build-data/npm/tokenizer-qwen3", suite_path = "tests/data/grammar/schema_suite.json";
  std::string filter, json_out;
  int walks = 5, threads = 1;
  bool mask_cache = true;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return std::strcmp(argv[i], name) == 0 && i + 1 < argc; };
    if (arg("--tokenizer")) {
      tok_dir = argv[++i];
    } else if (arg("--suite")) {
      suite_path = argv[++i];
    } else if (arg("--walks")) {
      walks = std::atoi(argv[++i]);
    } else if (arg("--filter")) {
      filter = argv[++i];
    } else if (std::strcmp(argv[i], "--no-mask-cache") == 0) {
      mask_cache = false;
    } else if (arg("--compile-threads")) {
      threads = std::atoi(argv[++i]);
    } else if (arg("--seed")) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg("--json")) {
      json_out = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: grammar_bench [--tokenizer DIR] [--suite FILE] [--walks N] [--filter S] [--seed S] "
                   "[--compile-threads N] [--no-mask-cache] [--json FILE]\n");
      return 2;
    }
  }
  try {
    auto t0 = std::chrono::steady_clock::now();
    auto tok = Tokenizer::FromDir(tok_dir);
    std::vector<int32_t> stops;
    for (const char* s : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tok->TokenToId(s)) stops.push_back(*id);
    auto vocab = TokenVocabulary::FromTokenizer(*tok, stops);
    double vocab_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("vocabulary: %lld ids, %d grammar tokens, %zu trie nodes (tokenizer + vocabulary %.0f ms)\n",
                static_cast<long long>(vocab->vocab_size()), vocab->num_positions(), vocab->trie().size(), vocab_ms);

    auto suite = nlohmann::ordered_json::parse(ReadAll(suite_path));
    std::mt19937_64 rng(seed);
    std::vector<double> all_masks, compile_ms;
    nlohmann::json report = nlohmann::json::array();
    std::printf("%-24s %6s %6s %8s %9s %7s %6s %9s %8s %8s\n", "schema", "states", "walks", "build ms", "classes ms",
                "MiB", "masks", "median us", "p99 us", "max us");
    for (const auto& entry : suite) {
      std::string name = entry["name"];
      if (!filter.empty() && name.find(filter) == std::string::npos) continue;
      GrammarCompilerOptions copts;
      copts.compile_threads = threads;
      if (!mask_cache) copts.mask_cache_bytes_per_grammar = 0;
      GrammarCompiler compiler(vocab, copts);  // fresh: no cached grammar
      auto c0 = std::chrono::steady_clock::now();
      auto g = compiler.Compile(GrammarFormat::kJson, entry["schema"].dump());
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
      compile_ms.push_back(ms);
      std::vector<double> masks;
      for (int w = 0; w < walks; ++w) {
        RandomWalkOptions opts;
        opts.time_masks = true;
        RandomWalkResult r = RandomWalk(g, opts, &rng);
        if (!r.complete) Fail(ErrorKind::kInternal, "{}: walk failed: {}", name, r.failure);
        masks.insert(masks.end(), r.mask_us.begin(), r.mask_us.end());
      }
      all_masks.insert(all_masks.end(), masks.begin(), masks.end());
      const auto& st = g->stats();
      std::printf("%-24s %6d %6d %8.1f %9.1f %7.1f %6zu %9.1f %8.1f %8.1f\n", name.c_str(), st.num_states, st.num_walks,
                  st.build_ms, st.precompute_ms, static_cast<double>(st.classes_bytes) / (1 << 20), masks.size(),
                  Percentile(masks, 50), Percentile(masks, 99),
                  masks.empty() ? 0.0 : *std::max_element(masks.begin(), masks.end()));
      report.push_back({{"schema", name},
                        {"states", st.num_states},
                        {"walks", st.num_walks},
                        {"compile_ms", ms},
                        {"build_ms", st.build_ms},
                        {"token_classes_ms", st.precompute_ms},
                        {"token_classes_bytes", st.classes_bytes},
                        {"masks", masks.size()},
                        {"mask_median_us", Percentile(masks, 50)},
                        {"mask_p99_us", Percentile(masks, 99)}});
    }
    std::printf("\ncompile per schema: median %.1f ms, p90 %.1f ms, max %.1f ms (%zu schemas)\n",
                Percentile(compile_ms, 50), Percentile(compile_ms, 90), Percentile(compile_ms, 100), compile_ms.size());
    std::printf("mask per token: median %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us (%zu masks)\n",
                Percentile(all_masks, 50), Percentile(all_masks, 90), Percentile(all_masks, 99),
                Percentile(all_masks, 100), all_masks.size());
    if (!json_out.empty()) {
      std::ofstream(json_out) << nlohmann::json{{"schemas", report},
                                                {"mask_median_us", Percentile(all_masks, 50)},
                                                {"mask_p99_us", Percentile(all_masks, 99)},
                                                {"compile_median_ms", Percentile(compile_ms, 50)}}
                                     .dump(1);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "grammar_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

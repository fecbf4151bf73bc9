// tessera tests: the tiny numpy-made DiffusionGemma checkpoint (tools/dgemma_fixtures/make_dgemma_selfcheck.py:
// bf16, window 8, canvas 16, vocab 512; tied, and untied), made once per test process into a scratch directory. A test
// fails, never skips, when python3-numpy is missing.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "test_util.h"

namespace tessera::testing {

inline const std::string& DgemmaSelfcheckOut() {
  static const std::string out = [] {
    const std::string dir = ScratchDir("dgemma_tiny");
    const auto r = RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) +
                              "/tools/dgemma_fixtures/make_dgemma_selfcheck.py " + dir);
    if (r.exit_code != 0) ADD_FAILURE() << "make_dgemma_selfcheck.py failed: " << r.out << r.err;
    return dir;
  }();
  return out;
}

inline std::string DgemmaSelfcheckDir() { return DgemmaSelfcheckOut() + "/dgemma_tiny_a"; }

// The same shape with tie_word_embeddings false: two whole stacks and an lm_head (docs OPEN 5).
inline std::string DgemmaUntiedDir() { return DgemmaSelfcheckOut() + "/dgemma_tiny_untied"; }

// A checkpoint's prompt (selfcheck.json; each shape draws its own).
inline std::vector<int32_t> DgemmaPromptIds(const std::string& dir = DgemmaSelfcheckDir()) {
  return ReadJsonFile(dir + "/selfcheck.json")["prompt_ids"].get<std::vector<int32_t>>();
}

}  // namespace tessera::testing

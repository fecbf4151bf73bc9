// tessera tests: the tiny numpy-made DiffusionGemma checkpoint (tools/dgemma_fixtures/make_dgemma_selfcheck.py:
// bf16, window 8, canvas 16, vocab 512), made once per test process into a scratch directory. A test
// fails, never skips, when python3-numpy is missing.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace tessera::testing {

inline const std::string& DgemmaSelfcheckDir() {
  static const std::string dir = [] {
    const std::string out = ScratchDir("dgemma_tiny");
    const auto r = RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) +
                              "/tools/dgemma_fixtures/make_dgemma_selfcheck.py " + out);
    if (r.exit_code != 0) ADD_FAILURE() << "make_dgemma_selfcheck.py failed: " << r.out << r.err;
    return out + "/dgemma_tiny_a";
  }();
  return dir;
}

}  // namespace tessera::testing

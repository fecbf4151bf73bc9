// tessera tests: outputs of the structured-output schema suite (tests/data/grammar/schema_suite.json)
// checked by an independent validator. Shared by the engine's autoregressive / block-diffusion and
// canvas-diffusion suites.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine_outcome.h"
#include "test_util.h"

namespace tessera::testing {

// outs[k] answered suite schema schema_of[k] with at most max_tokens[k] tokens. A "length" output
// must be exactly max_tokens[k] tokens (noise kept a string or an array open; printed), any other must
// be "stop" with a document that Python's jsonschema validates (tests/tools/validate_json_schema.py,
// Debian python3-jsonschema: missing, the check fails). Returns the number of complete outputs.
inline size_t ExpectSuiteOutputsValidate(const nlohmann::ordered_json& suite, const std::vector<size_t>& schema_of,
                                         const std::vector<Outcome>& outs, const std::vector<int64_t>& max_tokens,
                                         const std::string& scratch) {
  std::map<size_t, nlohmann::ordered_json> docs;
  size_t complete = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string& text = outs[k].text;
    if (outs[k].reason == FinishReason::kLength) {
      EXPECT_EQ(static_cast<int64_t>(outs[k].tokens.size()), max_tokens[k]);
      std::printf("[cut by max_tokens] %s, %zu bytes, ending: %s\n", suite[schema_of[k]]["name"].dump().c_str(),
                  text.size(), text.substr(text.size() > 80 ? text.size() - 80 : 0).c_str());
      continue;
    }
    EXPECT_EQ(outs[k].reason, FinishReason::kStop) << suite[schema_of[k]]["name"];
    docs[schema_of[k]].push_back(text);
    ++complete;
  }
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (auto& [i, d] : docs) cases.push_back({{"name", suite[i]["name"]}, {"schema", suite[i]["schema"]}, {"documents", d}});
  const std::string file = ScratchDir(scratch) + "/cases.json";
  WriteFile(file, cases.dump(1));
  CommandResult r =
      RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) + "/tests/tools/validate_json_schema.py " + file);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(std::to_string(complete) + " documents checked, 0 invalid"), std::string::npos) << r.out;
  return complete;
}

}  // namespace tessera::testing

// tessera tests: runs tests/tools/jinja_reference.py (Python Jinja2 configured like transformers)
// over a batch of {template, context} cases; shared by the template_* test files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace tessera::testing {

// Renders every case with Python's Jinja2. Each result is {"ok": text} or {"error": message}.
// Fails the calling test (and returns empty) if python3 or jinja2 is unusable: the install
// script provides them, so a missing reference is an error, never a skip.
nlohmann::ordered_json RenderWithReference(const nlohmann::ordered_json& cases, const std::string& tag) {
  std::string dir = ScratchDir("jinja-ref-" + tag);
  std::string in = dir + "/cases.json";
  WriteFile(in, cases.dump());
  std::string script = std::string(TESSERA_SOURCE_DIR) + "/tests/tools/jinja_reference.py";
  CommandResult r = RunCommand(testing::Python3() + " '" + script + "' '" + in + "'");
  if (r.exit_code != 0) {
    ADD_FAILURE() << "reference renderer failed (is python3 with jinja2 installed?): exit "
                  << r.exit_code << "\n" << r.err;
    return nlohmann::ordered_json::array();
  }
  auto out = nlohmann::ordered_json::parse(r.out, nullptr, false);
  if (!out.is_array() || out.size() != cases.size()) {
    ADD_FAILURE() << "reference renderer returned malformed output: " << r.out.substr(0, 500);
    return nlohmann::ordered_json::array();
  }
  return out;
}

}  // namespace tessera::testing

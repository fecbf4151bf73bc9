#!/usr/bin/env bash
# README's second command and CI's: installs what tessera needs, fetches the npm test data, builds
# and runs the whole test suite, then builds the tests with AddressSanitizer + UBSan and runs them
# again. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's seconds go to the log (where CI's time goes: docs/ARCHITECTURE.md, "Scripts").
phase_start=$SECONDS
phase() {
  echo "== [$((SECONDS - phase_start)) s] $1"
  phase_start=$SECONDS
}
bash scripts/install_deps.sh
bash scripts/fetch_test_data.sh
jobs=$(nproc)
phase "dependencies and test data done"

echo "== release build and tests"
# Tests and benchmarks on explicitly: build/ may have been configured by scripts/run.sh without them.
bash scripts/build.sh build -DTESSERA_TESTS=ON -DTESSERA_BENCH=ON
phase "release build done"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900)
phase "release tests done"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
# The CUDA backend is compiled (and its tests skipped without a GPU) in the release build above;
# the sanitizer build covers the host code. With clang: a second compiler's warnings and checks, and
# it compiles this code base faster under the sanitizers than g++ (http_server.cpp 47 s against
# 62 s at -O1, a test file at -O0 18 s against 32 s).
# The same build holds the fuzzers (fuzz/, TESSERA_FUZZ): each replays its corpus (every input a
# fuzzer or a bug report ever needed) under the same sanitizers. Replaying needs no coverage
# instrumentation in the libraries (TESSERA_FUZZ_COVERAGE=OFF: only the harnesses get it), which
# would slow every test of this build and its compile; fuzzing itself uses a build-fuzz with it.
bash scripts/build.sh build-asan -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTESSERA_SANITIZE=ON -DTESSERA_FUZZ=ON -DTESSERA_FUZZ_COVERAGE=OFF -DTESSERA_TESTS=ON -DTESSERA_BENCH=OFF -DTESSERA_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
phase "sanitizer build done"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 1800)
phase "sanitizer tests done"

echo "== fuzz corpora (regressions)"
bash scripts/fuzz.sh --build build-asan --regress --seconds 0
phase "fuzz corpora done"
echo "== all passed in $SECONDS s"

#!/usr/bin/env bash
# Device-side, one call (issue 30: the schema suite on the GPU): the *SchemaSuite*OnCuda tests of
# test_engine (autoregressive, block diffusion, canvases) from a pack with test_engine
# (GPU_BUNDLE_BINS="test_engine" bash scripts/gpu_bundle.sh build build-data/e/bundle.tar.xz here; carry
# ["build-data/e"], or set SUITE_CALL_BUNDLE). The GPU machine's pythons have no jsonschema module, so
# the tests' own validation fails there ("python jsonschema is not installed"); every output document
# they wrote (scratch cases.json) comes back in $OUT as <test>.json, and this machine validates them:
#   for f in <files_at>/*.json; do python3 tests/tools/validate_json_schema.py $f; done
# (each prints "N documents checked, 0 invalid" when all are valid; Debian python3-jsonschema).
set -u
cd "$(dirname "$0")/.."
. tools/gpu/device_python.sh
B=$(mktemp -d)
xz -dc "${SUITE_CALL_BUNDLE:-build-data/e/bundle.tar.xz}" | tar -C "$B" -xf -
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
touch /tmp/suite_mark
timeout "${SUITE_CALL_TIMEOUT:-240}" stdbuf -o0 "$B/test_engine" --gtest_filter='*SchemaSuite*OnCuda*' >"$OUT/suite.txt" 2>&1
echo "test_engine rc=$? (1 expected without jsonschema on this machine)"
grep -aE "^\[  (OK|PASSED|FAILED)|outputs complete|cut by|jsonschema is not" "$OUT/suite.txt" | sort | uniq -c | head -20
for f in $(find "$PWD/build" /tmp -xdev -name cases.json -newer /tmp/suite_mark 2>/dev/null); do
  cp "$f" "$OUT/$(basename "$(dirname "$f")").json" && echo "returned $(basename "$(dirname "$f")").json"
done

#!/usr/bin/env bash
# Device-side, one call (after `bash scripts/gpu_bundle.sh build` here; carry ["build-data/gpu-bundle"]):
# every CUDA test of the bundle except the benchmarks (test_backend 'Cuda*', test_engine '*OnCuda*',
# test_model '*Cuda*'), failures and the golden / conformance lines on stdout, whole logs under $OUT.
set -u
cd "$(dirname "$0")/.."
. tools/gpu/device_python.sh
P=$(mktemp -d); xz -dc build-data/gpu-bundle/bundle.tar.xz | tar -C "$P" -xf -
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 420 stdbuf -o0 "$P/test_backend" --gtest_filter='Cuda*:*/Cuda*:-CudaBench*:*CudaGdnBench*' >"$OUT/backend.txt" 2>&1
echo "test_backend rc=$?"
grep -E "golden cuda|bf16 activations|^\[  (PASSED|FAILED) |Failure|Expected|Which" "$OUT/backend.txt" | head -60
timeout 150 stdbuf -o0 "$P/test_engine" --gtest_filter='*OnCuda*' >"$OUT/engine.txt" 2>&1
echo "test_engine rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" "$OUT/engine.txt" | head
if [ -x "$P/test_model" ]; then
  timeout 200 stdbuf -o0 "$P/test_model" --gtest_filter='*Cuda*' >"$OUT/model.txt" 2>&1
  echo "test_model rc=$?"; grep -E "quant golden cuda|^\[  (PASSED|FAILED) |Failure" "$OUT/model.txt" | head -40
fi

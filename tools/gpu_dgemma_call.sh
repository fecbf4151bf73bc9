#!/usr/bin/env bash
# Device-side, one call (after `bash scripts/gpu_bundle.sh build` here; carry
# ["build-data/gpu-bundle/bundle.tar.xz"]): DiffusionGemma on CUDA (issue 31). The family's CUDA tests
# (test_backend CudaDgemma.*, the device canvas sampler and the element-wise ops, test_engine's canvas loop against stateless CPU forwards) unless
# DGEMMA_CALL_TESTS=0, then CudaBench canvas rows of the published 26B-A4B config with dummy bf16
# weights: canvas steps of 1 sequence at DGEMMA_CALL_CONTEXTS (default 1024) and of DGEMMA_CALL_BATCHES
# sequences (default 4,16) at context 1024, and a DGEMMA_CALL_PREFILL-token prompt (default 4096).
# DGEMMA_CALL_PROFILE=1 adds the per-op profile. DGEMMA_CALL_ATTENTION=1 first runs the attention
# kernels' tests (test_backend CudaAttention.*) and their per-call timing; DGEMMA_CALL_BASELINE=1 repeats
# the canvas rows (no prefill) with TESSERA_CUDA_ATTENTION_FLASH=0 (the per-head kernel), the
# comparison on the same card. Whole logs under $OUT.
set -u
cd "$(dirname "$0")/.."
. tools/gpu/device_python.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
P=$(mktemp -d); xz -dc build-data/gpu-bundle/bundle.tar.xz | tar -C "$P" -xf -
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
if [ "${DGEMMA_CALL_ATTENTION:-0}" = 1 ]; then
  timeout 240 stdbuf -o0 "$P/test_backend" --gtest_filter='CudaAttention.*' >"$OUT/attention_tests.txt" 2>&1
  echo "CudaAttention rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure|FAILED  \]" "$OUT/attention_tests.txt" | head -20
  awk '/rel err/ {if ($NF + 0 > m) {m = $NF + 0; w = $0}} END {print "largest: " w}' "$OUT/attention_tests.txt"
  TESSERA_CUDA_ATTENTION_BENCH=1 timeout 120 stdbuf -o0 "$P/test_backend" --gtest_filter='CudaAttention.Timing' \
    >"$OUT/attention_timing.txt" 2>&1
  echo "attention timing rc=$?"; grep "attention timing" "$OUT/attention_timing.txt"
fi
if [ "${DGEMMA_CALL_TESTS:-1}" != 0 ]; then
  timeout 200 stdbuf -o0 "$P/test_backend" --gtest_filter='*CudaDgemma.*:CudaConformance.CanvasSampleRows*:CudaConformance.ElementwiseOps' >"$OUT/dgemma_backend.txt" 2>&1
  echo "CudaDgemma rc=$?"; grep -E "near-tie|mismatch|drew|^\[  (PASSED|FAILED) |Failure" "$OUT/dgemma_backend.txt" | head -20
  timeout 200 stdbuf -o0 "$P/test_engine" --gtest_filter='EngineDiffusionGemmaCanvas.*' >"$OUT/dgemma_engine.txt" 2>&1
  echo "EngineDiffusionGemmaCanvas rc=$?"; grep -E "canvas replay|^\[  (PASSED|FAILED) |Failure" "$OUT/dgemma_engine.txt" | head -30
fi
TESSERA_CUDA_PROFILE=${DGEMMA_CALL_PROFILE:-0} TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/diffusiongemma-26b-a4b-it \
  TESSERA_CUDA_BENCH_CONTEXTS=${DGEMMA_CALL_CONTEXTS:-1024} TESSERA_CUDA_BENCH_BATCHES=${DGEMMA_CALL_BATCHES:-4,16} \
  TESSERA_CUDA_BENCH_PREFILL=${DGEMMA_CALL_PREFILL:-4096} timeout "${DGEMMA_CALL_BENCH_TIMEOUT:-420}" stdbuf -o0 \
  "$P/test_backend" --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/dgemma_bench.txt" 2>&1
echo "bench rc=$?"
grep -vE "^\[|^$|^Note:" "$OUT/dgemma_bench.txt" | head -80
if [ "${DGEMMA_CALL_BASELINE:-0}" = 1 ]; then
  TESSERA_CUDA_ATTENTION_FLASH=0 TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/diffusiongemma-26b-a4b-it \
    TESSERA_CUDA_BENCH_CONTEXTS=${DGEMMA_CALL_CONTEXTS:-1024} TESSERA_CUDA_BENCH_BATCHES=${DGEMMA_CALL_BATCHES:-4,16} \
    TESSERA_CUDA_BENCH_PREFILL=0 timeout "${DGEMMA_CALL_BENCH_TIMEOUT:-420}" stdbuf -o0 \
    "$P/test_backend" --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/dgemma_bench_baseline.txt" 2>&1
  echo "baseline (per-head attention) bench rc=$?"
  grep -vE "^\[|^$|^Note:" "$OUT/dgemma_bench_baseline.txt" | head -40
fi

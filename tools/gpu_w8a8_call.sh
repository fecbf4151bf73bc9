#!/usr/bin/env bash
# Device-side, one call (issue 29): the W8A8 tensor-core kernels (carry the bundles' folder).
#   1. CudaQuant.* (every quantized product and routed-expert path against the CPU backend);
#   2. CudaBench rows of the FP8 and INT8 W8A8 configs (tests/data/configs/qwen3-30b-a3b-{fp8,int8}-dynamic:
#      decode b1-b64, one and eight 32-row blocks at a 1K context, a 4K prompt) with this tree's kernels and, when
#      W8A8_CALL_BASE names a test_backend bundle of the previous kernels, with those, in the same call;
#      and of bf16 weights (the prompt to beat).
# Bundles: GPU_BUNDLE_BINS=test_backend (W8A8_CALL_NEW, default build-data/gpu-bundle/bundle.tar.xz).
set -u
cd "$(dirname "$0")/.."
unpack() { local d; d=$(mktemp -d); xz -dc "$1" | tar -C "$d" -xf -; echo "$d"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
NEW=$(unpack "${W8A8_CALL_NEW:-build-data/gpu-bundle/bundle.tar.xz}")
BASE=""
[ -n "${W8A8_CALL_BASE:-}" ] && BASE=$(unpack "$W8A8_CALL_BASE")
LD_LIBRARY_PATH=$NEW/lib:/usr/local/cuda/lib64 timeout 150 "$NEW/test_backend" --gtest_filter='CudaQuant.*' \
  >"$OUT/quant_tests.txt" 2>&1
echo "CudaQuant rc=$?"
grep -E "w8a8|^\[  (PASSED|FAILED) |Failure" "$OUT/quant_tests.txt" | head -60
bench() {  # bench <label> <bundle dir> <config>
  LD_LIBRARY_PATH=$2/lib:/usr/local/cuda/lib64 TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/$3 \
    TESSERA_CUDA_BENCH_CONTEXTS=1024 TESSERA_CUDA_BENCH_BATCHES= timeout 120 "$2/test_backend" \
    --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/bench_$1_$3.txt" 2>&1
  echo "== $1 $3 rc=$?"
  grep -E "^bench-(row|bw)" "$OUT/bench_$1_$3.txt" | cut -d'|' -f3-9
}
# Most wanted first (a call may run out of time): FP8 A/B, bf16, then INT8 A/B.
bench new "$NEW" qwen3-30b-a3b-fp8-dynamic
[ -n "$BASE" ] && bench base "$BASE" qwen3-30b-a3b-fp8-dynamic
bench new "$NEW" qwen3-30b-a3b
bench new "$NEW" qwen3-30b-a3b-int8-dynamic
[ -n "$BASE" ] && bench base "$BASE" qwen3-30b-a3b-int8-dynamic

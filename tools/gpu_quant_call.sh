#!/usr/bin/env bash
# Device-side, one call (after `bash scripts/gpu_bundle.sh build` here; carry ["build-data/gpu-bundle"]):
# the quantized kernels (issue 29): CudaQuant.* conformance, every quantized fixture on the GPU against the
# CPU (test_model QuantGolden.CudaMatchesTheCpu), then CudaBench rows of Qwen3-30B-A3B in
# every format (QUANT_CALL_FORMATS may name fp8-dynamic / int8-dynamic: W8A8,
# tests/data/configs/qwen3-30b-a3b-fp8-dynamic and -int8-dynamic).
# A baseline bundle at build-data/gpu-bundle/base.tar.xz (the previous kernels) runs the
# same rows in the same call. QUANT_CALL_FORMATS (default "int4 fp8 int8 bf16"), QUANT_CALL_BASE
# (default "int4": formats the baseline runs), QUANT_CALL_PROFILE (a format to profile op by op),
# QUANT_CALL_DIR (default build-data/gpu-bundle: where bundle.tar.xz and base.tar.xz are; a pair of
# test_backend-only packs keeps the carried files under 64 MiB), QUANT_CALL_TESTS=0 (benchmarks only).
set -u
cd "$(dirname "$0")/.."
. tools/gpu/device_python.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
unpack() { local d; d=$(mktemp -d); xz -dc "$1" | tar -C "$d" -xf -; echo "$d"; }
D=${QUANT_CALL_DIR:-build-data/gpu-bundle}
NEW=$(unpack "$D/bundle.tar.xz")
BASE=""
[ -f "$D/base.tar.xz" ] && BASE=$(unpack "$D/base.tar.xz")
export LD_LIBRARY_PATH=$NEW/lib:/usr/local/cuda/lib64
if [ "${QUANT_CALL_TESTS:-1}" != 0 ]; then
timeout 200 stdbuf -o0 "$NEW/test_backend" --gtest_filter='CudaQuant.*' >"$OUT/quant_tests.txt" 2>&1
echo "CudaQuant rc=$?"
grep -E "quant (matmul|moe)|^\[  (PASSED|FAILED) |Failure" "$OUT/quant_tests.txt" | awk '{print}' | head -120
timeout 300 stdbuf -o0 "$NEW/test_model" --gtest_filter='*QuantGolden.CudaMatchesTheCpu*' >"$OUT/quant_golden.txt" 2>&1
echo "QuantGolden on cuda rc=$?"
grep -E "quant golden cuda|^\[  (PASSED|FAILED) |Failure" "$OUT/quant_golden.txt" | head -60
fi
bench() {  # bench <label> <bundle dir> <format>; fp8-dynamic / int8-dynamic: the W8A8 configs' dummy weights
  local q=$3 config=tests/data/configs/qwen3-30b-a3b; [ "$q" = bf16 ] && q=""
  case $q in *-dynamic) config=tests/data/configs/qwen3-30b-a3b-$q; q="" ;; esac
  echo "== bench $1 $3"
  TESSERA_CUDA_BENCH_QUANT=$q TESSERA_CUDA_BENCH_CONFIG=$config TESSERA_CUDA_BENCH_CONTEXTS=1024 \
    TESSERA_CUDA_BENCH_BATCHES=8,64 timeout 240 stdbuf -o0 "$2/test_backend" \
    --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/bench_$1_$3.txt" 2>&1
  grep -E "^bench|ms|FAILED" "$OUT/bench_$1_$3.txt" | grep -v "^\[" | head -30
}
for f in ${QUANT_CALL_FORMATS-int4 fp8 int8 bf16}; do bench new "$NEW" "$f"; done
if [ -n "$BASE" ]; then
  for f in ${QUANT_CALL_BASE-int4}; do LD_LIBRARY_PATH=$BASE/lib:/usr/local/cuda/lib64 bench base "$BASE" "$f"; done
fi
if [ -n "${QUANT_CALL_PROFILE:-}" ]; then
  echo "== profile decode $QUANT_CALL_PROFILE"
  TESSERA_CUDA_PROFILE=1 TESSERA_CUDA_BENCH_QUANT=$QUANT_CALL_PROFILE TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/qwen3-30b-a3b \
    TESSERA_CUDA_BENCH_CONTEXTS=1024 TESSERA_CUDA_BENCH_BATCHES=8 TESSERA_CUDA_BENCH_DENOISE_BATCH=0 timeout 200 stdbuf -o0 \
    "$NEW/test_backend" --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/profile_$QUANT_CALL_PROFILE.txt" 2>&1
  tail -60 "$OUT/profile_$QUANT_CALL_PROFILE.txt"
fi

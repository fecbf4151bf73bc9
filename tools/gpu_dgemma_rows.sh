#!/usr/bin/env bash
# Device-side, one call (carry ["build-data/gpu-bundle/bundle.tar.xz"], built by
# `bash scripts/gpu_bundle.sh build`): issue 31's DiffusionGemma table in one go, each part a run of
# tools/gpu_dgemma_call.sh with its logs under $OUT/<part>: the family's CUDA tests and the bf16-KV rows
# (1 canvas at ctx 1K and 8K; 4, 16 and 64 canvases; a 4K prompt), the same with FP8 weights, with bf16
# activations, on an f32 KV cache, and a per-op profile of one canvas. Prints the rows and test verdicts.
set -u
cd "$(dirname "$0")/.."
run() {
  local name=$1
  shift
  mkdir -p "$OUT/$name"
  echo "=== $name"
  env OUT="$OUT/$name" "$@" bash tools/gpu_dgemma_call.sh 2>&1 |
    grep -E "rc=|bench-row|bench-bw|largest|PASSED|FAILED|Failure|canvas replay cuda|Softmax|rror"
}
run main DGEMMA_CALL_CONTEXTS=1024,8192 DGEMMA_CALL_BATCHES=4,16,64 DGEMMA_CALL_PREFILL=4096 \
  TESSERA_CUDA_BENCH_CANVAS_HOST=0 TESSERA_CUDA_BENCH_KV_DTYPE=bf16
run fp8 DGEMMA_CALL_TESTS=0 DGEMMA_CALL_BATCHES=16,64 DGEMMA_CALL_PREFILL=4096 TESSERA_CUDA_BENCH_CANVAS_HOST=0 \
  TESSERA_CUDA_BENCH_KV_DTYPE=bf16 TESSERA_CUDA_BENCH_QUANT=fp8
run bf16act DGEMMA_CALL_TESTS=0 DGEMMA_CALL_BATCHES=16 DGEMMA_CALL_PREFILL=4096 TESSERA_CUDA_BENCH_CANVAS_HOST=0 \
  TESSERA_CUDA_BENCH_KV_DTYPE=bf16 TESSERA_CUDA_BENCH_PRECISION=bf16
run f32kv DGEMMA_CALL_TESTS=0 DGEMMA_CALL_BATCHES=4 DGEMMA_CALL_PREFILL=0
run profile DGEMMA_CALL_TESTS=0 DGEMMA_CALL_BATCHES=, DGEMMA_CALL_PREFILL=0 DGEMMA_CALL_PROFILE=1 \
  TESSERA_CUDA_BENCH_CANVAS_HOST=0 TESSERA_CUDA_BENCH_KV_DTYPE=bf16

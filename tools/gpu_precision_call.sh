#!/usr/bin/env bash
# Device-side, one call (after `bash scripts/gpu_bundle.sh build` here; run with carry
# ["build-data/gpu-bundle"]): the activation-precision policy (issue 32 step 1) on the GPU: the
# conformance and golden tests (bf16 default, f32 exact), the diffusion fixtures through the engine
# (exact mode), then CudaBench rows of both configs at both precisions, and a per-op profile of the
# 4K prefill at bf16. GPU_CALL_SKIP_TESTS=1 runs the benchmarks only.
set -u
cd "$(dirname "$0")/.."
P=$(mktemp -d); xz -dc build-data/gpu-bundle/bundle.tar.xz | tar -C "$P" -xf -
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
if [ -z "${GPU_CALL_SKIP_TESTS:-}" ]; then
  timeout 240 stdbuf -o0 "$P/test_backend" --gtest_filter='CudaConformance.*:Fixtures/CudaGolden.*' >"$OUT/tests.txt" 2>&1
  echo "test_backend rc=$?"
  grep -E "golden cuda|bf16 activations|FAILED|Failure|Expected|Which|PASSED" "$OUT/tests.txt" | head -80
  timeout 150 stdbuf -o0 "$P/test_engine" --gtest_filter='*OnCuda*' >"$OUT/engine.txt" 2>&1
  echo "test_engine rc=$?"; grep -E "FAILED|PASSED|Failure" "$OUT/engine.txt" | head -20
fi
for cfg in qwen3-30b-a3b qwen3.5-35b-a3b; do
  for p in f32 bf16; do
    echo "== bench $cfg $p"
    TESSERA_CUDA_BENCH_PRECISION=$p TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/$cfg TESSERA_CUDA_BENCH_CONTEXTS=1024 \
      TESSERA_CUDA_BENCH_BATCHES=8,64 timeout 200 stdbuf -o0 "$P/test_backend" \
      --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/bench_${cfg}_$p.txt" 2>&1
    grep -E "^bench|ms|FAILED" "$OUT/bench_${cfg}_$p.txt" | grep -v "^\[" | head -30
  done
done
echo "== profile 30B prefill bf16"
TESSERA_CUDA_PROFILE=1 TESSERA_CUDA_BENCH_PRECISION=bf16 TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/qwen3-30b-a3b \
  TESSERA_CUDA_BENCH_CONTEXTS=, TESSERA_CUDA_BENCH_BATCHES=, TESSERA_CUDA_BENCH_DENOISE_BATCH=0 timeout 200 stdbuf -o0 \
  "$P/test_backend" --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/profile_prefill_30b_bf16.txt" 2>&1
tail -45 "$OUT/profile_prefill_30b_bf16.txt"

#!/usr/bin/env bash
# Device-side, one call: a 4K prompt's step (the CudaBench prefill row alone) for each PREFILL_CONFIGS entry,
# with this tree's kernels and, when PREFILL_BASE names a test_backend pack of earlier kernels, with those
# (alternating, same start); PREFILL_PROFILE=1 adds the op-by-op profile (TESSERA_CUDA_PROFILE=1) of the
# new binary's run. An entry is tests/data/configs/<name> with optional "@bf16" (bf16 activations,
# TESSERA_CUDA_BENCH_PRECISION=bf16) and "+fp8" / "+int4" / "+int8" (weights quantized at load,
# TESSERA_CUDA_BENCH_QUANT). Default: bf16 weights in both precisions, fp8 / int4 weight-only, and the FP8 and
# INT8 W8A8 configs (issue 29's "FP8 W8A8 prompt faster than bf16", issue 32's prefill).
# PREFILL_VARIANTS="label:NAME=VALUE ..." also runs the new binary under those switches (e.g.
# "nographs:TESSERA_CUDA_GRAPHS=0"), after the new and base runs of each entry.
# First PREFILL_TESTS (a gtest filter, default the quantized and MoE conformance and the GPU goldens; empty: none)
# on the new binary.
# Packs: GPU_BUNDLE_BINS=test_backend bash scripts/gpu_bundle.sh build build-data/DIR/bundle.tar.xz; carry
# build-data/DIR; PREFILL_NEW (default build-data/gpu-bundle/bundle.tar.xz), PREFILL_BASE (optional).
# Output: $OUT/tests.txt, $OUT/prefill.txt (every run's output); the rows (and profile heads) on stdout.
set -u
cd "$(dirname "$0")/.."
: "${OUT:=$(mktemp -d)}"
unpack() { local d; d=$(mktemp -d); xz -dc "$1" | tar -C "$d" -xf -; echo "$d"; }
NEW=$(unpack "${PREFILL_NEW:-build-data/gpu-bundle/bundle.tar.xz}")
BASE=""
[ -n "${PREFILL_BASE:-}" ] && BASE=$(unpack "$PREFILL_BASE")
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
TESTS=${PREFILL_TESTS-CudaQuant.*:CudaConformance.Moe*:CudaConformance.Bf16*:CudaConformance.GeluTanh*:CudaGemma*:Fixtures/CudaGolden.*}
if [ -n "$TESTS" ]; then
  LD_LIBRARY_PATH=$NEW/lib:/usr/local/cuda/lib64 timeout 240 "$NEW/test_backend" --gtest_filter="$TESTS" \
    >"$OUT/tests.txt" 2>&1
  echo "tests ($TESTS) rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|MoeExperts E=128 k=8 rows=2048" "$OUT/tests.txt" | head -30
fi
run() {  # run <label> <bundle dir> <entry> [profile] [NAME=VALUE]
  local entry=$3 name=${3%%[@+]*} precision=f32 quant="" extra=${5:-PREFILL_NO_SWITCH=1}
  case $entry in *@bf16*) precision=bf16 ;; esac
  case $entry in *+fp8*) quant=fp8 ;; *+int4*) quant=int4 ;; *+int8*) quant=int8 ;; esac
  echo "=== $1 $entry" >>"$OUT/prefill.txt"
  env "$extra" LD_LIBRARY_PATH=$2/lib:/usr/local/cuda/lib64 TESSERA_CUDA_PROFILE=${4:-} TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/$name \
    TESSERA_CUDA_BENCH_PRECISION=$precision TESSERA_CUDA_BENCH_QUANT=$quant TESSERA_CUDA_BENCH_CONTEXTS=, \
    TESSERA_CUDA_BENCH_BATCHES=, TESSERA_CUDA_BENCH_DENOISE_BATCH=0 TESSERA_CUDA_BENCH_PREFILL=${PREFILL_PROMPT:-4096} \
    timeout 150 "$2/test_backend" --gtest_filter=CudaBench.DummyDecodeAndPrefill >"$OUT/run.txt" 2>&1
  local rc=$?
  cat "$OUT/run.txt" >>"$OUT/prefill.txt"
  echo "$1 $entry rc=$rc $(grep -E "^bench-row" "$OUT/run.txt" | cut -d"|" -f3-9)"
  [ -n "${4:-}" ] && grep -A14 "cuda op profile" "$OUT/run.txt" | head -15
  rm -f "$OUT/run.txt"
}
for entry in ${PREFILL_CONFIGS:-qwen3-30b-a3b qwen3-30b-a3b@bf16 qwen3-30b-a3b+fp8 qwen3-30b-a3b+int4 \
  qwen3-30b-a3b-fp8-dynamic qwen3-30b-a3b-int8-dynamic}; do
  run new "$NEW" "$entry"
  [ -n "$BASE" ] && run base "$BASE" "$entry"
  for v in ${PREFILL_VARIANTS:-}; do run "${v%%:*}" "$NEW" "$entry" "" "${v#*:}"; done
  [ "${PREFILL_PROFILE:-0}" = 1 ] && run new "$NEW" "$entry" 1
done

#!/usr/bin/env bash
# tessera: the GPU check (docs/CUDA.md), run on a machine with an NVIDIA GPU: build the CUDA backend
# (or take prebuilt binaries from $GPU_CHECK_PREBUILT, or from the pack $GPU_CHECK_BUNDLE that
# scripts/gpu_bundle.sh makes on a CPU machine), run the conformance suite, the GPU golden
# tests and the diffusion fixtures through the engine (test_engine), compute-sanitizer memcheck on
# the golden tests and the chunked gated delta rule's test, then the dummy-weight decode / prefill micro-benchmark of the full-size configs
# (GPU_CHECK_CONFIGS, default both; each on the KV caches of GPU_CHECK_KV_DTYPES, default "f32 bf16";
# GPU_CHECK_PROFILE=1 adds the per-op profiles of batch-1 and batch-64 decode, which queue op by op;
# GPU_CHECK_NO_GRAPHS=1 the rows without CUDA graphs). Results go under $OUT (or ./gpu-results/).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RES=${OUT:-$ROOT/gpu-results}
BUILD=${GPU_CHECK_BUILD:-$ROOT/build-gpu}
PREBUILT=${GPU_CHECK_PREBUILT:-}
mkdir -p "$RES"
SUMMARY=$RES/summary.txt
: >"$SUMMARY"
log() { echo "== $*" | tee -a "$SUMMARY"; }
# GPU_CHECK_STAGES picks parts (default all): correctness (conformance, goldens, engine fixtures),
# memcheck, bench (the configs' rows). A device call is limited to 10 minutes: the whole check takes
# more, so run it in two or three calls.
STAGES=" ${GPU_CHECK_STAGES:-correctness memcheck bench} "
Want() { case "$STAGES" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
cd "$ROOT"

nvidia-smi -L 2>&1 | tee -a "$SUMMARY"
# GPU_CHECK_BUNDLE=<pack of scripts/gpu_bundle.sh>: binaries built elsewhere, unpacked here.
if [ -n "${GPU_CHECK_BUNDLE:-}" ]; then
  PREBUILT=$(mktemp -d)
  trap 'rm -rf "$PREBUILT"' EXIT
  xz -dc "$GPU_CHECK_BUNDLE" | tar -C "$PREBUILT" -xf - || { log "cannot unpack $GPU_CHECK_BUNDLE"; exit 1; }
fi
if [ -n "$PREBUILT" ] && [ -x "$PREBUILT/test_backend" ] &&
   LD_LIBRARY_PATH=$PREBUILT/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} \
     "$PREBUILT/test_backend" --gtest_list_tests >/dev/null 2>&1; then
  log "using prebuilt binaries from $PREBUILT"
  BIN=$PREBUILT/test_backend
  ENGINE_BIN=$PREBUILT/test_engine
  export LD_LIBRARY_PATH=$PREBUILT/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
else
  log "configure + build ($BUILD)"
  start=$(date +%s)
  if ! { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_TESTS=ON -DTESSERA_BENCH=OFF \
           -DTESSERA_CUDA=ON && ninja -C "$BUILD" -j16 test_backend test_engine; } >"$RES/build.log" 2>&1; then
    log "build FAILED"; tail -40 "$RES/build.log"; exit 1
  fi
  log "build took $(( $(date +%s) - start )) s"
  BIN=$BUILD/test_backend
  ENGINE_BIN=$BUILD/test_engine
fi

status=0
if Want correctness; then
  log "conformance (CudaConformance.*, CudaAttention.*, CudaGdnChunked.*)"
  timeout 200 "$BIN" --gtest_filter='CudaConformance.*:CudaAttention.*:CudaGdnChunked.*' 2>&1 | tee "$RES/conformance.txt" | grep -E "conformance|OK|FAILED|PASSED|Failure|error" ; [ "${PIPESTATUS[0]}" = 0 ] || status=1

  log "dense products on the mma.sync few-row kernel (TESSERA_CUDA_SKINNY=v2; the default is the wgmma one)"
  TESSERA_CUDA_SKINNY=v2 timeout 200 "$BIN" --gtest_filter='CudaConformance.MatMul*:CudaConformance.RowTiled*' 2>&1 | tee "$RES/conformance_skinny_v2.txt" | grep -E "conformance|FAILED|PASSED|Failure|error" ; [ "${PIPESTATUS[0]}" = 0 ] || status=1
  for tiles in 1 100000; do  # the wgmma kernel splitting x once beforehand for every launch, or never
    log "dense products with TESSERA_CUDA_WGMMA_PRESPLIT_TILES=$tiles"
    TESSERA_CUDA_WGMMA_PRESPLIT_TILES=$tiles timeout 200 "$BIN" --gtest_filter='CudaConformance.MatMul*:CudaConformance.RowTiled*' 2>&1 | tee "$RES/conformance_presplit_$tiles.txt" | grep -E "FAILED|PASSED|Failure|error" ; [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done

  log "golden on the GPU (Fixtures/CudaGolden.*)"
  timeout 150 "$BIN" --gtest_filter='Fixtures/CudaGolden.*' 2>&1 | tee "$RES/golden.txt" | grep -E "golden|OK|FAILED|PASSED|Failure|Expected|Which|error"; [ "${PIPESTATUS[0]}" = 0 ] || status=1

  log "diffusion fixtures through the engine on the GPU (EngineDiffusion.*OnCuda)"
  if [ -x "$ENGINE_BIN" ]; then
    timeout 150 "$ENGINE_BIN" --gtest_filter='*OnCuda*' 2>&1 | tee "$RES/engine_golden.txt" | grep -E "OK|FAILED|PASSED|SKIPPED|Failure|Expected|Which"; [ "${PIPESTATUS[0]}" = 0 ] || status=1
  else
    log "no test_engine binary ($ENGINE_BIN): not run"; status=1
  fi
fi

if Want memcheck; then
  log "compute-sanitizer memcheck on the golden tests"
  if command -v compute-sanitizer >/dev/null; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" \
      --gtest_filter='Fixtures/CudaGolden.LongLogits*:Fixtures/CudaGolden.Greedy*:Fixtures/CudaGolden.StepGraphs*:Fixtures/CudaGolden.DeviceSampled*' >"$RES/memcheck.txt" 2>&1
    rc=$?
    tail -5 "$RES/memcheck.txt" | tee -a "$SUMMARY"
    log "memcheck exit code $rc (0: no error; 3: errors found; 124: timed out)"
    [ $rc = 0 ] || status=1
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" \
      --gtest_filter='CudaGdnChunked.*' >"$RES/memcheck_gdn_chunked.txt" 2>&1
    rc=$?
    log "memcheck of the chunked gated delta rule: exit code $rc"
    [ $rc = 0 ] || status=1
  else
    log "compute-sanitizer not found"
  fi
fi

if Want bench; then
  for cfg in ${GPU_CHECK_CONFIGS:-qwen3-30b-a3b qwen3.5-35b-a3b}; do
    for kv in ${GPU_CHECK_KV_DTYPES:-f32 bf16}; do
      log "benchmark $cfg (dummy weights, $kv KV cache)"
      TESSERA_CUDA_BENCH_KV_DTYPE=$kv TESSERA_CUDA_BENCH_CONFIG=$ROOT/tests/data/configs/$cfg \
        timeout "${GPU_CHECK_BENCH_TIMEOUT:-400}" "$BIN" --gtest_filter='CudaBench.*' >"$RES/bench_${cfg}_$kv.txt" 2>&1
      rc=$?
      grep -E "^bench|^  steps|Failure|error|what\(\)" "$RES/bench_${cfg}_$kv.txt" | tr '\r' '\n' |
        grep -v "weights on" | tee -a "$SUMMARY"
      [ $rc = 0 ] || { log "benchmark $cfg ($kv KV cache) exit code $rc"; status=1; }
    done
    # The same decode and denoise rows with every op queued at once (no CUDA graphs), for comparison.
    if [ -n "${GPU_CHECK_NO_GRAPHS:-}" ]; then
      log "benchmark $cfg without CUDA graphs (TESSERA_CUDA_GRAPHS=0)"
      TESSERA_CUDA_GRAPHS=0 TESSERA_CUDA_BENCH_CONFIG=$ROOT/tests/data/configs/$cfg TESSERA_CUDA_BENCH_PREFILL=0 \
        timeout 300 "$BIN" --gtest_filter='CudaBench.*' 2>&1 | grep -E "^bench-row" | tee -a "$SUMMARY"
    fi
    # Where the time goes: the backend's per-op profile of batch-1 decode and of batch-64 decode.
    if [ -n "${GPU_CHECK_PROFILE:-}" ]; then
      for shape in "1024 , 0" ", 64 0"; do
        set -- $shape
        log "per-op profile $cfg: contexts=$1 batches=$2"
        TESSERA_CUDA_PROFILE=1 TESSERA_CUDA_BENCH_CONFIG=$ROOT/tests/data/configs/$cfg TESSERA_CUDA_BENCH_CONTEXTS=$1 \
          TESSERA_CUDA_BENCH_BATCHES=$2 TESSERA_CUDA_BENCH_PREFILL=0 TESSERA_CUDA_BENCH_DENOISE_BATCH=0 \
          TESSERA_CUDA_BENCH_DECODE=32 timeout 200 "$BIN" --gtest_filter='CudaBench.*' 2>&1 |
          grep -E "^bench-row|^cuda op profile|^  " | tee -a "$SUMMARY"
      done
    fi
  done
fi
log "done (status $status)"
exit $status

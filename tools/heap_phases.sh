#!/usr/bin/env bash
# Leak check of `tessera serve` by phases (issue 34; results in docs/RELIABILITY.md). RSS alone cannot
# tell a leak from memory the allocator keeps after a peak (glibc returns little of a fragmented heap)
# or from pages touched for the first time (the KV pool is mapped lazily). So: one server, PHASES
# rounds of the same load (bench's streaming clients of each kind plus cancelling clients), and at
# idle after each round the RSS, RssAnon and glibc's own count of the bytes its heap has handed out
# and not had back ("in use bytes" of malloc_stats(), read by attaching gdb: the process stops for
# a moment, idle). A leak grows the in-use bytes round after round; a retained peak does not.
#
#   tools/heap_phases.sh [--bin build/tessera] [--model models/demo] [--phases 5] [--clients 100]
#                        [--prompts 300] [--cancel-s 20] [--serve-args '--kv-cache-memory 48MiB']
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/tessera MODEL=models/demo PHASES=5 CLIENTS=100 PROMPTS=300 CANCEL_S=20
SERVE_ARGS='--compute-threads 1 --kv-cache-memory 48MiB'
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --phases) PHASES=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --prompts) PROMPTS=$2; shift 2 ;;
    --cancel-s) CANCEL_S=$2; shift 2 ;;
    --serve-args) SERVE_ARGS=$2; shift 2 ;;
    *) echo "heap_phases.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v gdb >/dev/null || { echo "heap_phases.sh: needs gdb (to call malloc_stats in the server)"; exit 2; }
OUT=$(mktemp -d /tmp/tessera-heap.XXXXXX)
echo "heap_phases: $(date -u); commit $(git rev-parse --short HEAD 2>/dev/null || echo -); out $OUT"
# shellcheck disable=SC2086
"$BIN" serve --port 0 --model "$MODEL" --max-num-seqs 64 --access-log '' $SERVE_ARGS >"$OUT/serve.log" 2>&1 </dev/null &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true' EXIT
PORT=""
for _ in $(seq 600); do
  PORT=$(grep -o 'listening on http://[^:]*:[0-9]*' "$OUT/serve.log" | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  sleep 0.1
done
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ]; do
  kill -0 $PID || { tail -3 "$OUT/serve.log"; exit 1; }
  sleep 0.2
done
TOOL='{"tools": [{"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object", "additionalProperties": false, "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}'
measure() {  # PHASE: one line of RSS, RssAnon and malloc_stats' totals (the server prints them on stderr)
  local before
  sleep 2
  before=$(grep -c 'in use bytes' "$OUT/serve.log" || true)
  gdb -p $PID -batch -ex 'call (void) malloc_stats()' >/dev/null 2>&1
  for _ in $(seq 50); do [ "$(grep -c 'in use bytes' "$OUT/serve.log")" -gt "$before" ] && break; sleep 0.1; done
  # malloc_stats prints per arena, then "Total (incl. mmap):" with system and in-use bytes.
  awk -v p="$1" -v rss="$(awk '/^VmRSS:/ {print $2}' /proc/$PID/status)" \
      -v anon="$(awk '/^RssAnon:/ {print $2}' /proc/$PID/status)" '
    /^Total \(incl. mmap\):/ {t = 1; next}
    t && /system bytes/ {sys = $NF} t && /in use bytes/ {use = $NF; t = 0}
    END {printf "phase %s: RSS %.1f MiB, RssAnon %.1f MiB, malloc system %.1f MiB, in use %.3f MiB\n",
                p, rss / 1024, anon / 1024, sys / 1048576, use / 1048576}' "$OUT/serve.log"
}
measure 0
for p in $(seq "$PHASES"); do
  python3 tools/soak_clients.py cancel --ports "$PORT" --clients 20 --duration "$CANCEL_S" --out "$OUT/cancel-$p.json" &
  CANCEL=$!
  "$BIN" bench --port "$PORT" --concurrency "$CLIENTS" --num-prompts "$PROMPTS" --input-len 16 --output-len 32 \
    --ignore-eos --seed "$p" --extra-body '{"diffusion": {"steps": 4, "policy": "static"}}' >"$OUT/bench-$p.txt" 2>&1 &
  B1=$!
  "$BIN" bench --port "$PORT" --endpoint chat --concurrency 20 --num-prompts 60 --input-len 16 --output-len 64 \
    --no-ignore-eos --seed "$p" --extra-body "$TOOL" >"$OUT/bench-tool-$p.txt" 2>&1 &
  B2=$!
  wait $B1 $B2 $CANCEL || echo "heap_phases: a client exited non-zero in phase $p (see $OUT)"
  grep -h -E '^(Successful|Failed) requests' "$OUT/bench-$p.txt" "$OUT/bench-tool-$p.txt" | tr -s ' ' | tr '\n' ';'; echo
  measure "$p"
done
kill -TERM $PID
wait $PID && echo "heap_phases: serve exited 0"
trap - EXIT

#!/usr/bin/env bash
# Soak test of `tessera serve` on this machine (issue 34 item 2; results in docs/RELIABILITY.md):
# one server of a model (default: the demo model, block diffusion), and with --mix a second one of
# the same weights served autoregressively (one model a server, and the demo model is a diffusion
# model), under
#   - `tessera bench`: CLIENTS concurrent streaming clients, back to back, for DURATION seconds
#     (each request: INPUT_LEN prompt tokens, OUTPUT_LEN output tokens, EXTRA_BODY merged in);
#     with --mix, one bench loop per request kind with its share of the clients:
#       diffusion       completions on the diffusion server, EXTRA_BODY (the default mix: all)
#       ar              completions on the autoregressive server
#       tool, tool-ar   chat with a forced tool call (tools + tool_choice naming get_weather), on the
#                       diffusion / autoregressive server
#       json, json-diffusion   chat with response_format json_schema, autoregressive / diffusion
#   - CANCEL_CLIENTS python clients that open a stream and drop the connection, half after a random
#     0.2-4 s (mostly while queued), half after two chunks of output (mid-stream); half of the drops
#     with RST instead of FIN; again and again (over both servers when there are two);
#   - SLOW_READERS python clients whose stream (megabytes: n 16, top_logprobs 20) is read at
#     READ_BPS bytes a second: the server's --write-timeout (WRITE_TIMEOUT) must cut each one off;
#   - CHECK_CLIENTS python clients that check tool-call and json_schema outputs (tools/soak_clients.py);
# while a sampler records, every SAMPLE_S seconds, each server's RSS and open descriptors
# (/proc/PID/status, /proc/PID/fd), threads, /health's status, and from /metrics the requests
# running / waiting, KV pages used and connections open. After the load, IDLE_S seconds of sampling
# idle (pages and connections must go back to 0), then SIGTERM (exit code 0 expected).
# Writes OUT/samples.csv (OUT/samples-ar.csv), OUT/bench-KIND-ROUND.json, OUT/cancel.json,
# OUT/slow.json, OUT/check.json, OUT/serve.log (OUT/serve-ar.log), and prints a summary.
#
#   tools/soak.sh [--bin build/tessera] [--model models/demo] [--duration 300] [--clients 500]
#                 [--cancel-clients 50] [--max-num-seqs 64] [--out DIR] [--serve-args '...']
#                 [--mix diffusion=300,ar=300,tool=100,tool-ar=100,json=100,json-diffusion=100]
#                 [--ar-model DIR] [--slow-readers 0] [--read-bps 200] [--slow-max-tokens 160]
#                 [--write-timeout 20] [--check-clients 0]
# --mix gives the clients of each kind (their sum replaces --clients); --ar-model defaults to a
# directory under OUT of MODEL's files with config.json's model_type set to qwen3_moe.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/tessera MODEL=models/demo DURATION=300 CLIENTS=500 CANCEL_CLIENTS=50 MAX_NUM_SEQS=64
INPUT_LEN=16 OUTPUT_LEN=32 SAMPLE_S=5 IDLE_S=20 OUT="" SERVE_ARGS="" MIX="" AR_MODEL=""
SLOW_READERS=0 READ_BPS=200 SLOW_MAX_TOKENS=160 WRITE_TIMEOUT=20 CHECK_CLIENTS=0
EXTRA_BODY='{"diffusion": {"steps": 4, "policy": "static"}}'
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --cancel-clients) CANCEL_CLIENTS=$2; shift 2 ;;
    --max-num-seqs) MAX_NUM_SEQS=$2; shift 2 ;;
    --input-len) INPUT_LEN=$2; shift 2 ;;
    --output-len) OUTPUT_LEN=$2; shift 2 ;;
    --extra-body) EXTRA_BODY=$2; shift 2 ;;
    --sample) SAMPLE_S=$2; shift 2 ;;
    --idle) IDLE_S=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --serve-args) SERVE_ARGS=$2; shift 2 ;;
    --mix) MIX=$2; shift 2 ;;
    --ar-model) AR_MODEL=$2; shift 2 ;;
    --slow-readers) SLOW_READERS=$2; shift 2 ;;
    --read-bps) READ_BPS=$2; shift 2 ;;
    --slow-max-tokens) SLOW_MAX_TOKENS=$2; shift 2 ;;
    --write-timeout) WRITE_TIMEOUT=$2; shift 2 ;;
    --check-clients) CHECK_CLIENTS=$2; shift 2 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/tessera-soak.XXXXXX)}
mkdir -p "$OUT"

# The request kinds: server (d: diffusion, a: autoregressive), endpoint, body, max tokens, eos rule.
# Tool and json requests end when their structure is complete, so they may stop at eos. The tool is
# strict: a forced call of a tool without strict only opens the call (docs/STRUCTURED_OUTPUT.md).
TOOL_BODY='{"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "strict": true, "parameters": {"type": "object", "additionalProperties": false, "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}'
JSON_BODY='{"response_format": {"type": "json_schema", "json_schema": {"name": "fortune", "strict": true, "schema": {"type": "object", "additionalProperties": false, "required": ["fortune", "lucky_number"], "properties": {"fortune": {"type": "string", "maxLength": 24}, "lucky_number": {"type": "integer"}}}}}}'
kind() {  # sets K_SERVER K_ENDPOINT K_BODY K_LEN K_EOS for kind $1
  K_LEN=$OUTPUT_LEN K_EOS=--ignore-eos K_ENDPOINT=completions K_BODY='{}'
  case "$1" in
    diffusion) K_SERVER=d K_BODY=$EXTRA_BODY ;;
    ar) K_SERVER=a ;;
    tool|tool-ar|json|json-diffusion)
      K_ENDPOINT=chat K_LEN=64 K_EOS=--no-ignore-eos
      case "$1" in tool) K_SERVER=d K_BODY=$TOOL_BODY ;; tool-ar) K_SERVER=a K_BODY=$TOOL_BODY ;;
                   json) K_SERVER=a K_BODY=$JSON_BODY ;; json-diffusion) K_SERVER=d K_BODY=$JSON_BODY ;; esac ;;
    *) echo "soak.sh: unknown request kind '$1' in --mix" >&2; exit 2 ;;
  esac
}
MIX=${MIX:-diffusion=$CLIENTS}
CLIENTS=0 NEED_AR=0 CONN_D=64 CONN_A=64
for kv in ${MIX//,/ }; do
  kind "${kv%%=*}"
  CLIENTS=$((CLIENTS + ${kv#*=}))
  if [ "$K_SERVER" = a ]; then NEED_AR=1; CONN_A=$((CONN_A + ${kv#*=})); else CONN_D=$((CONN_D + ${kv#*=})); fi
done
# The python clients go to both servers in turn when there are two (slow readers: the AR one only,
# since top_logprobs is what makes their streams megabytes, and diffusion models refuse it).
[ "$SLOW_READERS" -gt 0 ] && NEED_AR=1
EXTRA_CLIENTS=$((CANCEL_CLIENTS + SLOW_READERS + CHECK_CLIENTS))
CONN_D=$((CONN_D + EXTRA_CLIENTS)) CONN_A=$((CONN_A + EXTRA_CLIENTS))

echo "soak: $(date -u) on $(nproc) cores ($(uname -n)); commit $(git rev-parse --short HEAD 2>/dev/null || echo -); out $OUT"
echo "soak: $BIN serve --model $MODEL --max-num-seqs $MAX_NUM_SEQS --write-timeout $WRITE_TIMEOUT $SERVE_ARGS;" \
     "mix $MIX ($CLIENTS streaming clients) + $CANCEL_CLIENTS cancelling + $SLOW_READERS slow readers +" \
     "$CHECK_CLIENTS checking clients for ${DURATION}s"

# The servers, on ports the OS picks; their access logs count every request.
PIDS=()
trap 'kill -9 "${PIDS[@]}" 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true' EXIT
start_server() {  # NAME MODEL MAX_CONNECTIONS: sets PORT and PID
  local log=$OUT/serve$1.log
  # shellcheck disable=SC2086
  "$BIN" serve --port 0 --model "$2" --max-num-seqs "$MAX_NUM_SEQS" --access-log "$OUT/access$1.log" \
    --max-connections "$3" --write-timeout "$WRITE_TIMEOUT" $SERVE_ARGS >"$log" 2>&1 </dev/null &
  PID=$!
  PIDS+=("$PID")
  PORT=""
  for _ in $(seq 600); do
    PORT=$(grep -o 'listening on http://[^:]*:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$PORT" ] && break
    sleep 0.1
  done
  [ -n "$PORT" ] || { echo "soak: the server did not start"; cat "$log"; exit 1; }
  for _ in $(seq 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$PORT/health")" = 200 ] && break
    # A load that failed after the bind (e.g. a diffusion model without a step count): say so now
    # rather than after two minutes of polling a port nobody answers.
    kill -0 "$PID" 2>/dev/null || { echo "soak: the server exited while loading"; tail -3 "$log"; exit 1; }
    sleep 0.1
  done
}
start_server "" "$MODEL" "$CONN_D"
PID_D=$PID PORT_D=$PORT PORTS=$PORT
if [ "$NEED_AR" = 1 ]; then
  if [ -z "$AR_MODEL" ]; then
    # The same weights as an autoregressive qwen3_moe (the demo model is SDAR-style qwen3_moe tensors).
    AR_MODEL=$OUT/ar-model
    mkdir -p "$AR_MODEL"
    for f in "$MODEL"/*; do [ "$(basename "$f")" = config.json ] || ln -sf "$(realpath "$f")" "$AR_MODEL/"; done
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["model_type"] = "qwen3_moe"; c["architectures"] = ["Qwen3MoeForCausalLM"]
for k in ("mask_token_id", "block_size"): c.pop(k, None)
json.dump(c, open(sys.argv[2], "w"), indent=1)' "$MODEL/config.json" "$AR_MODEL/config.json"
  fi
  start_server -ar "$AR_MODEL" "$CONN_A"
  PID_A=$PID PORT_A=$PORT PORTS=$PORT_D,$PORT_A
fi

# Sampler: t, rss_kib, fds, threads, health, running, waiting, kv_pages_used, connections_open,
# write_timeouts (connections reset at the write deadline, cumulative), rss_anon_kib (RSS less the
# mapped files: the weights' pages, which the kernel may drop and re-read, are RssFile), state_slots_used
# (recurrent-state slots of running sequences: hybrid models only, else 0).
sample() {  # PID PORT FILE
  local pid=$1 port=$2 file=$3 t0 now rss anon fds thr health m
  t0=$(date +%s.%N)
  echo "t_s,rss_kib,fds,threads,health,running,waiting,kv_pages_used,connections_open,write_timeouts,rss_anon_kib,state_slots_used" >"$file"
  while kill -0 "$pid" 2>/dev/null; do
    now=$(date +%s.%N)
    rss=$(awk '/^VmRSS:/ {print $2}' /proc/$pid/status 2>/dev/null || echo -1)
    anon=$(awk '/^RssAnon:/ {print $2}' /proc/$pid/status 2>/dev/null || echo -1)
    thr=$(awk '/^Threads:/ {print $2}' /proc/$pid/status 2>/dev/null || echo -1)
    fds=$(ls /proc/$pid/fd 2>/dev/null | wc -l)
    health=$(curl -s -o /dev/null -w '%{http_code}' -m 4 "http://127.0.0.1:$port/health" || true)
    m=$(curl -s -m 4 "http://127.0.0.1:$port/metrics" || true)
    metric() { echo "$m" | awk -v n="$1" '$1 == n {print $2; f=1} END {if (!f) print -1}'; }
    printf '%.1f,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$(echo "$now - $t0" | bc)" "$rss" "$fds" "$thr" "${health:-000}" \
      "$(metric tessera_num_requests_running)" "$(metric tessera_num_requests_waiting)" \
      "$(metric tessera_kv_cache_pages_used)" "$(metric tessera_http_connections_open)" \
      "$(metric tessera_http_write_timeouts_total)" "${anon:--1}" "$(metric tessera_state_slots_used)" >>"$file"
    sleep "$SAMPLE_S"
  done
}
SAMPLERS=()
sample "$PID_D" "$PORT_D" "$OUT/samples.csv" &
SAMPLERS+=($!)
if [ "$NEED_AR" = 1 ]; then sample "$PID_A" "$PORT_A" "$OUT/samples-ar.csv" & SAMPLERS+=($!); fi

# The python clients (tools/soak_clients.py), each kind until DURATION passes.
CLIENT_JOBS=()
python3 tools/soak_clients.py cancel --ports "$PORTS" --clients "$CANCEL_CLIENTS" --duration "$DURATION" \
  --out "$OUT/cancel.json" &
CLIENT_JOBS+=($!)
if [ "$SLOW_READERS" -gt 0 ]; then
  python3 tools/soak_clients.py slow --ports "$PORT_A" --clients "$SLOW_READERS" --duration "$DURATION" \
    --read-bps "$READ_BPS" --max-tokens "$SLOW_MAX_TOKENS" --out "$OUT/slow.json" &
  CLIENT_JOBS+=($!)
fi
if [ "$CHECK_CLIENTS" -gt 0 ]; then
  python3 tools/soak_clients.py check --ports "$PORTS" --clients "$CHECK_CLIENTS" --duration "$DURATION" \
    --out "$OUT/check.json" &
  CLIENT_JOBS+=($!)
fi

# Streaming clients, back to back: per kind, bench rounds of its clients at once until DURATION passes.
END=$(( $(date +%s) + DURATION ))
bench_loop() {  # KIND CLIENTS
  local round=0 port
  kind "$1"
  port=$PORT_D; [ "$K_SERVER" = a ] && port=$PORT_A
  while [ "$(date +%s)" -lt "$END" ]; do
    round=$((round + 1))
    "$BIN" bench --port "$port" --endpoint "$K_ENDPOINT" --concurrency "$2" --num-prompts "$2" \
      --input-len "$INPUT_LEN" --output-len "$K_LEN" $K_EOS --threads 2 --timeout 1800 --seed "$round" \
      --extra-body "$K_BODY" --json "$OUT/bench-$1-$round.json" >"$OUT/bench-$1-$round.txt" 2>&1 ||
      echo "soak: bench $1 round $round exited $?"
  done
  echo "soak: $1: $round bench round(s)"
}
BENCH_JOBS=()
for kv in ${MIX//,/ }; do
  bench_loop "${kv%%=*}" "${kv#*=}" &
  BENCH_JOBS+=($!)
done
wait "${BENCH_JOBS[@]}" "${CLIENT_JOBS[@]}" || true
echo "soak: load done at $(date -u); ${IDLE_S}s idle"
sleep "$IDLE_S"
RC=""
for pid in "${PIDS[@]}"; do
  kill -TERM "$pid"
  set +e
  wait "$pid"
  RC="$RC $?"
  set -e
done
wait "${SAMPLERS[@]}" 2>/dev/null || true
trap - EXIT
echo "soak: serve exited$RC"

python3 - "$OUT" "$RC" <<'PY'
import csv, glob, json, os, re, statistics, sys
out, rc = sys.argv[1], sys.argv[2].split()
def pct(v, q):
    v = sorted(v); return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")
kinds = {}
for f in sorted(glob.glob(out + "/bench-*.json")):
    k = re.match(r"bench-(.*)-\d+\.json", os.path.basename(f)).group(1)
    b = json.load(open(f)); s = kinds.setdefault(k, {"rounds": 0, "done": 0, "failed": 0, "tok": 0, "dur": 0.0,
                                                     "by_status": {}, "errors": {}, "ttft": []})
    s["rounds"] += 1; s["done"] += b["completed"]; s["failed"] += b["failed"]; s["tok"] += b["total_output_tokens"]
    s["dur"] = max(s["dur"], b["duration_s"]); s["ttft"] += [t for t in b.get("ttfts_ms") or [] if t is not None]  # null: no output
    for key in ("failures_by_status", "errors"):
        for x, n in (b.get(key) or {}).items():
            d = s["by_status" if key == "failures_by_status" else "errors"]; d[x] = d.get(x, 0) + n
for k, s in kinds.items():
    print(f"bench {k}: {s['rounds']} round(s), {s['done']} completed, {s['failed']} failed {s['by_status']} "
          f"{s['errors']}, {s['tok']} output tokens; TTFT s median {pct(s['ttft'], .5) / 1e3:.1f}, "
          f"p99 {pct(s['ttft'], .99) / 1e3:.1f}, max {max(s['ttft'] or [float('nan')]) / 1e3:.1f}")
print(f"bench all: {sum(s['done'] for s in kinds.values())} completed, {sum(s['failed'] for s in kinds.values())} failed")
for name in ("cancel", "slow", "check"):
    if not os.path.exists(f"{out}/{name}.json"): continue
    c = json.load(open(f"{out}/{name}.json"))
    for key in ("bytes_read", "seconds_open", "seconds_after_first_byte"):
        if c.get(key): c[key] = f"min {min(c[key])} median {statistics.median(c[key])} max {max(c[key])}"
    print(f"{name} clients: " + json.dumps(c))
for tag, label in (("", "diffusion server"), ("-ar", "AR server")):
    if not os.path.exists(f"{out}/samples{tag}.csv"): continue
    rows = list(csv.DictReader(open(f"{out}/samples{tag}.csv")))
    def curve(k):
        v = [float(r[k]) for r in rows if float(r[k]) >= 0]
        return f"start {v[0]:.0f}, peak {max(v):.0f}, end {v[-1]:.0f}" if v else "none"
    # RSS per minute (the minimum of each 60 s window: a leak raises the floor, a step's buffers the peaks).
    def per_minute(k):
        mins = {}
        for r in rows:
            if float(r.get(k) or -1) > 0: m = int(float(r["t_s"]) // 60); mins[m] = min(mins.get(m, 1e18), float(r[k]))
        return [round(v / 1024) for _, v in sorted(mins.items())]
    health_bad = sum(1 for r in rows if r["health"] != "200")
    statuses = {}
    for line in open(f"{out}/access{tag}.log"):  # by method: GETs are the probes (503 while loading)
        j = json.loads(line); k = f"{j.get('method') or 'refused'} {j['status']}"; statuses[k] = statuses.get(k, 0) + 1
    print(f"{label}: RSS MiB per minute (min) {per_minute('rss_kib')}; of it anonymous {per_minute('rss_anon_kib')}")
    print(f"  RSS KiB: {curve('rss_kib')}; fds: {curve('fds')}; threads: {curve('threads')}")
    print(f"  connections open: {curve('connections_open')}; KV pages used: {curve('kv_pages_used')}; "
          f"running: {curve('running')}; waiting: {curve('waiting')}; write timeouts: {curve('write_timeouts')}; "
          f"state slots used: {curve('state_slots_used')}")
    print(f"  /health: {len(rows) - health_bad} of {len(rows)} samples 200; access log statuses {statuses}")
print(f"serve exit codes: {' '.join(rc)}")
PY

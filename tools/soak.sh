#!/usr/bin/env bash
# Soak test of `tessera serve` on this machine (issue 34 item 2; results in docs/RELIABILITY.md):
# one server of a model (default: the demo model, block diffusion) under
#   - `tessera bench`: CLIENTS concurrent streaming clients, back to back, for DURATION seconds
#     (each request: INPUT_LEN prompt tokens, OUTPUT_LEN output tokens, EXTRA_BODY merged in);
#   - CANCEL_CLIENTS python clients that open a stream and drop the connection, half after a random
#     0.2-4 s (mostly while queued), half after two chunks of output (mid-stream); half of the drops
#     with RST instead of FIN; again and again;
# while a sampler records, every SAMPLE_S seconds, the server's RSS and open descriptors
# (/proc/PID/status, /proc/PID/fd), threads, /health's status, and from /metrics the requests
# running / waiting, KV pages used and connections open. After the load, IDLE_S seconds of sampling
# idle (pages and connections must go back to 0), then SIGTERM (exit code 0 expected).
# Writes OUT/samples.csv, OUT/bench*.json, OUT/cancel.json, OUT/serve.log, and prints a summary.
#
#   tools/soak.sh [--bin build/tessera] [--model models/demo] [--duration 300] [--clients 500]
#                 [--cancel-clients 50] [--max-num-seqs 64] [--out DIR] [--serve-args '...']
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/tessera MODEL=models/demo DURATION=300 CLIENTS=500 CANCEL_CLIENTS=50 MAX_NUM_SEQS=64
INPUT_LEN=16 OUTPUT_LEN=32 SAMPLE_S=5 IDLE_S=20 OUT="" SERVE_ARGS=""
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
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/tessera-soak.XXXXXX)}
mkdir -p "$OUT"
echo "soak: $(date -u) on $(nproc) cores ($(uname -n)); out $OUT"
echo "soak: $BIN serve --model $MODEL --max-num-seqs $MAX_NUM_SEQS $SERVE_ARGS; $CLIENTS streaming clients +" \
     "$CANCEL_CLIENTS cancelling clients for ${DURATION}s"

# The server, on a port the OS picks; its access log counts every request.
# shellcheck disable=SC2086
"$BIN" serve --port 0 --model "$MODEL" --max-num-seqs "$MAX_NUM_SEQS" --access-log "$OUT/access.log" \
  --max-connections $((CLIENTS + CANCEL_CLIENTS + 64)) $SERVE_ARGS >"$OUT/serve.log" 2>&1 </dev/null &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true' EXIT
PORT=""
for _ in $(seq 600); do
  PORT=$(grep -o 'listening on http://[^:]*:[0-9]*' "$OUT/serve.log" | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "soak: the server did not start"; cat "$OUT/serve.log"; exit 1; }
for _ in $(seq 1200); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$PORT/health")" = 200 ] && break
  sleep 0.1
done

# Sampler: t, rss_kib, fds, threads, health, running, waiting, kv_pages_used, connections_open.
sample() {
  local t0 now rss fds thr health m
  t0=$(date +%s.%N)
  echo "t_s,rss_kib,fds,threads,health,running,waiting,kv_pages_used,connections_open" >"$OUT/samples.csv"
  while kill -0 $PID 2>/dev/null; do
    now=$(date +%s.%N)
    rss=$(awk '/^VmRSS:/ {print $2}' /proc/$PID/status 2>/dev/null || echo -1)
    thr=$(awk '/^Threads:/ {print $2}' /proc/$PID/status 2>/dev/null || echo -1)
    fds=$(ls /proc/$PID/fd 2>/dev/null | wc -l)
    health=$(curl -s -o /dev/null -w '%{http_code}' -m 4 "http://127.0.0.1:$PORT/health" || true)
    m=$(curl -s -m 4 "http://127.0.0.1:$PORT/metrics" || true)
    metric() { echo "$m" | awk -v n="$1" '$1 == n {print $2; f=1} END {if (!f) print -1}'; }
    printf '%.1f,%s,%s,%s,%s,%s,%s,%s,%s\n' "$(echo "$now - $t0" | bc)" "$rss" "$fds" "$thr" "${health:-000}" \
      "$(metric tessera_num_requests_running)" "$(metric tessera_num_requests_waiting)" \
      "$(metric tessera_kv_cache_pages_used)" "$(metric tessera_http_connections_open)" >>"$OUT/samples.csv"
    sleep "$SAMPLE_S"
  done
}
sample &
SAMPLER=$!

# Cancelling clients (see the header), repeated until DURATION passes.
python3 - "$PORT" "$CANCEL_CLIENTS" "$DURATION" "$OUT/cancel.json" <<'PY' &
import asyncio, json, random, socket, struct, sys, time
port, n, duration, out = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
stats = {"opened": 0, "dropped_before_output": 0, "dropped_mid_stream": 0, "finished_before_drop": 0,
         "statuses": {}, "errors": {}}
body = json.dumps({"prompt": "Tell me a fortune.", "max_tokens": 256, "ignore_eos": True, "stream": True})
req = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
       f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
async def client(seed):
    rnd = random.Random(seed)
    end = time.monotonic() + duration
    while time.monotonic() < end:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            stats["opened"] += 1
            w.write(req); await w.drain()
            # Half drop after a random 0.2-4 s (mostly still queued), half after their second chunk
            # of output (mid-stream; waiting up to 5 minutes for it).
            mid = rnd.random() < 0.5
            drop_at = time.monotonic() + (300 if mid else rnd.uniform(0.2, 4.0))
            got = b""
            while time.monotonic() < drop_at and not (mid and got.count(b"data: {") >= 2):
                try:
                    chunk = await asyncio.wait_for(r.read(65536), timeout=max(0.01, drop_at - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                if not chunk:
                    break
                got += chunk
            status = got[9:12].decode() if got.startswith(b"HTTP/1.1 ") else "none"
            stats["statuses"][status] = stats["statuses"].get(status, 0) + 1
            if b"[DONE]" in got: stats["finished_before_drop"] += 1
            elif b"data: {" in got: stats["dropped_mid_stream"] += 1
            else: stats["dropped_before_output"] += 1
            sock = w.get_extra_info("socket")
            if rnd.random() < 0.5 and sock is not None:  # RST instead of FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.close()
        except Exception as e:
            k = type(e).__name__
            stats["errors"][k] = stats["errors"].get(k, 0) + 1
            await asyncio.sleep(0.5)
async def main():
    await asyncio.gather(*(client(i) for i in range(n)))
asyncio.run(main())
json.dump(stats, open(out, "w"), indent=1)
PY
CANCELLER=$!

# Streaming clients, back to back: bench rounds of CLIENTS requests at once until DURATION passes.
END=$(( $(date +%s) + DURATION ))
ROUND=0
while [ "$(date +%s)" -lt "$END" ]; do
  ROUND=$((ROUND + 1))
  "$BIN" bench --port "$PORT" --concurrency "$CLIENTS" --num-prompts "$CLIENTS" --input-len "$INPUT_LEN" \
    --output-len "$OUTPUT_LEN" --threads 2 --timeout 900 --seed "$ROUND" --extra-body "$EXTRA_BODY" \
    --json "$OUT/bench$ROUND.json" >"$OUT/bench$ROUND.txt" 2>&1 || echo "soak: bench round $ROUND exited $?"
done
wait $CANCELLER || true
echo "soak: load done after $ROUND bench round(s); ${IDLE_S}s idle"
sleep "$IDLE_S"
kill -TERM $PID
set +e
wait $PID
RC=$?
set -e
wait $SAMPLER 2>/dev/null || true
trap - EXIT
echo "soak: serve exited $RC"

python3 - "$OUT" "$RC" <<'PY'
import csv, glob, json, sys
out, rc = sys.argv[1], sys.argv[2]
done = failed = 0; by_status = {}; errors = {}; dur = 0.0; tok = 0
for f in sorted(glob.glob(out + "/bench*.json")):
    b = json.load(open(f))
    done += b["completed"]; failed += b["failed"]; dur += b["duration_s"]; tok += b["total_output_tokens"]
    for k, v in (b.get("failures_by_status") or {}).items(): by_status[k] = by_status.get(k, 0) + v
    for k, v in (b.get("errors") or {}).items(): errors[k] = errors.get(k, 0) + v
c = json.load(open(out + "/cancel.json"))
rows = list(csv.DictReader(open(out + "/samples.csv")))
def curve(k):
    v = [float(r[k]) for r in rows if float(r[k]) >= 0]
    return f"start {v[0]:.0f}, peak {max(v):.0f}, end {v[-1]:.0f}" if v else "none"
# Warm-up: the first sample after a third of the run; growth after it is what a leak shows.
third = [r for r in rows if float(r["t_s"]) >= float(rows[-1]["t_s"]) / 3]
health_bad = sum(1 for r in rows if r["health"] != "200")
lines = sum(1 for _ in open(out + "/access.log"))
print(f"bench: {done} completed, {failed} failed {by_status} {errors}, {tok} output tokens in {dur:.0f} s")
print(f"cancelling clients: {c['opened']} streams opened; dropped before output {c['dropped_before_output']}, "
      f"mid-stream {c['dropped_mid_stream']}, finished first {c['finished_before_drop']}; statuses {c['statuses']}; "
      f"client errors {c['errors']}")
print(f"RSS KiB: {curve('rss_kib')}; after warm-up {third[0]['rss_kib'] if third else '-'} -> {rows[-1]['rss_kib']}")
print(f"fds: {curve('fds')}; threads: {curve('threads')}")
print(f"connections open: {curve('connections_open')}; KV pages used: {curve('kv_pages_used')}; "
      f"waiting: {curve('waiting')}")
print(f"/health: {len(rows) - health_bad} of {len(rows)} samples 200 ({health_bad} not, the last being after SIGTERM)")
print(f"access log lines: {lines}; serve exit code {rc}")
PY

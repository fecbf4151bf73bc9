#!/usr/bin/env bash
# Device-side, one call (after `ninja -C build tessera` in a CUDA build and
# `GPU_BUNDLE_BINS=tessera bash scripts/gpu_bundle.sh build build-data/gpu-bundle/serve.tar.xz` here, which
# packs the tessera binary and the Qwen3 tokenizer; carry ["build-data/gpu-bundle/serve.tar.xz"] and set
# STRUCT_CALL_BUNDLE=build-data/gpu-bundle/serve.tar.xz: with the test binaries too the pack and the
# working tree pass the device tool's 64 MiB):
# the end-to-end cost of structured output (issue 30). `tessera serve` of Qwen3-30B-A3B with dummy weights,
# driven by `tessera bench` with and without a response_format json_schema:
#  - autoregressive decode at STRUCT_CALL_CONCURRENCY (default "1 64") concurrent requests: output tok/s,
#    median TPOT and their ratio (the issue's bound: the schema costs <= 10% of throughput);
#  - the same config served as a block-diffusion model (--diffusion, SDAR-style, 32-token blocks), static
#    and threshold policies: tokens per forward from the server's /metrics, with and without the schema;
#  - DiffusionGemma 26B-A4B canvases, free and constrained, when the call is early enough to afford them
#    (STRUCT_CALL_DGEMMA_START_BY, 230 s; ~100 s: a constrained canvas takes its logits to the host,
#    ~0.5 s a step; STRUCT_CALL_DGEMMA=0 leaves them out).
# Every request has ignore_eos (the free run makes exactly max_tokens tokens); the schema cannot be
# completed within max_tokens (tools/gpu/structured_call.py, bench_schema, says why), so every constrained
# request ends at max_tokens too and both runs count the same tokens; the summary checks each length.
# A validity check first: one constrained request of a small bounded schema must finish and parse.
# Whole logs, bench JSONs and metric snapshots in $OUT/logs.tar.xz; the table in $OUT/summary.txt.
# Dry run without a GPU: STRUCT_CALL_DEVICE=cpu STRUCT_CALL_TINY=1 STRUCT_CALL_BIN=build
#   STRUCT_CALL_TOKENIZER=build-data/npm/tokenizer-qwen3 STRUCT_CALL_CONCURRENCY="1 4" (a 2-layer model of
#   the same config; STRUCT_CALL_* below set the rest).
set -u
cd "$(dirname "$0")/.."
START=$SECONDS
: "${OUT:=$(mktemp -d)}"
mkdir -p "$OUT"
: >"$OUT/runs.tsv"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
H() { "$PY" tools/gpu/structured_call.py "$@"; }
DEVICE=${STRUCT_CALL_DEVICE:-cuda}
CONFIG=${STRUCT_CALL_CONFIG:-tests/data/configs/qwen3-30b-a3b}
CONC=${STRUCT_CALL_CONCURRENCY:-1 64}
IN=${STRUCT_CALL_INPUT_LEN:-128}
OUTLEN=${STRUCT_CALL_OUTPUT_LEN:-256}
C1_PROMPTS=${STRUCT_CALL_C1_PROMPTS:-8}  # requests at concurrency 1; 2 C above
# Greedy, as `tessera bench` and the serving rows of docs/PERFORMANCE.md: a sampled constrained row is
# drawn on the host, ~1-3 ms a 152K row at temperature > 0 (STRUCT_CALL_TEMPERATURE=1 shows it).
TEMP=${STRUCT_CALL_TEMPERATURE:-0}
DIFF=${STRUCT_CALL_DIFFUSION:-1}  # STRUCT_CALL_AR=0 leaves the autoregressive server out (diffusion rows only)
DCONC=${STRUCT_CALL_DIFFUSION_CONCURRENCY:-8}
DIN=${STRUCT_CALL_DIFFUSION_INPUT_LEN:-256}   # whole blocks: the output starts on a block boundary
DOUT=${STRUCT_CALL_DIFFUSION_OUTPUT_LEN:-128}
DBLOCK=32
DSTEPS=${STRUCT_CALL_DIFFUSION_STEPS:-8}
DTHRESHOLD=${STRUCT_CALL_DIFFUSION_THRESHOLD:-0.9}
DGEMMA=${STRUCT_CALL_DGEMMA:-1}
BUDGET=${STRUCT_CALL_BUDGET_S:-330}  # no new bench pair after this many seconds (a server start: 60 s less)
DGEMMA_START_BY=${STRUCT_CALL_DGEMMA_START_BY:-230}
BENCH_TIMEOUT=${STRUCT_CALL_BENCH_TIMEOUT:-150}
TINY=""
[ "${STRUCT_CALL_TINY:-0}" = 1 ] && TINY=--tiny
log() { echo "== $(( SECONDS - START ))s $*" | tee -a "$OUT/summary.txt"; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$OUT/summary.txt"

# Binaries: the bundle's (tessera, its libraries, tokenizer-qwen3/), or STRUCT_CALL_BIN's.
if [ -n "${STRUCT_CALL_BIN:-}" ]; then
  BIN=$STRUCT_CALL_BIN
else
  BIN=$(mktemp -d)
  xz -dc "${STRUCT_CALL_BUNDLE:-build-data/gpu-bundle/bundle.tar.xz}" | tar -C "$BIN" -xf - || { log "no bundle"; exit 1; }
fi
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TESSERA=$BIN/tessera
TOK=${STRUCT_CALL_TOKENIZER:-$BIN/tokenizer-qwen3}
[ -x "$TESSERA" ] || { log "no tessera binary in $BIN: ninja -C build tessera, then bash scripts/gpu_bundle.sh build"; exit 1; }
[ -f "$TOK/tokenizer.json" ] || { log "no Qwen3 tokenizer at $TOK (scripts/fetch_test_data.sh, then the bundle)"; exit 1; }

SERVER=""
URL=""
stop_server() {
  [ -n "$SERVER" ] || return 0
  kill -TERM "$SERVER" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$SERVER" 2>/dev/null
  wait "$SERVER" 2>/dev/null
  SERVER=""
}
# The device tool returns at most 8 files from $OUT, and a call leaves ~50 (logs, bench JSONs, metric
# snapshots, model dirs): all but summary.txt go into $OUT/logs.tar.xz (STRUCT_CALL_PACK=0 leaves them).
pack_out() {
  [ "${STRUCT_CALL_PACK:-1}" = 1 ] || return 0
  local t
  t=$(mktemp /tmp/struct_out.XXXXXX) || return 0
  (cd "$OUT" && ls -A | grep -vx -e summary.txt -e logs.tar.xz | tar -cJf "$t" -T - --remove-files) &&
    mv "$t" "$OUT/logs.tar.xz"
}
cleanup() {
  stop_server
  [ -n "${STRUCT_CALL_BIN:-}" ] || rm -rf "$BIN"  # the unpacked bundle
  pack_out
}
trap cleanup EXIT
# start_server NAME FLAGS...: serve with dummy weights on a free port; URL once /health says ready.
start_server() {
  local name=$1 port="" t0=$SECONDS
  shift
  timeout "${STRUCT_CALL_SERVE_TIMEOUT:-560}" "$TESSERA" serve --device "$DEVICE" --load-format dummy --tokenizer "$TOK" \
    --port 0 --access-log '' "$@" >"$OUT/serve_$name.out" 2>"$OUT/serve_$name.log" &
  SERVER=$!
  for _ in $(seq 1 300); do
    port=$(sed -n 's|^tessera: listening on http://[^:]*:\([0-9]*\).*|\1|p' "$OUT/serve_$name.out" | head -1)
    [ -n "$port" ] || ! kill -0 "$SERVER" 2>/dev/null && break
    sleep 0.2
  done
  URL=http://127.0.0.1:$port
  if [ -z "$port" ] || ! H wait "$URL" "${STRUCT_CALL_READY_S:-240}" "$SERVER"; then
    log "$name: serve did not become ready"; tail -20 "$OUT/serve_$name.log"; stop_server; return 1
  fi
  log "$name: ready in $(( SECONDS - t0 )) s: $(grep -E 'made .* dummy|engine:' "$OUT/serve_$name.log" | sed 's/^\[[^]]*\] \[info\] //' | tr '\n' ' ')"
}
# bench TAG C N IN OUT EXTRA_BODY [bench flags...]: one `tessera bench` run, JSON in bench_TAG.json. Each
# run has its own seed (its prompts), so that no run hits the prefix cache of another.
SEED=1000
bench() {
  local tag=$1 c=$2 n=$3 in=$4 out=$5 extra=$6 seed=$(( SEED += 1 ))
  shift 6
  local eb=()
  [ "$extra" = "{}" ] || eb=(--extra-body "$extra")
  timeout "$BENCH_TIMEOUT" "$TESSERA" bench --base-url "$URL" --endpoint completions --vocab-size 150000 \
    --num-prompts "$n" --concurrency "$c" --input-len "$in" --output-len "$out" --seed "$seed" --timeout 120 \
    "${eb[@]}" "$@" --json "$OUT/bench_$tag.json" >"$OUT/bench_$tag.txt" 2>&1
  local rc=$?
  [ $rc = 0 ] || log "bench $tag: rc $rc ($(tail -2 "$OUT/bench_$tag.txt" | tr '\n' ' '))"
  return $rc
}
# over_budget WHAT [LIMIT_S]: true (and says so) once the call has run LIMIT_S (default BUDGET) seconds.
over_budget() {
  local limit=${2:-$BUDGET}
  [ $(( SECONDS - START )) -ge "$limit" ] && log "skipping $1: past ${limit} s of the call"
}

H schema "$OUTLEN" "$OUT/schema_ar.json"
AR_JSON=$(H extra-body "$OUT/schema_ar.json")

# Autoregressive.
H model-dir "$CONFIG" "$OUT/model_ar" $TINY
if [ "${STRUCT_CALL_AR:-1}" = 1 ] && start_server ar --model "$OUT/model_ar" --max-model-len 4096 --max-num-seqs 64; then
  H check "$URL" 1024 | tee -a "$OUT/summary.txt"
  H check "$URL" 1024 '{"temperature": 1, "seed": 7}' | tee -a "$OUT/summary.txt"
  for c in $CONC; do
    over_budget "autoregressive C=$c" && break
    n=$(( c == 1 ? C1_PROMPTS : 2 * c ))
    # Warm-up at this concurrency in both modes (CUDA graphs of these batch shapes, the grammar's masks).
    bench warm_free_c$c "$c" "$c" "$IN" 32 '{}' --temperature "$TEMP"
    bench warm_json_c$c "$c" "$c" "$IN" 32 "$AR_JSON" --temperature "$TEMP"
    for mode in free json; do
      eb='{}'
      [ $mode = json ] && eb=$AR_JSON
      bench ar_${mode}_c$c "$c" "$n" "$IN" "$OUTLEN" "$eb" --temperature "$TEMP"
      printf 'ar\t%s\t%s\t%s\t%s\t0\t%s\n' "ar_${mode}_c$c" $mode "$c" "$OUTLEN" \
        "autoregressive $(basename "$CONFIG"), $IN in / $OUTLEN out, temperature $TEMP" >>"$OUT/runs.tsv"
      log "ar $mode C=$c: $(grep -E 'Output token throughput' "$OUT/bench_ar_${mode}_c$c.txt" | tr -s ' ')"
    done
  done
  stop_server
fi

# diffusion_runs NAME LABEL C N IN OUT BLOCK POLICY_BODY WARM [bench flags...]: free then json (the
# schema sized for OUT tokens), each between two /metrics snapshots (the tokens-per-forward histogram's
# change is that run's requests), after a warm-up of one block a request in json mode when WARM is 1.
diffusion_runs() {
  local name=$1 label=$2 c=$3 n=$4 in=$5 out=$6 block=$7 policy=$8 warm=$9
  shift 9
  local js
  H schema "$out" "$OUT/schema_$name.json"
  js=$(H extra-body "$OUT/schema_$name.json" "$policy")
  [ "$warm" = 1 ] && bench warm_${name} "$c" "$c" "$in" "$block" "$js" "$@"
  for mode in free json; do
    local tag=diff_${name}_$mode eb=$policy
    [ $mode = json ] && eb=$js
    H metrics "$URL" "$OUT/metrics_${tag}_before.txt"
    bench "$tag" "$c" "$n" "$in" "$out" "$eb" "$@"
    H metrics "$URL" "$OUT/metrics_${tag}_after.txt"
    printf 'diffusion\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" $mode "$c" "$out" "$block" "$label" >>"$OUT/runs.tsv"
    log "diffusion $name $mode: $(grep -E 'Output token throughput' "$OUT/bench_$tag.txt" | tr -s ' ')"
  done
}

# Block diffusion on the same backbone. The mask token: 151669, the first id past the Qwen3 tokenizer's
# 151,669 (the config's vocabulary is 151,936): no text token doubles as the mask.
if [ "$DIFF" = 1 ] && ! over_budget diffusion $(( BUDGET - 60 )); then
  if start_server diffusion --model "$OUT/model_ar" --max-model-len 4096 --max-num-seqs 64 --diffusion \
       --mask-token-id 151669 --diffusion-block-size $DBLOCK --diffusion-steps "$DSTEPS" --diffusion-policy static; then
    H check "$URL" 1024 | tee -a "$OUT/summary.txt"
    diffusion_runs static "block $DBLOCK static $DSTEPS steps" "$DCONC" $(( 2 * DCONC )) "$DIN" "$DOUT" $DBLOCK \
      "{\"diffusion\":{\"policy\":\"static\",\"steps\":$DSTEPS}}" 1
    over_budget "diffusion threshold" ||
      diffusion_runs threshold "block $DBLOCK threshold $DTHRESHOLD" "$DCONC" $(( 2 * DCONC )) "$DIN" "$DOUT" $DBLOCK \
        "{\"diffusion\":{\"policy\":\"threshold\",\"threshold\":$DTHRESHOLD}}" 1
    stop_server
  fi
fi

# DiffusionGemma canvases (STRUCT_CALL_DGEMMA=0 leaves them out). Its tokenizer is not in the test data: the Qwen3 one stands in, with
# the config's eos ids set to Qwen3's (the published [1, 106, 50] are '"', 'S' and a byte there, which a
# constrained request could then not write). The canvas sampler takes temperature 1 only.
if [ "$DGEMMA" = 1 ] && ! over_budget DiffusionGemma "$DGEMMA_START_BY"; then
  H model-dir "${STRUCT_CALL_DGEMMA_CONFIG:-tests/data/configs/diffusiongemma-26b-a4b-it}" "$OUT/model_dgemma" $TINY \
    --eos 151645,151643
  canvas=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['canvas_length'])" "$OUT/model_dgemma/config.json")
  if start_server dgemma --model "$OUT/model_dgemma" --max-model-len 4096 --max-num-seqs 8; then
    # No warm-up (a constrained canvas is slow): the check has built the grammar's vocabulary. At least
    # 512 tokens (2 canvases of the published config; more of a tiny one) for the bounded schema.
    H check "$URL" $(( 2 * canvas > 512 ? 2 * canvas : 512 )) '{"temperature": 1}' 200 | tee -a "$OUT/summary.txt"
    diffusion_runs dgemma "dgemma canvas $canvas" 1 "${STRUCT_CALL_DGEMMA_PROMPTS:-1}" "$DIN" "$canvas" "$canvas" '{}' 0 \
      --temperature 1
    stop_server
  fi
fi

log "summary ($OUT)"
H summary "$OUT"
log "done"

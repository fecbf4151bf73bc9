#!/usr/bin/env bash
# Device-side, one call (issue 35: the CPU backend on the GPU machine's 16 cores): carry
# ["build-data/gpu-bundle", "build-data/cpu-bench-pack"], where cpu-bench-pack/cpu-bench.tar.xz packs
# model_bench (this tree), model_bench_base (the binary to compare against; model_bench_prev, if
# present, a second one) and make_random_model,
# all built here (stripped); the
# shared libraries come from the GPU bundle's lib/. Makes the mid-size random model of
# docs/PERFORMANCE.md, then decode and prefill rows at 1-16 threads for both binaries, alternating.
# CPU_CALL_QUANT="none int4 int8 fp8" instead runs model_bench (and model_bench_base, if packed) once per
# weight format (--quantization), two rounds. CPU_CALL_MODEL="--hidden 2048 --layers 16 ..." makes that random model
# instead of the mid-size one (make_random_model's flags; e.g. Qwen3-30B-A3B's layer shapes:
# --hidden 2048 --experts 128 --moe-inter 768 --heads 32 --kv-heads 4 --head-dim 128 --vocab 151936
# --layers 16, ~21 GB: the host's 64 GB disk holds no 48-layer copy); CPU_CALL_ARGS adds model_bench
# flags (e.g. --profile).
set -u
cd "$(dirname "$0")/.."
P=$(mktemp -d)
LIBS=build-data/gpu-bundle/bundle.tar.xz; [ -f $LIBS ] || LIBS=build-data/gpu-bench/bundle.tar.xz  # either pack has lib/
xz -dc $LIBS | tar -C "$P" -xf -
export LD_LIBRARY_PATH=$P/lib
B=$(mktemp -d); xz -dc build-data/cpu-bench-pack/cpu-bench.tar.xz | tar -C "$B" -xf -
lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node|L3" ; nproc; uptime
M=/tmp/tessera-bench-mid
[ -n "${CPU_CALL_MODEL:-}" ] && M=/tmp/tessera-bench-$(echo "$CPU_CALL_MODEL" | md5sum | cut -c1-8)
# shellcheck disable=SC2086  # the model flags are words
[ -d $M ] || $B/make_random_model --out $M ${CPU_CALL_MODEL:-} >/dev/null 2>&1 || echo "make_random_model failed"
THREADS=${CPU_CALL_THREADS:-1,2,4,8,16}
if [ -n "${CPU_CALL_QUANT:-}" ]; then
  for round in 1 2; do
    for q in $CPU_CALL_QUANT; do
      for b in model_bench_base model_bench; do
        [ -x "$B/$b" ] || continue
        echo "== $b $q round $round"
        timeout 200 $B/$b --model $M --threads $THREADS --prompt 256 --decode 32 --reps 2 --quantization $q ${CPU_CALL_ARGS:-} 2>&1 |
          grep -E "^ *[0-9]+ \||weights|decode step|by op" | tee -a "$OUT/cpu_quant_${b}_$q.txt"
      done
    done
  done
  exit 0
fi
for round in 1 2; do
  for b in model_bench_base model_bench_prev model_bench; do
    [ -x "$B/$b" ] || continue
    echo "== $b round $round"
    timeout 200 $B/$b --model $M --threads $THREADS --prompt 256 --decode 32 --reps 2 ${CPU_CALL_ARGS:-} 2>&1 | grep -E "^ *[0-9]+ \||weights|decode step" | tee -a "$OUT/cpu_${b}.txt"
  done
done

#!/usr/bin/env bash
# Device-side, one call: where one decode step's time goes, kernel by kernel. For each format of
# STEP_FORMATS (default "int4 bf16"; bf16 = unquantized), ncu times every kernel of one timed step of
# the CudaBench batch-1 decode row (Qwen3-30B-A3B, dummy weights, ctx STEP_CONTEXT [1024]), alone and
# with the caches left as the step leaves them (--cache-control none, clocks untouched), and prints
# the step's kernels grouped by name (total us, calls, us a call, grid) and the plain row's step time:
# their sum against the step shows what launch gaps and overlap add. TESSERA_CUDA_PROFILER_RANGE=1
# limits ncu to the row's timed steps (cuda_backend.cpp).
# Pack: GPU_BUNDLE_BINS=test_backend bash scripts/gpu_bundle.sh build build-data/DIR/bundle.tar.xz;
# carry build-data/DIR; STEP_PACK names the pack (default build-data/gpu-bundle/bundle.tar.xz).
# Output: $OUT/ncu_<format>.csv (ncu's rows), the tables on stdout.
set -u
cd "$(dirname "$0")/.."
: "${OUT:=$(mktemp -d)}"
P=$(mktemp -d)
xz -dc "${STEP_PACK:-build-data/gpu-bundle/bundle.tar.xz}" | tar -C "$P" -xf -
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
row() {  # row <format> <steps> <seconds> [prefix command...]: the decode row alone (no other rows)
  local q=$1 steps=$2 limit=$3; shift 3; [ "$q" = bf16 ] && q=""
  env TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/qwen3-30b-a3b TESSERA_CUDA_BENCH_QUANT=$q \
    TESSERA_CUDA_BENCH_CONTEXTS=${STEP_CONTEXT:-1024} TESSERA_CUDA_BENCH_BATCHES=, TESSERA_CUDA_BENCH_PREFILL=0 \
    TESSERA_CUDA_BENCH_DENOISE_BATCH=0 TESSERA_CUDA_BENCH_DECODE="$steps" timeout "$limit" "$@" \
    "$P/test_backend" --gtest_filter=CudaBench.DummyDecodeAndPrefill
}
for q in ${STEP_FORMATS:-int4 bf16}; do
  echo "== $q"
  row "$q" 32 120 2>&1 | grep "^bench-row" | grep decode
  export TESSERA_CUDA_PROFILER_RANGE=1
  row "$q" 1 200 ncu --clock-control none --cache-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv >"$OUT/ncu_$q.csv" 2>"$OUT/ncu_$q.err"
  echo "ncu rc=$?"
  unset TESSERA_CUDA_PROFILER_RANGE
  python3 - "$OUT/ncu_$q.csv" <<'PY'
import collections, csv, re, sys
lines = open(sys.argv[1]).read().splitlines()
head = [i for i, l in enumerate(lines) if l.startswith('"ID"')]
if not head:
    sys.exit("no ncu rows (see the .err file)")
rows = list(csv.reader(lines[head[0]:]))
h = rows[0]
name_at, value_at, grid_at = h.index("Kernel Name"), h.index("Metric Value"), h.index("Grid Size")
kernels = []
for r in rows[1:]:
    if len(r) <= value_at:
        continue
    name = re.sub(r"\(.*", "", re.sub(r"^void ", "", r[name_at])).replace("unnamed>::", "")
    kernels.append((name, float(r[value_at].replace(",", "")) / 1e3, r[grid_at]))
# The timed range holds whole forwards; each starts with the token embedding: keep the last one.
starts = [i for i, k in enumerate(kernels) if k[0].startswith("EmbeddingKernel")]
step = kernels[starts[-1]:] if starts else kernels
print(f"one step: {len(step)} kernels, {sum(k[1] for k in step):.1f} us timed alone")
by = collections.defaultdict(lambda: [0.0, 0, set()])
for name, us, grid in step:
    by[name][0] += us; by[name][1] += 1; by[name][2].add(grid)
for name, (us, n, grids) in sorted(by.items(), key=lambda kv: -kv[1][0]):
    print(f"{us:9.1f} us {n:5d} x {us / n:7.2f}  {name[:80]}  grid {' '.join(sorted(grids))[:40]}")
PY
done

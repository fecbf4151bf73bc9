#!/usr/bin/env bash
# tessera: run the libFuzzer targets of fuzz/ (docs/RELIABILITY.md, "Fuzzing").
#
#   bash scripts/fuzz.sh [--build DIR] [--seconds N] [--regress] [--make] [targets...]
#
# Without --regress: fuzzes each target for N seconds (default 60), one after the other on one
# core, starting from its seed corpus fuzz/corpus/<target>/; new inputs go to a scratch corpus
# (under $TMPDIR), never into the repository unless you copy them there.
# With --regress (CI): runs every input of each target's corpus once, then fuzzes N seconds
# (default 5); fails on any crash, leak, timeout or sanitizer report.
# Targets default to all of fuzz/*_fuzz.cpp. The build directory (default build-fuzz, or
# $TESSERA_FUZZ_BUILD_DIR) must be configured with clang and -DTESSERA_FUZZ=ON; nothing is built
# unless --make is given (then `ninja -j1 fuzz_<target>`, niced). A summary table ends the run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TESSERA_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds=""
regress=0
make=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --regress) regress=1; shift ;;
    --make) make=1; shift ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ -n "$seconds" ]] || seconds=$([[ $regress == 1 ]] && echo 5 || echo 60)
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$root"/fuzz/*_fuzz.cpp; do
    n="$(basename "$f")"
    targets+=("${n%_fuzz.cpp}")
  done
fi

if [[ $make == 1 ]]; then
  [[ -f "$build/build.ninja" ]] || {
    echo "fuzz.sh: $build is not a configured build; first run:" >&2
    echo "  CC=clang CXX=clang++ cmake -S $root -B $build -G Ninja -DTESSERA_SANITIZE=ON -DTESSERA_FUZZ=ON -DTESSERA_TESTS=OFF -DTESSERA_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" >&2
    exit 2
  }
  nice -n 19 ninja -C "$build" -j1 "${targets[@]/#/fuzz_}"
fi
missing=()
for t in "${targets[@]}"; do
  [[ -x "$build/fuzz/fuzz_$t" ]] || missing+=("fuzz_$t")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "fuzz.sh: $build lacks ${missing[*]}." >&2
  echo "  Configure a clang build with fuzzers and build them (or pass --make):" >&2
  echo "  CC=clang CXX=clang++ cmake -S $root -B $build -G Ninja -DTESSERA_SANITIZE=ON -DTESSERA_FUZZ=ON -DTESSERA_TESTS=OFF -DTESSERA_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" >&2
  echo "  nice ninja -C $build -j1 ${missing[*]}" >&2
  exit 2
fi

# Per-target options: inputs kept small where one input is a whole file (a tokenizer.json).
max_len_of() {
  case "$1" in
    tokenizer) echo 12000 ;;
    *) echo 4096 ;;
  esac
}

scratch="$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz.XXXXXX")"
echo "fuzz.sh: logs, scratch corpora and crash artifacts in $scratch"
summary=()
failed=0
for t in "${targets[@]}"; do
  bin="$build/fuzz/fuzz_$t"
  corpus="$root/fuzz/corpus/$t"
  dict="$root/fuzz/dict/$t.dict"
  work="$scratch/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  opts=(-max_len="$(max_len_of "$t")" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$work/artifacts/")
  [[ -f "$dict" ]] && opts+=(-dict="$dict")
  status=ok
  if [[ $regress == 1 && -d "$corpus" ]]; then
    # Each corpus input once (-runs=0 over the directory): a fixed crash's input stays fixed.
    echo "== $t: corpus regression ($(ls "$corpus" | wc -l) inputs)"
    if ! "$bin" "${opts[@]}" -runs=0 "$corpus" > "$work/regress.log" 2>&1; then
      status=FAIL; failed=1
      tail -40 "$work/regress.log"
    fi
  fi
  if [[ $status == ok && "$seconds" != 0 ]]; then
    echo "== $t: fuzzing ${seconds}s"
    seeds=()
    [[ -d "$corpus" ]] && seeds+=("$corpus")
    if ! "$bin" "${opts[@]}" -max_total_time="$seconds" "$work/corpus" "${seeds[@]}" > "$work/fuzz.log" 2>&1; then
      status=FAIL; failed=1
      tail -40 "$work/fuzz.log"
    fi
  fi
  log="$work/fuzz.log"
  [[ -f "$log" ]] || log="$work/regress.log"
  # libFuzzer's last status line ("#123 DONE cov: 456 ft: 789 corp: ... exec/s: 10 ...") and its
  # final stats give the numbers of the table.
  last="$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1 || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  eps="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")"
  summary+=("$(printf '%-16s %-5s %10s %8s %8s %8s' "$t" "$status" "${execs:--}" "${eps:--}" "${cov:--}" "${ft:--}")")
  ls "$work/artifacts" | sed "s|^|   artifact: $work/artifacts/|"
done

echo
printf '%-16s %-5s %10s %8s %8s %8s\n' target status execs exec/s cov ft
printf '%s\n' "${summary[@]}"
exit $failed

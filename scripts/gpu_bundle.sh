#!/usr/bin/env bash
# tessera: packs the GPU check's binaries, built on this machine, for a GPU machine that should not
# spend its time compiling (scripts/gpu_check.sh takes the pack through GPU_CHECK_BUNDLE).
#   bash scripts/gpu_bundle.sh [BUILD_DIR] [OUT_FILE]
# BUILD_DIR (default build-cuda-tp) must be a TESSERA_CUDA=ON build; its test_backend and test_engine
# (and test_model, bench's cuda_launch_chain, the tessera CLI when built) go into OUT_FILE (default
# build-data/gpu-bundle/bundle.tar.xz) with the shared libraries they load from this machine's Debian
# packages (spdlog, fmt, ...), and the Qwen3 tokenizer of build-data/npm (scripts/fetch_test_data.sh) as
# tokenizer-qwen3/ when fetched: `tessera serve` of a full-size config with dummy weights needs a real
# tokenizer (tools/gpu_structured_call.sh), and build-data does not travel to the GPU machine. Left
# out: the C and C++ runtimes, which every Linux machine has, and the CUDA toolkit's libraries
# (cuBLASLt alone is ~0.5 GB), which the GPU machine has in /usr/local/cuda. The pack must stay
# under the device tool's 64 MiB of carried files.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build-cuda-tp}
OUT_FILE=${2:-$ROOT/build-data/gpu-bundle/bundle.tar.xz}
# GPU_BUNDLE_BINS="tessera ..." packs those only (each must be built): the carried files and the
# working tree together must stay under 64 MiB, the tree alone is ~39 MB, and every binary holds its
# own copy of the CUDA kernels (~9 MiB packed).
bins=()
if [ -n "${GPU_BUNDLE_BINS:-}" ]; then
  for b in $GPU_BUNDLE_BINS; do
    [ -x "$BUILD/$b" ] || { echo "gpu_bundle: $BUILD/$b is missing (ninja -C $BUILD $b)" >&2; exit 1; }
    bins+=("$BUILD/$b")
  done
else
  for b in test_backend test_engine test_model cuda_launch_chain tessera; do
    [ -x "$BUILD/$b" ] && bins+=("$BUILD/$b")
  done
  for b in test_backend test_engine; do
    [ -x "$BUILD/$b" ] || { echo "gpu_bundle: $BUILD/$b is missing (ninja -C $BUILD $b)" >&2; exit 1; }
  done
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
cp "${bins[@]}" "$stage/"
# The runtimes every machine has, and the toolkit's libraries the GPU machine has.
base='^(linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|librt\.so|libpthread|libdl\.so)'
for b in "${bins[@]}"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    if [[ $name =~ $base ]] || [[ $path == /usr/local/cuda* ]]; then continue; fi
    [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
  done
done
tok=$ROOT/build-data/npm/tokenizer-qwen3
if [ -f "$tok/tokenizer.json" ]; then
  mkdir -p "$stage/tokenizer-qwen3"
  cp "$tok"/tokenizer*.json "$stage/tokenizer-qwen3/"
fi
mkdir -p "$(dirname "$OUT_FILE")"
tar -C "$stage" -cf - . | xz -T2 -6 >"$OUT_FILE"
size=$(stat -c %s "$OUT_FILE")
echo "gpu_bundle: $OUT_FILE ($((size / 1024 / 1024)) MiB): $(cd "$stage" && ls | tr '\n' ' ')(lib/: $(ls "$stage/lib" | tr '\n' ' '))"
if [ "$size" -ge $((60 * 1024 * 1024)) ]; then
  echo "gpu_bundle: over 60 MiB, too close to the device tool's 64 MiB of carried files" >&2
  exit 1
fi

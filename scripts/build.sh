#!/usr/bin/env bash
# Configures and builds tessera. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# BUILD_DIR defaults to build/. Uses Ninja when present, all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"

#!/usr/bin/env bash
# README's first command: installs what tessera needs (Debian packages), builds it, and serves the
# built-in demo model (models/demo: a small trained block-diffusion MoE that chats and calls tools)
# on http://127.0.0.1:8000 -- the chat page at /, the OpenAI API under /v1.
# Arguments: `tessera serve` flags (e.g. --port 9000 --api-key KEY; they are the only ones passed, so
# serve's own defaults and --config files apply as for `tessera serve`), or a whole other command
# (e.g. `bash scripts/run.sh generate --chat "Who are you?"`).
# TESSERA_BUILD_DIR (default build/): the build directory. One that exists is only brought up to date
# for the `tessera` binary, keeping its options (a test build stays a test build); a new one is
# configured without tests and benchmarks, the quickest first build.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TESSERA_BUILD_DIR:-build}
# Their progress goes to stderr: stdout is the command's own (`generate --output-ids`, `inspect --json`).
{
  bash scripts/install_deps.sh --no-test-deps
  if [ -f "$dir/CMakeCache.txt" ]; then
    cmake --build "$dir" --target tessera -j"$(nproc)"
  else
    bash scripts/build.sh "$dir" -DTESSERA_TESTS=OFF -DTESSERA_BENCH=OFF
  fi
} >&2
case "${1:-}" in
  generate|logits|tokenize|detokenize|render|inspect|verify|serve|bench) exec "$dir/tessera" "$@" ;;
esac
echo "tessera: serving the demo model; open the address of the 'listening on' line below (Ctrl-C stops)" >&2
exec "$dir/tessera" serve "$@"

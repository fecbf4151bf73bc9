#!/usr/bin/env bash
# README's first command: installs what tessera needs (Debian packages), builds it, and serves the
# built-in demo model (models/demo: a small trained block-diffusion MoE that chats and calls tools)
# on http://127.0.0.1:8000 -- the chat page at /, the OpenAI API under /v1.
# Arguments: `tessera serve` flags (e.g. --port 9000 --api-key KEY), or a whole other command
# (e.g. `bash scripts/run.sh generate --chat "Who are you?"`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --no-test-deps
bash scripts/build.sh build -DTESSERA_TESTS=OFF -DTESSERA_BENCH=OFF
case "${1:-}" in
  generate|logits|tokenize|detokenize|render|inspect|verify|serve|bench) exec build/tessera "$@" ;;
esac
echo "tessera: serving the demo model; open http://127.0.0.1:${TESSERA_PORT:-8000}/ (Ctrl-C stops)" >&2
exec build/tessera serve --port "${TESSERA_PORT:-8000}" "$@"

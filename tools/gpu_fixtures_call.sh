#!/usr/bin/env bash
# Device-side, one call (run with no carry: `bash tools/gpu_fixtures_call.sh`): the DiffusionGemma fixtures (tools/dgemma_fixtures) and the quantized
# fixtures' transformers float64 references (tools/quant_fixtures). Results under $OUT.
set -u
cd "$(dirname "$0")/.."
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
mkdir -p /tmp/dg /tmp/qf
PYTHONUNBUFFERED=1 timeout 280 python3 tools/dgemma_fixtures/make_dgemma_fixtures.py /tmp/dg 2>&1 | grep -v Warning | tail -60
tar czf "$OUT/dgemma_fixtures.tgz" -C /tmp/dg .
PYTHONUNBUFFERED=1 timeout 250 python3 tools/quant_fixtures/make_quant_fixtures.py . /tmp/qf 2>&1 | grep -v Warning | tail -40
tar czf "$OUT/quant_fixtures.tgz" -C /tmp/qf .
ls -la "$OUT"

#!/usr/bin/env bash
# Device-side: dumps transformers' sources that tessera's DiffusionGemma / quantization work reads, and
# makes the quantized fixtures (tools/quant_fixtures). Results under $OUT.
set -u
cd "$(dirname "$0")/.."
python3 - <<'PY'
import transformers, os, subprocess
root = os.path.dirname(transformers.__file__)
print("transformers", transformers.__version__)
files = []
for d in ["models/diffusion_gemma", "models/gemma4"]:
    p = os.path.join(root, d)
    if os.path.isdir(p):
        files += [os.path.join(d, f) for f in sorted(os.listdir(p)) if f.endswith(".py")]
out = subprocess.run(["grep", "-rl", "--include=*.py", "-e", "diffusion_gemma", "-e", "DiffusionGemma", root],
                     capture_output=True, text=True).stdout.split()
files += [os.path.relpath(f, root) for f in out if os.path.relpath(f, root) not in files]
print("\n".join(files))
subprocess.run(["tar", "czf", os.environ["OUT"] + "/tf_src.tgz", "-C", root] + files, check=True)
PY
python3 -c "import jsonschema; print('jsonschema', jsonschema.__version__)" 2>&1 | tail -1
mkdir -p /tmp/qf
PYTHONUNBUFFERED=1 timeout 400 python3 tools/quant_fixtures/make_quant_fixtures.py . /tmp/qf 2>&1 | grep -v Warning | tail -40
tar czf "$OUT/quant_fixtures.tgz" -C /tmp/qf .
ls -la "$OUT"

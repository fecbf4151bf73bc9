#!/usr/bin/env bash
# Device-side, one call (after `bash scripts/gpu_bundle.sh build` here; run with carry
# ["build-data/gpu-bundle"]): transformers' DiffusionGemma / Gemma4 sources, then the GPU correctness stage
# of scripts/gpu_check.sh from a bundle, then the quantized kernels' tests (CudaQuant.*).
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
print(len(files), "files")
subprocess.run(["tar", "czf", os.environ["OUT"] + "/tf_src.tgz", "-C", root] + files, check=True)
PY
export GPU_CHECK_BUNDLE=build-data/gpu-bundle/bundle.tar.xz
GPU_CHECK_STAGES="correctness" timeout 330 bash scripts/gpu_check.sh 2>&1 | tail -60
P=$(mktemp -d); xz -dc $GPU_CHECK_BUNDLE | tar -C $P -xf -
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
timeout 150 $P/test_backend --gtest_filter='CudaQuant*:*Quant*' 2>&1 | tee $OUT/cuda_quant.txt | grep -vE "^\[ +(RUN|OK) " | tail -60

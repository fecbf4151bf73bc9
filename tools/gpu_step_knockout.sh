#!/usr/bin/env bash
# Device-side, one call: what each small kernel family costs inside a batch-1 decode step's graph (the
# knockout study of docs/PERFORMANCE.md). For each format of KNOCKOUT_FORMATS (default "int4 bf16"; bf16
# = unquantized), the CudaBench decode row alone (Qwen3-30B-A3B, dummy weights, ctx KNOCKOUT_CONTEXT
# [1024]) with everything, then once per family of KNOCKOUT_FAMILIES with TESSERA_CUDA_SKIP_KERNELS=<family>
# (those kernels are not launched: the results are wrong, the step time is what is read), then with
# everything again (the two bracket the host's drift). A family that decides later work (routing) changes
# that work too: read its row with care. Compare with gpu_step_kernels.sh's ncu table (kernels timed
# alone), which cannot show what PDL and the graph hide.
# Pack: GPU_BUNDLE_BINS=test_backend bash scripts/gpu_bundle.sh build build-data/DIR/bundle.tar.xz;
# carry build-data/DIR; KNOCKOUT_PACK names the pack (default build-data/gpu-bundle/bundle.tar.xz).
set -u
cd "$(dirname "$0")/.."
P=$(mktemp -d)
xz -dc "${KNOCKOUT_PACK:-build-data/gpu-bundle/bundle.tar.xz}" | tar -C "$P" -xf -
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
row() {  # row <format> <family or empty>
  local q=$1; [ "$q" = bf16 ] && q=""
  env TESSERA_CUDA_SKIP_KERNELS="$2" TESSERA_CUDA_BENCH_QUANT=$q TESSERA_CUDA_BENCH_CONFIG=tests/data/configs/qwen3-30b-a3b \
    TESSERA_CUDA_BENCH_CONTEXTS="${KNOCKOUT_CONTEXT:-1024}" TESSERA_CUDA_BENCH_BATCHES=, TESSERA_CUDA_BENCH_PREFILL=0 \
    TESSERA_CUDA_BENCH_DENOISE_BATCH=0 timeout 120 "$P/test_backend" --gtest_filter=CudaBench.DummyDecodeAndPrefill 2>&1 |
    grep "^bench-row" | grep decode | cut -d'|' -f4 | sed "s/^/$1 without ${2:-nothing}:/"
}
for q in ${KNOCKOUT_FORMATS:-int4 bf16}; do
  row "$q" ""
  for k in ${KNOCKOUT_FAMILIES:-RmsNormVecKernel QkNormRopeKernel DecodeKernel AttentionMergeDimKernel}; do row "$q" "$k"; done
  row "$q" ""
done

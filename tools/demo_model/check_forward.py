"""Compares tessera's block-causal forward with this directory's PyTorch model on a trained checkpoint.

Usage: check_forward.py MODEL_DIR [TESSERA_BINARY]. Runs `tessera logits --block-size B` over a prompt
with a partly masked last block, and the PyTorch model (train.py, float32 from the bf16 weights) over the
same ids with the block-causal mask; prints the relative error and the argmax agreement.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


def main():
    d = sys.argv[1]
    exe = sys.argv[2] if len(sys.argv) > 2 else "build/tessera"
    cfg = json.load(open(os.path.join(d, "config.json")))
    block, mask_id = cfg["block_size"], cfg["mask_token_id"]
    c = {k: cfg[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                             "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "num_experts",
                             "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")}
    model = train.Model(c)
    model.load_hf(train.read_safetensors(os.path.join(d, "model.safetensors")))
    model.eval()
    g = torch.Generator().manual_seed(7)
    T = 2 * block + block // 2 + 5
    ids = torch.randint(0, cfg["vocab_size"] - 8, (T,), generator=g)
    ids[-(block // 2 + 5) + 3:] = mask_id  # the last block: a few given tokens, then masks
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "l.npy")
        subprocess.run([exe, "logits", "--model", d, "--ids", ",".join(map(str, ids.tolist())), "--out", out,
                        "--block-size", str(block)], check=True)
        got = np.load(out)
    blk = torch.arange(T) // block
    mask = blk[None, :] <= blk[:, None]
    with torch.no_grad():
        h, _ = model(ids[None], torch.arange(T), mask)
        ref = model.lm_head(h)[0].numpy()
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    agree = float((got.argmax(-1) == ref.argmax(-1)).mean())
    print(json.dumps({"tokens": T, "block_size": block, "rel_error": float(rel), "argmax_agreement": agree}))
    sys.exit(0 if rel < 1e-3 and agree == 1.0 else 1)


if __name__ == "__main__":
    main()

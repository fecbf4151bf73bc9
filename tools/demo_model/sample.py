"""Greedy block-diffusion decoding of the demo model in PyTorch (a reference for what tessera should print).

Usage: sample.py MODEL_DIR [--chat TEXT | --prompt TEXT] [--tools weather,time,convert,timer]
       [--threshold 0.9] [--max-tokens 64]
Semantics as in tessera's decoder (threshold policy): the prompt fills whole blocks, its last partial
block is completed with masks and denoised first; each step runs [committed prefix + current block]
block-causally and unmasks every masked position whose softmax confidence exceeds the threshold (or the
single most confident one); generation stops after the block in which an eos token appears.
"""
import argparse
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import chat_data  # noqa: E402
import prepare_data  # noqa: E402
import train  # noqa: E402


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    c = {k: cfg[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                             "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "num_experts",
                             "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")}
    m = train.Model(c)
    m.load_hf(train.read_safetensors(os.path.join(d, "model.safetensors")))
    return m.eval(), cfg


@torch.no_grad()
def diffuse(model, cfg, prompt, max_new, threshold):
    B, mask_id, eos = cfg["block_size"], cfg["mask_token_id"], set(cfg["eos_token_id"])
    ids = list(prompt)
    n_prompt = len(ids)
    steps = 0
    while True:
        start = (len(ids) // B) * B
        blk = ids[start:] + [mask_id] * (B - (len(ids) - start))
        while mask_id in blk:
            seq = torch.tensor(ids[:start] + blk)
            T = len(seq)
            b = torch.arange(T) // B
            h, _ = model(seq[None], torch.arange(T), b[None, :] <= b[:, None])
            probs = model.lm_head(h[0, start:]).float().softmax(-1)
            conf, x0 = probs.max(-1)
            masked = torch.tensor([t == mask_id for t in blk])
            conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
            pick = (conf > threshold) & masked
            if not pick.any():
                pick = torch.zeros_like(masked)
                pick[conf.argmax()] = True
            for i in pick.nonzero().flatten().tolist():
                blk[i] = int(x0[i])
            steps += 1
        ids = ids[:start] + blk
        new = ids[n_prompt:]
        if any(t in eos for t in blk[max(0, n_prompt - start):]) or len(new) >= max_new:
            return new, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--chat")
    ap.add_argument("--prompt")
    ap.add_argument("--tools", default="")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--max-tokens", type=int, default=96)
    a = ap.parse_args()
    model, cfg = load(a.model)
    enc = bpe.load(a.model)
    if a.chat is not None:
        render, _ = prepare_data.make_renderer()
        r = random.Random(0)
        tools = [chat_data.TOOL_MAKERS[k](r)[0] for k in a.tools.split(",") if k] or None
        text = render([{"role": "user", "content": a.chat}], tools, add_generation_prompt=True)
    else:
        text = a.prompt
    new, steps = diffuse(model, cfg, enc.encode(text), a.max_tokens, a.threshold)
    eos = set(cfg["eos_token_id"])
    cut = next((i for i, t in enumerate(new) if t in eos), len(new))
    print(json.dumps({"text": enc.decode(new[:cut]), "ids": new, "steps": steps}))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""An independent numpy forward of a qwen3_moe checkpoint with a MoE router temperature.

Written from the Hugging Face Qwen3MoeForCausalLM semantics (transformers' modeling_qwen3_moe), in
float64, sharing no code with tessera: RMSNorm, per-head q/k RMSNorm before rotate-half RoPE, GQA
causal attention, SwiGLU experts behind a softmax router (top-k, renormalised when norm_topk_prob),
dense layers for mlp_only_layers. The router logits are divided by the temperature before the
softmax and the top-k; temperature 1 is the model as trained.

Usage: qwen3_moe_reference.py MODEL_DIR IDS(comma separated) TEMPERATURE OUT_DIR
Writes OUT_DIR/logits.npy (float64, [T, vocab]) and OUT_DIR/routing.json: per layer (null for dense
layers) the chosen experts of every position, in descending router probability.
"""
import json
import os
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        raw = data[begin:end]
        if meta["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif meta["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        else:
            raise SystemExit(f"unsupported dtype {meta['dtype']} for {name}")
        out[name] = arr.astype(np.float64).reshape(meta["shape"])
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, theta):
    # x: [T, heads, dim]; rotate-half over the full head dim.
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    angles = positions[:, None] * inv_freq[None, :]
    emb = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    half = dim // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(cfg, w, ids, temperature):
    T = len(ids)
    H = cfg["hidden_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    k_top = cfg["num_experts_per_tok"]
    dense_layers = set(cfg.get("mlp_only_layers", []))
    positions = np.arange(T, dtype=np.float64)
    h = w["model.embed_tokens.weight"][ids]
    routing = []
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
        q = rope(rms_norm(q, w[p + "self_attn.q_norm.weight"], eps), positions, theta)
        k = rope(rms_norm(k, w[p + "self_attn.k_norm.weight"], eps), positions, theta)
        group = nh // nkv
        attn = np.zeros((T, nh, hd))
        causal = np.triu(np.full((T, T), -np.inf), k=1)
        for head in range(nh):
            kv = head // group
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(hd) + causal
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            attn[:, head, :] = scores @ v[:, kv, :]
        h = h + attn.reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        if layer in dense_layers or cfg.get("num_experts", cfg.get("num_local_experts", 0)) == 0:
            g = x @ w[p + "mlp.gate_proj.weight"].T
            u = x @ w[p + "mlp.up_proj.weight"].T
            h = h + (silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
            routing.append(None)
            continue
        logits = (x @ w[p + "mlp.gate.weight"].T) / temperature
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        # top-k by probability; ties to the lower expert id (a stable sort of the negated values)
        order = np.argsort(-probs, axis=-1, kind="stable")[:, :k_top]
        chosen = np.take_along_axis(probs, order, axis=-1)
        if cfg.get("norm_topk_prob", False):
            chosen = chosen / chosen.sum(axis=-1, keepdims=True)
        out = np.zeros((T, H))
        for t in range(T):
            for j in range(k_top):
                e = order[t, j]
                pe = p + f"mlp.experts.{e}."
                y = silu(x[t] @ w[pe + "gate_proj.weight"].T) * (x[t] @ w[pe + "up_proj.weight"].T)
                out[t] += chosen[t, j] * (y @ w[pe + "down_proj.weight"].T)
        h = h + out
        routing.append(order.tolist())
    h = rms_norm(h, w["model.norm.weight"], eps)
    return h @ w["lm_head.weight"].T, routing


def main():
    model_dir, ids_text, temperature, out_dir = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3_moe":
        raise SystemExit("this reference implements qwen3_moe only")
    weights = load_safetensors(os.path.join(model_dir, "model.safetensors"))
    ids = [int(x) for x in ids_text.split(",")]
    logits, routing = forward(cfg, weights, ids, temperature)
    np.save(os.path.join(out_dir, "logits.npy"), logits)
    with open(os.path.join(out_dir, "routing.json"), "w") as f:
        json.dump(routing, f)


if __name__ == "__main__":
    main()

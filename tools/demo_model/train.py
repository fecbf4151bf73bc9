"""Trains the tessera demo model: a small qwen3_moe-layout block-diffusion MoE (SDAR-style, model_type sdar_moe).

Input: the data written by prepare_data.py (DATA/train: tokenizer, token streams, chat loss flags).
Output (OUT): model.safetensors (bf16, HF qwen3_moe tensor names), config.json, generation_config.json,
tokenizer.json, tokenizer_config.json, train_log.json, loss_curve.png.

Objective (the semantics tessera's diffusion decoder implements, see src/engine/diffusion_decoder.*):
blocks of BLOCK tokens from position 0; block-causal attention (a query sees every key of earlier blocks
and of its own block); masked positions hold <|mask|>; the logits at a masked position predict the token
at that SAME position. Each training row runs a clean copy and a noisy copy side by side (2L tokens,
both with positions 0..L-1): clean block b sees clean blocks <= b; noisy block b sees clean blocks < b
and noisy block b. Mask ratio is drawn per block; some blocks mask a suffix (like a prompt that ends
inside a block). Chat rows only mask and score assistant tokens (content and <|im_end|>), plus the
<|endoftext|> padding that follows the last <|im_end|> inside its block.

Runs on CPU with --tiny for a smoke test (torch 1.13 there, without scaled_dot_product_attention).
"""
import argparse
import gzip
import json
import math
import os
import shutil
import struct
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x).to(dt)


def rope_tables(head_dim, positions, theta):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    f = positions.float()[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    # HF rotate_half layout: the two halves of each head form the (real, imaginary) pairs.
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        H = c["hidden_size"]
        self.q_proj = nn.Linear(H, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)  # query head h uses kv head h // rep, as HF repeat_kv
        v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.hd)
            s = s.masked_fill(~mask, float("-inf"))
            o = (s.softmax(-1) @ v.float()).to(q.dtype)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class MoE(nn.Module):
    """qwen3_moe sparse block: softmax router over all experts, top-k, optional renormalisation.

    Computed densely (every expert on every token, weighted by the sparse routing weights, zero for
    unselected experts): the same function as the sparse form, and simpler and fast at this size.
    """

    def __init__(self, c):
        super().__init__()
        H, I, E = c["hidden_size"], c["moe_intermediate_size"], c["num_experts"]
        self.E, self.k, self.norm_topk = E, c["num_experts_per_tok"], c["norm_topk_prob"]
        self.gate = nn.Linear(H, E, bias=False)
        self.w_gate = nn.Parameter(torch.randn(E, I, H) * 0.02)
        self.w_up = nn.Parameter(torch.randn(E, I, H) * 0.02)
        self.w_down = nn.Parameter(torch.randn(E, H, I) * 0.02)

    def forward(self, x):
        B, T, H = x.shape
        xt = x.reshape(-1, H)
        probs = self.gate(xt).float().softmax(-1)
        topw, topi = probs.topk(self.k, dim=-1)
        if self.norm_topk:
            topw = topw / topw.sum(-1, keepdim=True)
        w = torch.zeros_like(probs).scatter(-1, topi, topw).to(x.dtype)  # [N, E]
        g = torch.einsum("nh,eih->eni", xt, self.w_gate)
        u = torch.einsum("nh,eih->eni", xt, self.w_up)
        y = torch.einsum("eni,ehi->enh", F.silu(g) * u, self.w_down)
        out = torch.einsum("enh,ne->nh", y, w)
        # Switch-style load-balancing loss: fraction routed x mean probability, per expert.
        frac = torch.zeros_like(probs).scatter(-1, topi, 1.0).mean(0)
        aux = self.E * (frac * probs.mean(0)).sum() / self.k
        return out.view(B, T, H), aux


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MoE(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        m, aux = self.mlp(self.post_attention_layernorm(x))
        return x + m, aux


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * c["num_hidden_layers"]) if ("o_proj" in n or "w_down" in n) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, ids, positions, mask):
        x = self.embed_tokens(ids)
        cos, sin = rope_tables(self.c["head_dim"], positions, self.c["rope_theta"])
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        aux = 0.0
        for layer in self.layers:
            x, a = layer(x, cos, sin, mask)
            aux = aux + a
        return self.norm(x), aux / len(self.layers)

    def hf_state_dict(self):
        """Tensors under HF qwen3_moe names (experts unfused, as tessera's loader and the Hub expect)."""
        out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight,
               "lm_head.weight": self.lm_head.weight}
        for i, L in enumerate(self.layers):
            p = f"model.layers.{i}."
            a = L.self_attn
            out[p + "input_layernorm.weight"] = L.input_layernorm.weight
            out[p + "post_attention_layernorm.weight"] = L.post_attention_layernorm.weight
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[p + f"self_attn.{n}.weight"] = getattr(a, n).weight
            out[p + "self_attn.q_norm.weight"] = a.q_norm.weight
            out[p + "self_attn.k_norm.weight"] = a.k_norm.weight
            out[p + "mlp.gate.weight"] = L.mlp.gate.weight
            for e in range(L.mlp.E):
                x = p + f"mlp.experts.{e}."
                out[x + "gate_proj.weight"] = L.mlp.w_gate[e]
                out[x + "up_proj.weight"] = L.mlp.w_up[e]
                out[x + "down_proj.weight"] = L.mlp.w_down[e]
        return out


    def load_hf(self, tensors):
        """Inverse of hf_state_dict: copies tensors (name -> tensor) into the parameters."""
        with torch.no_grad():
            for name, p in self.hf_state_dict().items():
                p.copy_(tensors[name].to(p.dtype))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "BF16", h["dtype"]
        b, e = h["data_offsets"]
        i16 = torch.from_numpy(np.frombuffer(data[b:e], dtype="<i2").copy())
        out[name] = i16.view(torch.bfloat16).reshape(h["shape"]).float()
    return out


def block_diffusion_mask(L, block, device):
    """[2L, 2L] boolean (True = may attend) for the clean + noisy layout described at the top."""
    blk = torch.arange(L, device=device) // block
    qb, kb = blk[:, None], blk[None, :]
    clean_clean = kb <= qb
    noisy_clean = kb < qb
    noisy_noisy = kb == qb
    zero = torch.zeros(L, L, dtype=torch.bool, device=device)
    return torch.cat([torch.cat([clean_clean, zero], 1), torch.cat([noisy_clean, noisy_noisy], 1)], 0)


# ----------------------------------------------------------------------------- data

def read_gz(path, dtype):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=dtype)


class Data:
    def __init__(self, d, L, block, device, seed):
        self.meta = json.load(open(os.path.join(d, "meta.json")))
        sp = self.meta["special_ids"]
        self.mask_id, self.eot, self.im_end = sp["<|mask|>"], sp["<|endoftext|>"], sp["<|im_end|>"]
        self.L, self.block, self.device = L, block, device
        self.g = torch.Generator(device="cpu").manual_seed(seed)
        eng = read_gz(os.path.join(d, "english.u16.gz"), "<u2").astype(np.int64)
        self.english = torch.from_numpy(eng).to(device)
        ids = read_gz(os.path.join(d, "chat.u16.gz"), "<u2").astype(np.int64)
        loss = read_gz(os.path.join(d, "chat_loss.u8.gz"), np.uint8).astype(bool)
        index = json.load(open(os.path.join(d, "chat_index.json")))
        index = [(o, n) for o, n in index if n <= L]
        rows = np.full((len(index), L), self.eot, dtype=np.int64)
        cand = np.zeros((len(index), L), dtype=bool)
        for r, (o, n) in enumerate(index):
            rows[r, :n] = ids[o:o + n]
            cand[r, :n] = loss[o:o + n]
            # Everything after the final <|im_end|> up to the end of its block (the template's trailing
            # newline, then padding) is masked and scored too: at inference nothing after the answer is
            # visible, so a clean token there would tell the model where the answer ends.
            last = int(np.nonzero(loss[o:o + n])[0][-1]) if loss[o:o + n].any() else n - 1
            end = ((last + 1 + block - 1) // block) * block
            cand[r, last + 1:min(end, L)] = True
        self.chat = torch.from_numpy(rows).to(device)
        self.chat_cand = torch.from_numpy(cand).to(device)

    def batch(self, n_chat, n_eng):
        L = self.L
        ri = torch.randint(0, self.chat.shape[0], (n_chat,), generator=self.g).to(self.device)
        starts = torch.randint(0, self.english.shape[0] - L, (n_eng,), generator=self.g).to(self.device)
        eng = self.english[starts[:, None] + torch.arange(L, device=self.device)[None, :]]
        x = torch.cat([self.chat[ri], eng], 0)
        cand = torch.cat([self.chat_cand[ri], torch.ones_like(eng, dtype=torch.bool)], 0)
        return x, cand


def noise(x, cand, block, mask_id, gen_device):
    """Masks candidates per block: ratio t ~ U(0,1] per block; a quarter of the blocks mask a suffix."""
    B, L = x.shape
    nb = L // block
    dev = x.device
    t = torch.rand(B, nb, 1, device=dev).clamp_min(0.02)
    r = torch.rand(B, nb, block, device=dev)
    random_mask = r < t
    cut = (torch.rand(B, nb, 1, device=dev) * block).long()
    suffix_mask = torch.arange(block, device=dev)[None, None, :] >= cut
    use_suffix = torch.rand(B, nb, 1, device=dev) < 0.25
    m = torch.where(use_suffix, suffix_mask, random_mask).reshape(B, L) & cand
    return torch.where(m, torch.full_like(x, mask_id), x), m


# ----------------------------------------------------------------------------- output files

def write_safetensors(path, tensors):
    """bf16 safetensors (own writer: no dependency, and the byte layout is simple)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", torch.bfloat16).contiguous()
        b = t.view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def plot_png(path, steps, losses, title, extra=None, phase_starts=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
        ax.plot(steps, losses, lw=0.6, alpha=0.4, label="loss (every 10th step)")
        k = max(1, len(losses) // 50)
        sm = np.convolve(losses, np.ones(k) / k, mode="valid")
        every = steps[-1] - steps[-2] if len(steps) > 2 else 1
        ax.plot(steps[k - 1:], sm, lw=1.8, label=f"weighted total, running mean over {k * every} steps")
        for key, name in (extra or {}).items():
            v = np.convolve(np.nan_to_num(np.array(name[1], float), nan=np.nanmean(name[1])), np.ones(k) / k, "valid")
            ax.plot(steps[k - 1:], v, lw=1.2, ls="--", label=name[0])
        for x in phase_starts or []:
            ax.axvline(x, color="gray", ls=":", lw=1)
            ax.text(x, ax.get_ylim()[1], " continued (lower lr, data fix)", va="top", fontsize=8, color="gray")
        ax.set_xlabel("step")
        ax.set_ylabel("masked-token cross-entropy (nats)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
        return "matplotlib"
    except ImportError:
        pass
    # Fallback: a plain polyline on a white canvas, written as a PNG with zlib.
    W, Hh = 800, 450
    img = np.full((Hh, W, 3), 255, np.uint8)
    img[Hh - 40, 40:W - 20] = 0
    img[20:Hh - 40, 40] = 0
    lo, hi = min(losses), max(losses)
    xs = 40 + (np.arange(len(losses)) / max(1, len(losses) - 1) * (W - 61)).astype(int)
    ys = (Hh - 41 - (np.array(losses) - lo) / max(1e-9, hi - lo) * (Hh - 62)).astype(int)
    for i in range(1, len(xs)):
        n = max(abs(xs[i] - xs[i - 1]), abs(ys[i] - ys[i - 1]), 1)
        for s in range(n + 1):
            img[ys[i - 1] + (ys[i] - ys[i - 1]) * s // n, xs[i - 1] + (xs[i] - xs[i - 1]) * s // n] = (30, 90, 200)
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(Hh))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, Hh, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    return "zlib"


def loss_series(log):
    return {"chat": ("assistant tokens of chats (mean)", log["chat_loss"]),
            "english": ("English text tokens (mean)", log["english_loss"])}


def hf_config(c, meta, block):
    sp = meta["special_ids"]
    eos = [sp["<|im_end|>"], sp["<|endoftext|>"]]
    return {
        "architectures": ["SDARMoeForCausalLM"], "model_type": "sdar_moe",
        "vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"], "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"], "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"], "hidden_act": "silu", "intermediate_size": 4 * c["hidden_size"],
        "max_position_embeddings": 2048, "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"],
        "rope_parameters": {"rope_theta": c["rope_theta"], "rope_type": "default"},
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "num_experts": c["num_experts"], "num_experts_per_tok": c["num_experts_per_tok"],
        "moe_intermediate_size": c["moe_intermediate_size"], "norm_topk_prob": c["norm_topk_prob"],
        "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
        "bos_token_id": None, "eos_token_id": eos, "pad_token_id": sp["<|endoftext|>"],
        "mask_token_id": sp["<|mask|>"], "block_size": block, "dtype": "bfloat16", "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def generation_config(meta, block):
    sp = meta["special_ids"]
    return {"eos_token_id": [sp["<|im_end|>"], sp["<|endoftext|>"]], "pad_token_id": sp["<|endoftext|>"],
            "mask_token_id": sp["<|mask|>"], "block_size": block, "steps": block, "policy": "threshold",
            "threshold": 0.9, "do_sample": False}


def check_tokenizer(tok_dir, data_dir):
    """Re-encodes the prepared check texts with HF tokenizers, if installed (an independent encoder)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return {"hf_tokenizers": "not installed"}
    import tokenizers
    tk = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    checks = json.load(open(os.path.join(data_dir, "encode_checks.json")))
    same = sum(tk.encode(c["text"], add_special_tokens=False).ids == c["ids"] for c in checks)
    return {"hf_tokenizers": tokenizers.__version__, "texts": len(checks), "identical": same}


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="build-data/demo-data/train")
    ap.add_argument("--out", default="models/demo")
    ap.add_argument("--seconds", type=float, default=420, help="wall-clock training budget")
    ap.add_argument("--max-steps", type=int, default=10 ** 9)
    ap.add_argument("--batch", type=int, default=64, help="rows per step, 3/4 chat and 1/4 English")
    ap.add_argument("--chat-weight", type=float, default=3.0, help="loss weight of a chat token")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--init", metavar="DIR", help="start from DIR/model.safetensors (continued training)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: a 2-layer model")
    ap.add_argument("--replot", metavar="DIR", help="only redraw DIR/loss_curve.png from DIR/train_log.json")
    a = ap.parse_args()
    if a.replot:
        s = json.load(open(os.path.join(a.replot, "train_log.json")))
        plot_png(os.path.join(a.replot, "loss_curve.png"), s["log"]["step"], s["log"]["loss"],
                 f"tessera demo model: block-diffusion loss ({s['steps']} steps, {s['train_seconds'] / 60:.1f} min)",
                 loss_series(s["log"]), [p["steps"] for p in s.get("phases", [])[:-1]])
        return
    torch.manual_seed(a.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    block = 32
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    c = {"vocab_size": meta["vocab_size"], "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_experts": 8,
         "num_experts_per_tok": 2, "moe_intermediate_size": 192, "norm_topk_prob": True}
    if a.tiny:
        c.update(hidden_size=64, num_hidden_layers=2, head_dim=16, moe_intermediate_size=32)
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    data = Data(a.data, a.seq, block, dev, a.seed)
    model = Model(c)
    if a.init:
        model.load_hf(read_safetensors(os.path.join(a.init, "model.safetensors")))
        print(f"initialised from {a.init}", flush=True)
    model = model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    n_active = n_params - sum(p.numel() for n, p in model.named_parameters() if n.split(".")[-1].startswith("w_")) * \
        (1 - c["num_experts_per_tok"] / c["num_experts"])
    print(f"device {dev}, params {n_params / 1e6:.2f} M ({n_params * 2 / 1e6:.1f} MB bf16), active/token "
          f"{n_active / 1e6:.2f} M, chat rows {data.chat.shape[0]}, english tokens {data.english.shape[0]}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    attn_mask = block_diffusion_mask(a.seq, block, dev)
    positions = torch.cat([torch.arange(a.seq), torch.arange(a.seq)]).to(dev)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if dev == "cuda" else torch.autocast("cpu", enabled=False)
    log = {"step": [], "loss": [], "chat_loss": [], "english_loss": [], "aux": [], "lr": [], "time_s": []}
    warmup = a.warmup
    step = 0
    t_train = time.time()
    while step < a.max_steps:
        elapsed = time.time() - t_train
        if elapsed > a.seconds:
            break
        frac = elapsed / a.seconds
        lr = a.lr * min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        half = a.batch * 3 // 4  # chat rows carry far fewer scored tokens than English rows
        x, cand = data.batch(half, a.batch - half)
        noisy, m = noise(x, cand, block, data.mask_id, dev)
        with amp:
            h, aux = model(torch.cat([x, noisy], 1), positions, attn_mask)
            hn = h[:, a.seq:][m]
            logits = model.lm_head(hn).float()
        ce = F.cross_entropy(logits, x[m], reduction="none")
        rows = torch.arange(a.batch, device=dev)[:, None].expand_as(m)[m]
        is_chat = rows < half
        # Chat tokens weigh a.chat_weight: with it chat and English contribute about equally.
        w = torch.where(is_chat, torch.full_like(ce, a.chat_weight), torch.ones_like(ce))
        loss = (ce * w).sum() / w.sum()
        total = loss + 0.01 * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 10 == 0 or step == 1:
            cl = ce[is_chat].mean().item() if is_chat.any() else float("nan")
            el = ce[~is_chat].mean().item() if (~is_chat).any() else float("nan")
            lv = loss.item()
            for k, v in (("step", step), ("loss", lv), ("chat_loss", cl), ("english_loss", el),
                         ("aux", aux.item()), ("lr", lr), ("time_s", round(time.time() - t_train, 2))):
                log[k].append(v)
            if step % 100 == 0 or step == 1:
                print(f"step {step} loss {lv:.3f} chat {cl:.3f} english {el:.3f} aux {aux.item():.3f} "
                      f"lr {lr:.2e} {time.time() - t_train:.0f}s, masked {int(m.sum())}", flush=True)
    train_s = time.time() - t_train
    print(f"trained {step} steps in {train_s:.0f} s", flush=True)

    tensors = model.hf_state_dict()
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    json.dump(hf_config(c, meta, block), open(os.path.join(a.out, "config.json"), "w"), indent=2)
    json.dump(generation_config(meta, block), open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.data, "tokenizer", f), os.path.join(a.out, f))
    plotter = plot_png(os.path.join(a.out, "loss_curve.png"), log["step"], log["loss"],
                       f"tessera demo model: block-diffusion loss ({step} steps, {train_s / 60:.1f} min)",
                       loss_series(log))
    summary = {
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "torch": torch.__version__,
        "config": c, "block_size": block, "params": n_params, "bf16_bytes": n_params * 2,
        "active_params_per_token": int(n_active), "steps": step, "train_seconds": round(train_s, 1),
        "total_seconds": round(time.time() - t_start, 1), "batch_rows": a.batch, "seq_len": a.seq,
        "tokens_per_step": a.batch * a.seq * 2, "peak_lr": a.lr, "seed": a.seed, "data": meta,
        "final_loss_mean_last_100_steps": float(np.mean(log["loss"][-10:])) if log["loss"] else None,
        "init": a.init, "warmup": a.warmup, "plot": plotter, "tokenizer_check": check_tokenizer(a.out, a.data), "log": log,
    }
    json.dump(summary, open(os.path.join(a.out, "train_log.json"), "w"))
    print(json.dumps({k: v for k, v in summary.items() if k not in ("log", "data")}), flush=True)


if __name__ == "__main__":
    main()

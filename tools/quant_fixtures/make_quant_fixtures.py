#!/usr/bin/env python3
"""The transformers float64 cross-check of the quantized fixtures (needs torch + transformers 5.17: the GPU
machine). Its output of 2026-12-05 is stored in tests/data/fixtures/quant_transformers (see the README
there) and read by model_quant_golden_test.cpp; rerun it only to regenerate that directory.

From each tiny bf16 fixture of tests/data/fixtures/models, writes checkpoints in the layouts their
producers publish (written here from the formats' own definitions, independently of tessera's reader):
  fp8 block-wise (quant_method fp8, weight + weight_scale_inv), GPTQ v1/v2 (qweight / qzeros / scales /
  g_idx, sym / asym, act-order), AWQ GEMM (qweight / qzeros / scales, nibble order 0,2,4,6,1,3,5,7),
  compressed-tensors pack-quantized (weight_packed / weight_scale / weight_zero_point / weight_shape /
  weight_g_idx), float-quantized FP8 (channel + dynamic token activations; tensor + static input_scale)
  and int-quantized W8A8.
The reference of each: the same model with every quantized weight replaced by its exact dequantization
(computed in float64 from the stored values, as a reader decodes them), run in float64 by transformers:
logits of reference.json's short and long ids and a 16-token greedy continuation.
Also the documented rounding of quantization at load (int8 / int4 / fp8 of every Linear of qwen3_moe),
as expected codes and scales, and the float64 logits of the dequantized results.

Usage: python3 make_quant_fixtures.py REPO_ROOT OUT_DIR
"""
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

ROOT, OUT = sys.argv[1], sys.argv[2]
BASE = os.path.join(ROOT, "tests/data/fixtures/models")
LINEAR = re.compile(r".*(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj|experts\.\d+\.(gate|up|down)_proj|"
                    r"shared_expert\.(gate|up|down)_proj|linear_attn\.(in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|"
                    r"in_proj_qkvz|in_proj_ba|out_proj))\.weight$")
torch.manual_seed(1234)
rng = np.random.default_rng(1234)


def fp16(t):
    return t.to(torch.float16).to(torch.float64)


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float64)


def e4m3(t):
    return t.float().clamp(-448, 448).to(torch.float8_e4m3fn)


def pack_along(vals, bits, dim):
    """Packs unsigned integers (int64 tensor) into int32 words along `dim`, element 0 in the low bits."""
    pf = 32 // bits
    vals = vals.to(torch.int64)
    if dim == 1:
        vals = vals.t()
    rows, cols = vals.shape
    words = (rows + pf - 1) // pf
    padded = torch.zeros(words * pf, cols, dtype=torch.int64)
    padded[:rows] = vals
    out = torch.zeros(words, cols, dtype=torch.int64)
    for j in range(pf):
        out |= (padded[j::pf] & ((1 << bits) - 1)) << (bits * j)
    out = torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)
    return out.t().contiguous() if dim == 1 else out.contiguous()


# ---------------------------------------------------------------------------------------- formats
def fp8_block(W, bn, bk):
    N, K = W.shape
    q = torch.empty(N, K, dtype=torch.float8_e4m3fn)
    s = torch.zeros(math.ceil(N / bn), math.ceil(K / bk), dtype=torch.float32)
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            blk = W[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]
            amax = blk.abs().max().item()
            sc = torch.tensor(amax / 448.0 if amax > 0 else 1.0, dtype=torch.float32)
            s[i, j] = sc
            q[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = e4m3(blk / sc.double())
    rs = s.double().repeat_interleave(bn, 0)[:N].repeat_interleave(bk, 1)[:, :K]
    return {"weight": q, "weight_scale_inv": s}, q.double() * rs


def gptq(W, bits, group, sym, desc_act, v1):
    N, K = W.shape
    maxq = 2**bits - 1
    g = K if group == -1 else group
    G = math.ceil(K / g)
    if desc_act:
        perm = torch.from_numpy(rng.permutation(K))
        g_idx = torch.empty(K, dtype=torch.int64)
        g_idx[perm] = torch.arange(K) // g
    else:
        g_idx = torch.arange(K) // g
    scales = torch.zeros(G, N, dtype=torch.float64)
    zeros = torch.zeros(G, N, dtype=torch.int64)
    q = torch.zeros(N, K, dtype=torch.int64)
    for gi in range(G):
        cols = (g_idx == gi).nonzero().flatten()
        Wg = W[:, cols]
        xmin = torch.minimum(Wg.min(1).values, torch.zeros(N, dtype=W.dtype))
        xmax = torch.maximum(Wg.max(1).values, torch.zeros(N, dtype=W.dtype))
        if sym:
            xmax = torch.maximum(xmin.abs(), xmax)
            xmin = -xmax
        sc = fp16((xmax - xmin).clamp(min=1e-8) / maxq)
        z = torch.full((N,), (maxq + 1) // 2, dtype=torch.int64) if sym else torch.round(-xmin / sc).to(torch.int64)
        scales[gi] = sc
        zeros[gi] = z
        q[:, cols] = torch.clamp(torch.round(Wg / sc[:, None]) + z[:, None], 0, maxq).to(torch.int64)
    stored_z = (zeros - 1) & maxq if v1 else zeros
    decoded_z = stored_z + 1 if v1 else stored_z  # what a reader of this format gets back
    W_hat = scales[g_idx].t() * (q - decoded_z[g_idx].t())
    t = {"qweight": pack_along(q.t(), bits, 0), "qzeros": pack_along(stored_z, bits, 1),
         "scales": scales.to(torch.float16), "g_idx": g_idx.to(torch.int32)}
    return t, W_hat


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_pack(vals):  # vals [R, N] unsigned 4-bit -> [R, N/8] int32, nibble i = column 8c + AWQ_ORDER[i]
    R, N = vals.shape
    out = torch.zeros(R, N // 8, dtype=torch.int64)
    for c in range(N // 8):
        for i in range(8):
            out[:, c] |= vals[:, c * 8 + AWQ_ORDER[i]] << (4 * i)
    return torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)


def awq(W, group):
    N, K = W.shape
    G = K // group
    Wg = W.reshape(N, G, group)
    mx, mn = Wg.amax(2), Wg.amin(2)
    sc = fp16((mx - mn).clamp(min=1e-5) / 15)
    z = torch.clamp(-torch.round(mn / sc), 0, 15).to(torch.int64)
    q = torch.clamp(torch.round(Wg / sc[..., None]) + z[..., None], 0, 15).to(torch.int64).reshape(N, K)
    W_hat = ((q.reshape(N, G, group) - z[..., None]) * sc[..., None]).reshape(N, K)
    return {"qweight": awq_pack(q.t()), "qzeros": awq_pack(z.t()), "scales": sc.t().to(torch.float16)}, W_hat


def ct_packed(W, bits, group, sym, actorder):
    N, K = W.shape
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    g = K if group is None else group
    G = math.ceil(K / g)
    if actorder:
        perm = torch.from_numpy(rng.permutation(K))
        g_idx = torch.empty(K, dtype=torch.int64)
        g_idx[perm] = torch.arange(K) // g
    else:
        g_idx = torch.arange(K) // g
    scale = torch.zeros(N, G, dtype=torch.float64)
    zp = torch.zeros(N, G, dtype=torch.int64)
    q = torch.zeros(N, K, dtype=torch.int64)
    for gi in range(G):
        cols = (g_idx == gi).nonzero().flatten()
        Wg = W[:, cols]
        if sym:
            sc = bf16(Wg.abs().amax(1).clamp(min=1e-8) / ((qmax - qmin) / 2))
            z = torch.zeros(N, dtype=torch.int64)
        else:
            mn = torch.minimum(Wg.amin(1), torch.zeros(N, dtype=W.dtype))
            mx = torch.maximum(Wg.amax(1), torch.zeros(N, dtype=W.dtype))
            sc = bf16((mx - mn).clamp(min=1e-8) / (qmax - qmin))
            z = torch.clamp(qmin - torch.round(mn / sc), qmin, qmax).to(torch.int64)
        scale[:, gi] = sc
        zp[:, gi] = z
        q[:, cols] = torch.clamp(torch.round(Wg / sc[:, None]) + z[:, None], qmin, qmax).to(torch.int64)
    W_hat = (q - zp[:, g_idx]) * scale[:, g_idx]
    t = {"weight_packed": pack_along(q + 2 ** (bits - 1), bits, 1),
         "weight_scale": scale.to(torch.bfloat16) if group is not None else scale[:, :1].to(torch.bfloat16),
         "weight_shape": torch.tensor([N, K], dtype=torch.int64)}
    if not sym:
        t["weight_zero_point"] = pack_along(zp + 2 ** (bits - 1), bits, 0)
    if actorder:
        t["weight_g_idx"] = g_idx.to(torch.int32)
    return t, W_hat


def ct_fp8(W, strategy, input_scale=None):
    if strategy == "channel":
        s = (W.abs().amax(1, keepdim=True) / 448.0).clamp(min=1e-12).to(torch.float32)
    else:
        s = (W.abs().max() / 448.0).clamp(min=1e-12).to(torch.float32).reshape(1)
    q = e4m3(W / s.double())
    t = {"weight": q, "weight_scale": s}
    if input_scale is not None:
        t["input_scale"] = torch.tensor([input_scale], dtype=torch.float32)
    return t, q.double() * s.double()


def ct_int8(W):
    s = (W.abs().amax(1, keepdim=True) / 127.0).clamp(min=1e-12).to(torch.float32)
    q = torch.clamp(torch.round(W / s.double()), -127, 127).to(torch.int8)
    return {"weight": q, "weight_scale": s}, q.double() * s.double()


# ------------------------------------------------------------------------------------ fixtures
def scheme_ct(weights, fmt, input_activations=None):
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": input_activations, "output_activations": None}},
            "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$", "re:.*in_proj_a$", "re:.*in_proj_b$"]}


def int_args(bits, group, sym, actorder=None):
    return {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "group" if group else "channel",
            "group_size": group, "dynamic": False, "actorder": actorder, "block_structure": None}


FIXTURES = {
    "qwen3_moe_fp8_block32": ("qwen3_moe", {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                            "weight_block_size": [32, 32], "modules_to_not_convert": ["lm_head"]},
                              lambda n, W: fp8_block(W, 32, 32), set()),
    "qwen3_5_moe_fp8_block128": ("qwen3_5_moe", {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                                 "weight_block_size": [128, 128],
                                                 "modules_to_not_convert": ["lm_head", "in_proj_a", "in_proj_b"]},
                                 lambda n, W: fp8_block(W, 128, 128), {"in_proj_a", "in_proj_b"}),
    "qwen3_moe_gptq_int4_g32_sym": ("qwen3_moe", {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True,
                                                  "desc_act": False, "checkpoint_format": "gptq"},
                                    lambda n, W: gptq(W, 4, 32, True, False, True), set()),
    "qwen3_moe_gptq_int4_g32_asym_actorder": ("qwen3_moe", {"quant_method": "gptq", "bits": 4, "group_size": 32,
                                                            "sym": False, "desc_act": True,
                                                            "checkpoint_format": "gptq"},
                                              lambda n, W: gptq(W, 4, 32, False, True, True), set()),
    "qwen3_moe_gptq_int8_channel_v2": ("qwen3_moe", {"quant_method": "gptq", "bits": 8, "group_size": -1,
                                                     "sym": True, "desc_act": False, "checkpoint_format": "gptq_v2"},
                                       lambda n, W: gptq(W, 8, -1, True, False, False), set()),
    "qwen3_5_moe_gptq_int4_g32": ("qwen3_5_moe", {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True,
                                                  "desc_act": False, "checkpoint_format": "gptq"},
                                  lambda n, W: gptq(W, 4, 32, True, False, True), {"in_proj_a", "in_proj_b"}),
    "qwen3_moe_awq_int4_g32": ("qwen3_moe", {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
                                             "version": "gemm", "modules_to_not_convert": None},
                               lambda n, W: awq(W, 32), set()),
    "qwen3_moe_ct_w4a16_g32": ("qwen3_moe", scheme_ct(int_args(4, 32, True), "pack-quantized"),
                               lambda n, W: ct_packed(W, 4, 32, True, False), set()),
    "qwen3_5_moe_ct_w4a16_g32_asym_actorder": ("qwen3_5_moe",
                                               scheme_ct(int_args(4, 32, False, "group"), "pack-quantized"),
                                               lambda n, W: ct_packed(W, 4, 32, False, True),
                                               {"in_proj_a", "in_proj_b"}),
    "qwen3_moe_ct_w8a16_channel": ("qwen3_moe", scheme_ct(int_args(8, None, True), "pack-quantized"),
                                   lambda n, W: ct_packed(W, 8, None, True, False), set()),
    "qwen3_moe_ct_fp8_dynamic": ("qwen3_moe", scheme_ct({"num_bits": 8, "type": "float", "symmetric": True,
                                                         "strategy": "channel", "dynamic": False},
                                                        "float-quantized",
                                                        {"num_bits": 8, "type": "float", "symmetric": True,
                                                         "strategy": "token", "dynamic": True}),
                                 lambda n, W: ct_fp8(W, "channel"), set()),
    "qwen3_moe_ct_fp8_static": ("qwen3_moe", scheme_ct({"num_bits": 8, "type": "float", "symmetric": True,
                                                        "strategy": "tensor", "dynamic": False},
                                                       "float-quantized",
                                                       {"num_bits": 8, "type": "float", "symmetric": True,
                                                        "strategy": "tensor", "dynamic": False}),
                                lambda n, W: ct_fp8(W, "tensor", input_scale=STATIC_INPUT_SCALE), set()),
    "qwen3_moe_ct_w8a8_int8": ("qwen3_moe", scheme_ct({"num_bits": 8, "type": "int", "symmetric": True,
                                                       "strategy": "channel", "dynamic": False},
                                                      "int-quantized",
                                                      {"num_bits": 8, "type": "int", "symmetric": True,
                                                       "strategy": "token", "dynamic": True}),
                               lambda n, W: ct_int8(W), set()),
}
STATIC_INPUT_SCALE = None  # set from the activations of the bf16 model below


def reference(model_dir, deq, base_ref, out_dir):
    """float64 transformers run of a checkpoint whose weights are `deq` (float64 tensors)."""
    tmp = tempfile.mkdtemp()
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg.pop("quantization_config", None)
    json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"))
    shutil.copy(os.path.join(BASE, base_ref, "generation_config.json"), tmp)
    save_file({k: v.to(torch.float64).contiguous() for k, v in deq.items()}, os.path.join(tmp, "model.safetensors"))
    m = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float64, experts_implementation="eager").eval()
    ref = json.load(open(os.path.join(BASE, base_ref, "reference.json")))
    out = {"base": base_ref, "reference_dtype": "float64", "short_ids": ref["short_ids"], "long_ids": ref["long_ids"]}
    with torch.no_grad():
        for name in ("short", "long"):
            ids = torch.tensor([ref[name + "_ids"]])
            logits = m(ids).logits[0].float().numpy()
            np.save(os.path.join(out_dir, f"logits_{name}.npy"), logits)
        gen = m.generate(torch.tensor([ref["short_ids"]]), max_new_tokens=16, do_sample=False)
        out["greedy_continuation"] = gen[0, len(ref["short_ids"]):].tolist()
    shutil.rmtree(tmp)
    return out


def calibrate_static_scale():
    """max |input| of the Linear layers of the float64 qwen3_moe model on its long ids, / 448."""
    m = AutoModelForCausalLM.from_pretrained(os.path.join(BASE, "qwen3_moe"), dtype=torch.float64,
                                             experts_implementation="eager").eval()
    amax = [0.0]
    hooks = [mod.register_forward_hook(lambda mod, inp, out: amax.__setitem__(0, max(amax[0], inp[0].abs().max().item())))
             for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
    ref = json.load(open(os.path.join(BASE, "qwen3_moe", "reference.json")))
    with torch.no_grad():
        m(torch.tensor([ref["long_ids"]]))
    for h in hooks:
        h.remove()
    return float(np.float32(amax[0] * 1.25 / 448.0))


def make(name, base, qcfg, fn, keep_float):
    src = load_file(os.path.join(BASE, base, "model.safetensors"))
    out_dir = os.path.join(OUT, name)
    os.makedirs(out_dir, exist_ok=True)
    stored, deq = {}, {}
    for k, v in src.items():
        module = k[: -len(".weight")] if k.endswith(".weight") else k
        if LINEAR.match(k) and module.split(".")[-1] not in keep_float:
            tensors, W_hat = fn(k, v.double())
            for suffix, t in tensors.items():
                stored[module + "." + suffix] = t.contiguous()
            deq[k] = W_hat
        else:
            stored[k] = v
            deq[k] = v.double()
    cfg = json.load(open(os.path.join(BASE, base, "config.json")))
    cfg["quantization_config"] = qcfg
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=1)
    shutil.copy(os.path.join(BASE, base, "generation_config.json"), out_dir)
    save_file(stored, os.path.join(out_dir, "model.safetensors"))
    ref = reference(out_dir, deq, base, out_dir)
    ref["fixture"] = name
    json.dump(ref, open(os.path.join(out_dir, "reference.json"), "w"), indent=1)
    print(name, len(stored), "tensors", flush=True)


def load_quant_reference():
    """The documented rounding of --quantization on qwen3_moe: expected codes / scales and float64 logits."""
    src = load_file(os.path.join(BASE, "qwen3_moe", "model.safetensors"))
    for kind in ("int8", "int4", "fp8"):
        out_dir = os.path.join(OUT, "load_" + kind)
        os.makedirs(out_dir, exist_ok=True)
        expected, deq = {}, {}
        for k, v in src.items():
            if not LINEAR.match(k):
                deq[k] = v.double()
                continue
            W = v.float()  # f32, as the loader converts bf16
            N, K = W.shape
            group = min(128, K) if kind == "int4" else K
            Wg = W.reshape(N, K // group, group)
            qmax = {"int8": 127.0, "int4": 7.0, "fp8": 448.0}[kind]
            amax = Wg.abs().amax(2)
            scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))  # f32 division
            x = Wg / scale[..., None]
            if kind == "fp8":
                codes = x.to(torch.float8_e4m3fn)
                vals = codes.double()
                expected[k + ".codes"] = codes.view(torch.uint8).reshape(N, K)
            else:
                lo = -127.0 if kind == "int8" else -8.0
                codes = torch.clamp(torch.round(x), lo, qmax)  # round half to even
                vals = codes.double()
                expected[k + ".codes"] = codes.to(torch.int8).reshape(N, K)
            expected[k + ".scales"] = scale.contiguous()
            deq[k] = (vals * scale.double()[..., None]).reshape(N, K)
        save_file(expected, os.path.join(out_dir, "expected.safetensors"))
        ref = reference(os.path.join(BASE, "qwen3_moe"), deq, "qwen3_moe", out_dir)
        ref["fixture"] = "load_" + kind
        json.dump(ref, open(os.path.join(out_dir, "reference.json"), "w"), indent=1)
        print("load", kind, flush=True)


if __name__ == "__main__":
    STATIC_INPUT_SCALE = calibrate_static_scale()
    print("static input scale", STATIC_INPUT_SCALE, flush=True)
    for name, (base, qcfg, fn, keep) in FIXTURES.items():
        make(name, base, qcfg, fn, keep)
    load_quant_reference()

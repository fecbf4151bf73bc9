#!/usr/bin/python3
"""Quantized checkpoints in their producers' published layouts, with numpy only (Debian's
python3-numpy), for tessera's quantized-weight tests (tests/golden/model_quant_golden_test.cpp).

For each case, from the tiny bf16 fixture of tests/data/fixtures/models/<base>:
  OUT/<case>/            config.json with quantization_config + model.safetensors in the published
                         layout (FP8 block-wise weight + weight_scale_inv; GPTQ qweight / qzeros /
                         scales / g_idx, v1 and v2 zero points, act-order; AWQ GEMM qweight / qzeros /
                         scales with the 0,2,4,6,1,3,5,7 nibble order; compressed-tensors
                         pack-quantized / float-quantized / int-quantized);
  OUT/<case>/dequantized/ the same model as a float32 checkpoint whose quantized Linear weights are the
                         exact dequantization of the stored values, decoded here the way each format's
                         readers decode it (the reference a reader of the format must reproduce).
  OUT/load_<kind>/expected.safetensors: the documented rounding of quantization at load (int8, int4,
                         fp8) of every Linear of qwen3_moe, codes and scales; OUT/load_<kind>/dequantized/
                         the float32 model those codes and scales stand for.
This file is written from the formats' definitions (see io/quant_formats.cpp's header for the list)
independently of tessera's C++ reader: nothing here calls tessera. Deterministic (fixed seeds).

Usage: /usr/bin/python3 make_quant_checkpoints.py REPO_ROOT OUT_DIR
"""
import json
import math
import os
import re
import shutil
import struct
import sys

import numpy as np

ROOT, OUT = sys.argv[1], sys.argv[2]
BASE = os.path.join(ROOT, "tests/data/fixtures/models")
LINEAR = re.compile(r".*(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj|experts\.\d+\.(gate|up|down)_proj|"
                    r"shared_expert\.(gate|up|down)_proj|linear_attn\.(in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|"
                    r"in_proj_qkvz|in_proj_ba|out_proj))\.weight$")

# ------------------------------------------------------------------------------- safetensors io
DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "I8": np.int8, "U8": np.uint8,
      "F64": np.float64}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(info["shape"])
        else:
            out[name] = np.frombuffer(buf, dtype=DT[info["dtype"]]).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype tag, numpy array of the stored bytes' type)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        tag, arr = tensors[name]
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": tag, "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def bf16_bits(x):
    """float32 -> bf16 bit patterns, round to nearest even."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_round(x):
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


# ----------------------------------------------------------------------------------- e4m3 (fn)
def e4m3_decode(codes):
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, c & 7
    val = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    return (sign * val).astype(np.float32)


def e4m3_encode(x):
    """Nearest e4m3fn value (ties to even), saturating at 448."""
    table = e4m3_decode(np.arange(256, dtype=np.uint8)).astype(np.float64)
    pos = np.arange(0, 0x7F)  # finite non-negative codes 0x00 .. 0x7e
    vals = table[pos]
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    idx = np.searchsorted(vals, a)  # first value >= a
    idx = np.clip(idx, 1, len(vals) - 1)
    lo, hi = vals[idx - 1], vals[idx]
    take_hi = (hi - a < a - lo) | ((hi - a == a - lo) & (pos[idx] % 2 == 0))
    code = np.where(take_hi, pos[idx], pos[idx - 1])
    code = np.where(a == 0, 0, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


# -------------------------------------------------------------------------------------- packing
def to_int32(words):
    words = words.astype(np.int64) & 0xFFFFFFFF
    return np.where(words >= 2 ** 31, words - 2 ** 32, words).astype(np.int32)


def pack(vals, bits, axis):
    """Unsigned values packed into int32 along `axis`, element 0 in the lowest bits."""
    pf = 32 // bits
    v = np.moveaxis(vals.astype(np.int64), axis, 0)
    n = v.shape[0]
    padded = np.zeros(((n + pf - 1) // pf * pf,) + v.shape[1:], dtype=np.int64)
    padded[:n] = v
    out = np.zeros(((n + pf - 1) // pf,) + v.shape[1:], dtype=np.int64)
    for j in range(pf):
        out |= (padded[j::pf] & ((1 << bits) - 1)) << (bits * j)
    return np.moveaxis(to_int32(out), 0, axis)


def rng_for(name):
    return np.random.default_rng(sum(map(ord, name)) * 7919)


def fp16(x):
    return x.astype(np.float16).astype(np.float32)


# -------------------------------------------------------------------------------------- formats
def fp8_block(name, W, bn, bk):
    N, K = W.shape
    GN, GK = math.ceil(N / bn), math.ceil(K / bk)
    s = np.ones((GN, GK), dtype=np.float32)
    q = np.zeros((N, K), dtype=np.uint8)
    deq = np.zeros((N, K), dtype=np.float32)
    for i in range(GN):
        for j in range(GK):
            blk = W[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]
            amax = np.float32(np.abs(blk).max())
            sc = np.float32(amax / np.float32(448.0)) if amax > 0 else np.float32(1.0)
            s[i, j] = sc
            codes = e4m3_encode(blk / sc)
            q[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = codes
            deq[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = e4m3_decode(codes) * sc
    return {"weight": ("F8_E4M3", q), "weight_scale_inv": ("F32", s)}, deq


def gptq(name, W, bits, group, sym, desc_act, v1):
    N, K = W.shape
    rng = rng_for(name)
    maxq = 2 ** bits - 1
    g = K if group == -1 else group
    G = math.ceil(K / g)
    if desc_act:
        perm = rng.permutation(K)
        g_idx = np.empty(K, dtype=np.int64)
        g_idx[perm] = np.arange(K) // g
    else:
        g_idx = np.arange(K) // g
    scales = np.zeros((G, N), dtype=np.float16)
    zeros = np.zeros((G, N), dtype=np.int64)
    q = np.zeros((N, K), dtype=np.int64)
    for gi in range(G):
        cols = np.nonzero(g_idx == gi)[0]
        Wg = W[:, cols].astype(np.float64)
        xmin = np.minimum(Wg.min(1), 0)
        xmax = np.maximum(Wg.max(1), 0)
        if sym:
            xmax = np.maximum(-xmin, xmax)
            xmin = -xmax
        sc = np.maximum((xmax - xmin) / maxq, 1e-8).astype(np.float16)
        z = np.full(N, (maxq + 1) // 2) if sym else np.round(-xmin / sc.astype(np.float64)).astype(np.int64)
        scales[gi], zeros[gi] = sc, z
        q[:, cols] = np.clip(np.round(Wg / sc.astype(np.float64)[:, None]) + z[:, None], 0, maxq)
    stored_z = (zeros - 1) & maxq if v1 else zeros
    decoded_z = stored_z + 1 if v1 else stored_z  # what a GPTQ reader gets back
    deq = (scales.astype(np.float32)[g_idx].T * (q - decoded_z[g_idx].T).astype(np.float32)).astype(np.float32)
    t = {"qweight": ("I32", pack(q.T, bits, 0)), "qzeros": ("I32", pack(stored_z, bits, 1)),
         "scales": ("F16", scales), "g_idx": ("I32", g_idx.astype(np.int32))}
    return t, deq


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_pack(vals):  # [R, N] 4-bit -> [R, N/8], nibble i of word c = column 8c + AWQ_ORDER[i]
    R, N = vals.shape
    out = np.zeros((R, N // 8), dtype=np.int64)
    for c in range(N // 8):
        for i in range(8):
            out[:, c] |= vals[:, c * 8 + AWQ_ORDER[i]].astype(np.int64) << (4 * i)
    return to_int32(out)


def awq(name, W, group):
    N, K = W.shape
    G = K // group
    Wg = W.reshape(N, G, group).astype(np.float64)
    mx, mn = Wg.max(2), Wg.min(2)
    sc = np.maximum((mx - mn) / 15, 1e-5).astype(np.float16)
    z = np.clip(-np.round(mn / sc.astype(np.float64)), 0, 15).astype(np.int64)
    q = np.clip(np.round(Wg / sc.astype(np.float64)[..., None]) + z[..., None], 0, 15).astype(np.int64)
    deq = ((q - z[..., None]).astype(np.float32) * sc.astype(np.float32)[..., None]).reshape(N, K)
    return {"qweight": ("I32", awq_pack(q.reshape(N, K).T)), "qzeros": ("I32", awq_pack(z.T)),
            "scales": ("F16", sc.T.copy())}, deq.astype(np.float32)


def ct_packed(name, W, bits, group, sym, actorder):
    N, K = W.shape
    rng = rng_for(name)
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    g = K if group is None else group
    G = math.ceil(K / g)
    if actorder:
        perm = rng.permutation(K)
        g_idx = np.empty(K, dtype=np.int64)
        g_idx[perm] = np.arange(K) // g
    else:
        g_idx = np.arange(K) // g
    scale = np.zeros((N, G), dtype=np.float32)
    zp = np.zeros((N, G), dtype=np.int64)
    q = np.zeros((N, K), dtype=np.int64)
    for gi in range(G):
        cols = np.nonzero(g_idx == gi)[0]
        Wg = W[:, cols].astype(np.float64)
        if sym:
            sc = bf16_round(np.maximum(np.abs(Wg).max(1), 1e-8) / ((qmax - qmin) / 2))
            z = np.zeros(N, dtype=np.int64)
        else:
            mn, mx = np.minimum(Wg.min(1), 0), np.maximum(Wg.max(1), 0)
            sc = bf16_round(np.maximum(mx - mn, 1e-8) / (qmax - qmin))
            z = np.clip(qmin - np.round(mn / sc), qmin, qmax).astype(np.int64)
        scale[:, gi], zp[:, gi] = sc, z
        q[:, cols] = np.clip(np.round(Wg / sc.astype(np.float64)[:, None]) + z[:, None], qmin, qmax)
    deq = ((q - zp[:, g_idx]).astype(np.float32) * scale[:, g_idx]).astype(np.float32)
    t = {"weight_packed": ("I32", pack(q + 2 ** (bits - 1), bits, 1)),
         "weight_scale": ("BF16", bf16_bits(scale if group is not None else scale[:, :1])),
         "weight_shape": ("I64", np.array([N, K], dtype=np.int64))}
    if not sym:
        t["weight_zero_point"] = ("I32", pack(zp + 2 ** (bits - 1), bits, 0))
    if actorder:
        t["weight_g_idx"] = ("I32", g_idx.astype(np.int32))
    return t, deq


def ct_fp8(name, W, strategy, input_scale=None):
    if strategy == "channel":
        s = np.maximum(np.abs(W).max(1, keepdims=True) / np.float32(448), np.float32(1e-12)).astype(np.float32)
    else:
        s = np.array([max(np.abs(W).max() / np.float32(448), 1e-12)], dtype=np.float32)
    codes = e4m3_encode(W / s)
    t = {"weight": ("F8_E4M3", codes), "weight_scale": ("F32", s)}
    if input_scale is not None:
        t["input_scale"] = ("F32", np.array([input_scale], dtype=np.float32))
    return t, (e4m3_decode(codes) * s).astype(np.float32)


def ct_int8(name, W):
    s = np.maximum(np.abs(W).max(1, keepdims=True) / np.float32(127), np.float32(1e-12)).astype(np.float32)
    q = np.clip(np.rint(W / s), -127, 127).astype(np.int8)
    return {"weight": ("I8", q), "weight_scale": ("F32", s)}, (q.astype(np.float32) * s).astype(np.float32)


# ------------------------------------------------------------------------------------- fixtures
def ct_config(weights, fmt, input_activations=None):
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": input_activations, "output_activations": None}},
            "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$", "re:.*in_proj_a$", "re:.*in_proj_b$"]}


def int_args(bits, group, sym, actorder=None):
    return {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "group" if group else "channel",
            "group_size": group, "dynamic": False, "actorder": actorder, "block_structure": None}


FP8_W = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False}
SMALL = {"in_proj_a", "in_proj_b"}  # [4, 64] in the hybrid fixture: too few rows for N-packed formats
CASES = {
    "qwen3_moe_fp8_block32": ("qwen3_moe", {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                            "weight_block_size": [32, 32], "modules_to_not_convert": ["lm_head"]},
                              lambda n, W: fp8_block(n, W, 32, 32), set()),
    "qwen3_5_moe_fp8_block128": ("qwen3_5_moe", {"quant_method": "fp8", "fmt": "e4m3",
                                                 "activation_scheme": "dynamic", "weight_block_size": [128, 128],
                                                 "modules_to_not_convert": ["lm_head", "in_proj_a", "in_proj_b"]},
                                 lambda n, W: fp8_block(n, W, 128, 128), SMALL),
    "qwen3_moe_gptq_int4_g32_sym": ("qwen3_moe", {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True,
                                                  "desc_act": False, "checkpoint_format": "gptq"},
                                    lambda n, W: gptq(n, W, 4, 32, True, False, True), set()),
    "qwen3_moe_gptq_int4_g32_asym_actorder": ("qwen3_moe", {"quant_method": "gptq", "bits": 4, "group_size": 32,
                                                            "sym": False, "desc_act": True,
                                                            "checkpoint_format": "gptq"},
                                              lambda n, W: gptq(n, W, 4, 32, False, True, True), set()),
    "qwen3_moe_gptq_int8_channel_v2": ("qwen3_moe", {"quant_method": "gptq", "bits": 8, "group_size": -1,
                                                     "sym": True, "desc_act": False, "checkpoint_format": "gptq_v2"},
                                       lambda n, W: gptq(n, W, 8, -1, True, False, False), set()),
    "qwen3_5_moe_gptq_int4_g32": ("qwen3_5_moe", {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True,
                                                  "desc_act": False, "checkpoint_format": "gptq"},
                                  lambda n, W: gptq(n, W, 4, 32, True, False, True), SMALL),
    "qwen3_moe_awq_int4_g32": ("qwen3_moe", {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
                                             "version": "gemm", "modules_to_not_convert": None},
                               lambda n, W: awq(n, W, 32), set()),
    "qwen3_moe_ct_w4a16_g32": ("qwen3_moe", ct_config(int_args(4, 32, True), "pack-quantized"),
                               lambda n, W: ct_packed(n, W, 4, 32, True, False), set()),
    "qwen3_5_moe_ct_w4a16_g32_asym_actorder": ("qwen3_5_moe",
                                               ct_config(int_args(4, 32, False, "group"), "pack-quantized"),
                                               lambda n, W: ct_packed(n, W, 4, 32, False, True), SMALL),
    "qwen3_moe_ct_w8a16_channel": ("qwen3_moe", ct_config(int_args(8, None, True), "pack-quantized"),
                                   lambda n, W: ct_packed(n, W, 8, None, True, False), set()),
    "qwen3_moe_ct_fp8_dynamic": ("qwen3_moe", ct_config(dict(FP8_W, strategy="channel"), "float-quantized",
                                                        dict(FP8_W, strategy="token", dynamic=True)),
                                 lambda n, W: ct_fp8(n, W, "channel"), set()),
    "qwen3_moe_ct_fp8_static": ("qwen3_moe", ct_config(dict(FP8_W, strategy="tensor"), "float-quantized",
                                                       dict(FP8_W, strategy="tensor")),
                                lambda n, W: ct_fp8(n, W, "tensor", input_scale=8.0 / 448.0), set()),
    "qwen3_moe_ct_w8a8_int8": ("qwen3_moe", ct_config(dict(FP8_W, type="int", strategy="channel"), "int-quantized",
                                                      dict(FP8_W, type="int", strategy="token", dynamic=True)),
                               lambda n, W: ct_int8(n, W), set()),
}


def make(case, base, qcfg, fn, keep_float):
    src = read_safetensors(os.path.join(BASE, base, "model.safetensors"))
    out = os.path.join(OUT, case)
    os.makedirs(os.path.join(out, "dequantized"), exist_ok=True)
    stored, deq = {}, {}
    for k, v in src.items():
        module = k[:-len(".weight")] if k.endswith(".weight") else k
        if LINEAR.match(k) and module.split(".")[-1] not in keep_float:
            tensors, W_hat = fn(k, v.astype(np.float32))
            for suffix, t in tensors.items():
                stored[module + "." + suffix] = t
            deq[k] = ("F32", W_hat)
        else:
            stored[k] = ("BF16", bf16_bits(v))
            deq[k] = ("F32", v.astype(np.float32))
    cfg = json.load(open(os.path.join(BASE, base, "config.json")))
    json.dump(cfg, open(os.path.join(out, "dequantized", "config.json"), "w"), indent=1)
    cfg["quantization_config"] = qcfg
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    for d in (out, os.path.join(out, "dequantized")):
        shutil.copy(os.path.join(BASE, base, "generation_config.json"), d)
    write_safetensors(os.path.join(out, "model.safetensors"), stored)
    write_safetensors(os.path.join(out, "dequantized", "model.safetensors"), deq)


def load_expectations():
    src = read_safetensors(os.path.join(BASE, "qwen3_moe", "model.safetensors"))
    for kind in ("int8", "int4", "fp8"):
        out = os.path.join(OUT, "load_" + kind)
        os.makedirs(out, exist_ok=True)
        expected, deq = {}, {}
        for k, v in src.items():
            if not LINEAR.match(k):
                deq[k] = ("F32", v.astype(np.float32))
                continue
            W = v.astype(np.float32)
            N, K = W.shape
            group = min(128, K) if kind == "int4" else K
            Wg = W.reshape(N, K // group, group)
            qmax = np.float32({"int8": 127.0, "int4": 7.0, "fp8": 448.0}[kind])
            amax = np.abs(Wg).max(2)
            scale = np.where(amax > 0, amax / qmax, np.float32(1)).astype(np.float32)  # f32 division
            x = (Wg / scale[..., None]).astype(np.float32)
            if kind == "fp8":
                codes = e4m3_encode(x).reshape(N, K)
            else:
                codes = np.clip(np.rint(x), -127 if kind == "int8" else -8, qmax).astype(np.int8).reshape(N, K)
            expected[k + ".codes"] = ("U8" if kind == "fp8" else "I8", codes)
            expected[k + ".scales"] = ("F32", scale)
            values = e4m3_decode(codes) if kind == "fp8" else codes.astype(np.float32)
            deq[k] = ("F32", (values.reshape(N, K // group, group) * scale[..., None]).reshape(N, K).astype(np.float32))
        write_safetensors(os.path.join(out, "expected.safetensors"), expected)
        os.makedirs(os.path.join(out, "dequantized"), exist_ok=True)
        for f in ("config.json", "generation_config.json"):
            shutil.copy(os.path.join(BASE, "qwen3_moe", f), os.path.join(out, "dequantized"))
        write_safetensors(os.path.join(out, "dequantized", "model.safetensors"), deq)


if __name__ == "__main__":
    for case, (base, qcfg, fn, keep) in CASES.items():
        make(case, base, qcfg, fn, keep)
    load_expectations()
    print("quantized checkpoints written to", OUT)

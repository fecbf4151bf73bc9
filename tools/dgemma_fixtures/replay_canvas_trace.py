#!/usr/bin/env python3
"""Replays tessera's recorded canvas draws through dgemma_doc_model.DocModel.generate (docs/DIFFUSION_GEMMA.md
section 6 in float64) and writes what the doc model computes, for tests/golden/engine_dgemma_canvas_test.cpp
to compare with the engine's own trace. SELF-CONSISTENCY: both sides read the same document.

Usage: /usr/bin/python3 tools/dgemma_fixtures/replay_canvas_trace.py CHECKPOINT_DIR TRACE.json OUT.json
CHECKPOINT_DIR: a bf16 safetensors checkpoint (make_dgemma_selfcheck.py's dgemma_tiny_a).
TRACE.json: {"params": {generation_config knobs}, "round_s_to_bf16": bool, "requests": [{"id", "prompt",
  "eos_ids", "max_tokens", "logits": "file.npy" ([steps, C, vocab] f32: the engine's logits of each
  step in order, to measure the difference), "canvases": [{"initial": [C], "steps": [{"uniforms": [C],
  "noise": [C]}, ...]}, ...]}, ...]}
OUT.json: {"requests": [{"id", "steps": [{"canvas", "step", "entropy", "argmax", "sampled", "margin",
  "accepted", "next", "stop"}, ...], "committed", "output", "finish", "max_logits_diff", "max_entropy_diff"
  (against the engine's logits' entropies: computed here from the .npy)}]}
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dgemma_doc_model as dm  # noqa: E402


def read_safetensors(path):
    """name -> float64 array (BF16 / F32 tensors only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            if info["dtype"] == "BF16":
                bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
                v = bits.view(np.float32)
            elif info["dtype"] == "F32":
                v = np.frombuffer(raw, dtype=np.float32)
            else:
                raise ValueError(f"{name}: dtype {info['dtype']} not handled")
            out[name] = v.astype(np.float64).reshape(info["shape"])
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    ckpt, trace_path, out_path = sys.argv[1:]
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    sd = {k: v for k, v in read_safetensors(os.path.join(ckpt, "model.safetensors")).items()
          if not k.startswith("model.encoder.vision")}
    doc = dm.DocModel(sd, cfg["text_config"], cfg)
    trace = json.load(open(trace_path))
    results = []
    for req in trace["requests"]:
        g = doc.generate(req["prompt"], req["canvases"], trace["params"], req["eos_ids"], req["max_tokens"],
                         trace.get("round_s_to_bf16", False))
        engine_logits = np.load(os.path.join(os.path.dirname(trace_path), req["logits"])).astype(np.float64)
        steps, i, worst, worst_h = [], 0, 0.0, 0.0
        for b, canvas in enumerate(g["canvases"]):
            for k, st in enumerate(canvas):
                if i < engine_logits.shape[0]:
                    el = engine_logits[i]
                    worst = max(worst, float(np.abs(el - st["logits"]).max()))
                    T = trace["params"]["t_min"] + (trace["params"]["t_max"] - trace["params"]["t_min"]) * \
                        (trace["params"]["max_denoising_steps"] - k) / trace["params"]["max_denoising_steps"]
                    z = el / T
                    m = z.max(-1, keepdims=True)
                    e = np.exp(z - m)
                    H = np.log(e.sum(-1)) - (e * (z - m)).sum(-1) / e.sum(-1)
                    worst_h = max(worst_h, float(np.abs(H - st["entropy"]).max()))
                i += 1
                steps.append(dict(canvas=b, step=k, entropy=[float(v) for v in st["entropy"]],
                                  argmax=[int(v) for v in st["argmax"]], sampled=[int(v) for v in st["sampled"]],
                                  margin=[float(v) for v in st["margin"]],
                                  accepted=[int(v) for v in st["accepted"]], next=[int(v) for v in st["next"]],
                                  stop=st["stop"]))
        results.append(dict(id=req["id"], steps=steps, committed=g["committed"], output=g["output"],
                            finish=g["finish"], max_logits_diff=worst, max_entropy_diff=worst_h))
    with open(out_path, "w") as f:
        json.dump(dict(requests=results), f)


if __name__ == "__main__":
    main()

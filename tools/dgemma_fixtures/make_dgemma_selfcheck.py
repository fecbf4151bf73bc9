#!/usr/bin/env python3
"""DiffusionGemma SELF-CONSISTENCY data (not a reference): a tiny random checkpoint written with numpy
alone, and the logits that dgemma_doc_model.py (docs/DIFFUSION_GEMMA.md as float64 code) computes on
it: the encoder's over the prompt, then two denoising steps of the canvas decoder after that prompt
(step 1 without self-conditioning, step 2 self-conditioned on step 1's processed logits S = logits /
t_max). tests/golden/model_dgemma_selfcheck_test.cpp runs it into a scratch directory and holds
tessera's C++ encoder and decoder to those logits (1e-3). Both sides were written from the same document, so
agreement says the C++ does what the document says, not that the document is what transformers does:
make_dgemma_fixtures.py's transformers references (GPU machine) settle that, and replace this check.

The shape is make_dgemma_fixtures.py's dgemma_tiny_a (sliding window 8 < the 24-token prompt, tied
lm_head, global layers with head dim 32 and one KV head, proportional RoPE 0.25), its initialisation
rules likewise (every weight bf16-representable, stored as bf16). The file holds the saved layout of
docs section 4: model.decoder.* (the tied stack, self-conditioning included), both stacks'
layer_scalar (different values, so the encoder's is the one checked), no lm_head.weight, and one
vision-tower tensor the loader must skip. dgemma_tiny_untied is the same shape with
tie_word_embeddings false: model.decoder.* and model.encoder.language_model.* each a whole stack of
their own (embedding, layers, final norm) and lm_head.weight, as transformers saves an untied model
(the doc model agreed with transformers on such a checkpoint, dgemma_tiny_b, docs section 8).

Usage: /usr/bin/python3 tools/dgemma_fixtures/make_dgemma_selfcheck.py OUT
Writes OUT/dgemma_tiny_a/{config.json, generation_config.json, model.safetensors, selfcheck.json,
encoder_logits.npy ([24, 512] f64), decoder_step1_logits.npy and decoder_step2_logits.npy ([16, 512]
f64, the generation path's sliding rule "cache_last_w_minus_1"), decoder_step1_whole_prefix_logits.npy
(the other rule, which the test must NOT match: it shows the window is exercised),
self_conditioning_step2.npy ([16, 64] f64: softmax(S) @ embed_tokens * sqrt(H), the decoder's
self-conditioning input of step 2 in the form tessera takes it), self_conditioning_step2_stored.npy (the
same with S = bf16(f32(step 1) / f32(t_max)), as a bf16 model stores S)}; and OUT/dgemma_tiny_untied/ the
same for the shape with tie_word_embeddings false (two whole stacks, lm_head.weight; docs OPEN 5);
about 3 MB, under a second.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dgemma_doc_model as dm  # noqa: E402

SEED = 1234
PROMPT_LEN = 24
T_MAX = 0.8  # generation_config's t_max: the first step's temperature
TEXT = dict(model_type="diffusion_gemma_text", vocab_size=512, hidden_size=64, intermediate_size=128,
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
            num_global_key_value_heads=1, num_experts=8, top_k_experts=2, moe_intermediate_size=32,
            sliding_window=8,
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                "rope_theta": 1000000.0}},
            hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=4096,
            use_bidirectional_attention="vision", attention_bias=False, final_logit_softcapping=30.0,
            pad_token_id=0, eos_token_id=1, bos_token_id=2)
CONFIG = dict(architectures=["DiffusionGemmaForBlockDiffusion"], model_type="diffusion_gemma", text_config=TEXT,
              vision_config=dict(model_type="gemma4_vision", hidden_size=64), canvas_length=16,
              tie_word_embeddings=True, eos_token_id=[1, 106])


def bf16_bits(a):
    """float32 -> bf16 bit patterns, round to nearest even."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def tensors(rng, untied):
    """name -> float32 array (bf16-representable), initialised as make_dgemma_fixtures.randomize does."""
    t = TEXT
    H, V, F, E, I, nh = (t["hidden_size"], t["vocab_size"], t["intermediate_size"], t["num_experts"],
                         t["moe_intermediate_size"], t["num_attention_heads"])
    out = {}

    def put(name, shape):
        n = rng.standard_normal(shape)
        u = rng.random(shape)
        if name.endswith("router.scale") or name.endswith("per_expert_scale") or name.endswith("layer_scalar"):
            v = 0.5 + u
        elif len(shape) == 1 and "norm" in name:
            v = 1.0 + 0.2 * n
        elif name.endswith("experts.gate_up_proj"):
            v = n * H ** -0.5
        elif name.endswith("experts.down_proj"):
            v = n * I ** -0.5
        elif "embed_tokens" in name or name == "lm_head.weight":
            v = n
        elif len(shape) == 2:
            v = n * shape[1] ** -0.5
        else:
            v = 0.1 * n
        out[name] = bf16_value(bf16_bits(v))

    def put_stack(P, scalars):
        """One stack's weights under prefix P (embedding, layers, final norm); with `scalars`, both
        stacks' layer_scalar buffers in each layer (drawn where the tied shape always drew them)."""
        put(P + "embed_tokens.weight", (V, H))
        for l, kind in enumerate(t["layer_types"]):
            sliding = kind == "sliding_attention"
            d = t["head_dim"] if sliding else t["global_head_dim"]
            kv = t["num_key_value_heads"] if sliding else t["num_global_key_value_heads"]
            p = f"{P}layers.{l}."
            for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                      "post_feedforward_layernorm_1", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2",
                      "post_feedforward_layernorm"):
                put(p + n + ".weight", (H,))
            put(p + "self_attn.q_proj.weight", (nh * d, H))
            put(p + "self_attn.k_proj.weight", (kv * d, H))
            if sliding:  # global layers take V from K (no v_proj)
                put(p + "self_attn.v_proj.weight", (kv * d, H))
            put(p + "self_attn.o_proj.weight", (H, nh * d))
            put(p + "self_attn.q_norm.weight", (d,))
            put(p + "self_attn.k_norm.weight", (d,))
            put(p + "mlp.gate_proj.weight", (F, H))
            put(p + "mlp.up_proj.weight", (F, H))
            put(p + "mlp.down_proj.weight", (H, F))
            put(p + "router.proj.weight", (E, H))
            put(p + "router.scale", (H,))
            put(p + "router.per_expert_scale", (E,))
            put(p + "experts.gate_up_proj", (E, 2 * I, H))
            put(p + "experts.down_proj", (E, H, I))
            if scalars:
                put(f"{dm.DEC}layers.{l}.layer_scalar", (1,))
                put(f"{dm.ENC}layers.{l}.layer_scalar", (1,))  # the encoder stack's own buffer
        put(P + "norm.weight", (H,))

    D = dm.DEC
    put_stack(D, True)
    if untied:  # the encoder's own stack (transformers unties every stack weight, docs section 4)
        put_stack(dm.ENC, False)
        put("lm_head.weight", (V, H))
    put(D + "self_conditioning.pre_norm.weight", (H,))
    put(D + "self_conditioning.gate_proj.weight", (F, H))
    put(D + "self_conditioning.up_proj.weight", (F, H))
    put(D + "self_conditioning.down_proj.weight", (H, F))
    put("model.encoder.vision_tower.patch_embedder.input_proj.weight", (8, 4))  # skipped by the loader
    return out


def write_safetensors(path, named):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(named):
        b = bf16_bits(named[name]).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(named[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_shape(out, name, untied, seed):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    named = tensors(rng, untied)
    prompt = [int(x) for x in rng.integers(3, TEXT["vocab_size"], PROMPT_LEN)]
    config = dict(CONFIG, tie_word_embeddings=not untied)
    write_safetensors(os.path.join(d, "model.safetensors"), named)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(dict(max_new_tokens=256, max_denoising_steps=48, t_min=0.4, t_max=0.8, stability_threshold=1,
                       confidence_threshold=0.005, eos_token_id=[1, 106, 50], pad_token_id=0, bos_token_id=2,
                       sampler_config={"entropy_bound": 0.1, "_cls_name": "EntropyBoundSamplerConfig"}), f, indent=1)
    doc = dm.DocModel({k: v for k, v in named.items() if not k.startswith("model.encoder.vision")}, TEXT, config)
    logits, _, _ = doc.encode(prompt)
    np.save(os.path.join(d, "encoder_logits.npy"), logits.astype(np.float64))
    # Two denoising steps of one canvas after the prompt (docs 5, 6). The canvases are arbitrary
    # tokens: the check is of the decoder's function, not of the sampler.
    C = CONFIG["canvas_length"]
    canvas1 = [int(x) for x in rng.integers(0, TEXT["vocab_size"], C)]
    canvas2 = [int(x) for x in rng.integers(0, TEXT["vocab_size"], C)]
    step1 = doc.decode(canvas1)
    s1 = step1 / T_MAX  # the processed logits fed back
    soft = dm.softmax(s1, -1) @ doc.w("dec", "embed_tokens.weight") * doc.scale
    step2 = doc.decode(canvas2, sc_logits=s1)
    np.save(os.path.join(d, "decoder_step1_logits.npy"), step1.astype(np.float64))
    np.save(os.path.join(d, "decoder_step2_logits.npy"), step2.astype(np.float64))
    np.save(os.path.join(d, "self_conditioning_step2.npy"), soft.astype(np.float64))
    # The same input as a bf16 model stores S (docs 5): z = f32(step 1) / f32(t_max) rounded to bf16,
    # what Model::SelfConditioningInput computes from the f32 logits it is given.
    z = np.float32(step1.astype(np.float32)) / np.float32(T_MAX)
    stored = dm.softmax(bf16_value(bf16_bits(z)).astype(np.float64), -1) @ doc.w("dec", "embed_tokens.weight")
    np.save(os.path.join(d, "self_conditioning_step2_stored.npy"), (stored * doc.scale).astype(np.float64))
    np.save(os.path.join(d, "decoder_step1_whole_prefix_logits.npy"),
            doc.decode(canvas1, rule="whole_prefix").astype(np.float64))
    with open(os.path.join(d, "selfcheck.json"), "w") as f:
        json.dump(dict(kind="self-consistency of docs/DIFFUSION_GEMMA.md (NOT a transformers reference)",
                       generator="tools/dgemma_fixtures/make_dgemma_selfcheck.py", seed=seed, prompt_ids=prompt,
                       tied=not untied,
                       encoder_logits="encoder_logits.npy [24, 512] f64 from dgemma_doc_model.DocModel.encode",
                       sliding_window=TEXT["sliding_window"], canvas_step1_ids=canvas1, canvas_step2_ids=canvas2,
                       decoder_sliding_rule="cache_last_w_minus_1", step1_temperature=T_MAX,
                       decoder_logits="decoder_step{1,2}_logits.npy [16, 512] f64 from DocModel.decode after the "
                                      "prompt; step 2 with sc_logits = step 1 / step1_temperature",
                       self_conditioning="self_conditioning_step2.npy [16, 64] f64 = softmax(step1 / "
                                         "step1_temperature) @ embed_tokens * sqrt(hidden) (the decoder "
                                         "stack's embed_tokens)"), f, indent=1)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write_shape(sys.argv[1], "dgemma_tiny_a", False, SEED)
    # The untied shape's seed: its decoder's f32 rounding error (doc model in f32 against f64, one step:
    # 4.6e-5) about the tied shape's (6.5e-5); seeds run 4.6e-5 .. 2.4e-4 for either kind, and the
    # engine's canvas replay compounds it through self-conditioning from step to step.
    write_shape(sys.argv[1], "dgemma_tiny_untied", True, SEED + 2)


if __name__ == "__main__":
    main()

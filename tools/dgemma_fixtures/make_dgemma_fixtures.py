#!/usr/bin/env python3
"""NOT YET RUN when written (no torch on the machine it was written on): DiffusionGemma reference
fixtures for issue 31, for the GPU machine (python3 with torch 2.11 + transformers 5.17, no network).

For two tiny random shapes it builds DiffusionGemmaForBlockDiffusion with every weight rounded to a
bf16-representable value, saves an ordinary HF checkpoint under OUT/<shape>/ (config.json,
generation_config.json, model.safetensors in bf16), reloads it in float64 (eager attention and
experts) and records, next to it:
  reference.json          everything small: versions, signatures, config as parsed, tensor names and
                          shapes of the saved file, which weights are tied, RoPE inv_freq per layer
                          type, layer_scalars, ids, canvases, temperatures, generation traces, errors;
  encoder_logits.npy      [P, V] f64: lm_head + soft-cap over the encoder's final hidden states of the
                          prompt (the encoder itself makes no logits; this checks the stack row by row)
  encoder_hidden_states.npy  [L+2, P, H] f64: input of layer 0, output of each layer, after the norm
  encoder_kv_layer{i}_{k,v}.npy  [kv_heads, T_kept, d] f64: the cache after the prompt (sliding layers
                          keep only their last W-1 tokens in HF's DynamicCache)
  decoder_step1_logits.npy / _hidden_states.npy   first denoising step, no self-conditioning
  decoder_step2_sc_logits.npy (the self-conditioning input, f64) / decoder_step2_logits.npy
  decoder_tensorkv_step1_logits.npy   the same step 1 through forward(input_ids=prompt) without a cache
                          (HF's training path; differs from step 1 when the prompt exceeds the window)
  commit_encoder_logits.npy / decoder_after_commit_logits.npy   a canvas encoded into the cache, then a
                          step of the next canvas
  trace_<case>_raw_logits.npy  [steps, C, V] f32: the decoder logits of every step of a seeded
                          generate(), in order (reference.json's trace says which canvas / step)
reference.json's doc_model_check compares all of it with dgemma_doc_model.py (docs/DIFFUSION_GEMMA.md
written as plain code, no transformers): max |diff| per output, `agrees_within_1e-3`, and which of the
candidate sliding-window rules of the decoder transformers follows (docs OPEN 2).
Each part runs in its own try/except: a failure prints its traceback, lands in reference.json's
"errors" and the rest goes on. OUT/summary.json lists what each shape produced.
OUT/_sources_do_not_commit/ holds the text of the transformers modules used, for reading only (it is
transformers' code: never copy it into the repository).

Usage:  python3 tools/dgemma_fixtures/make_dgemma_fixtures.py OUT [--device cpu|cuda] [--only NAME]
Runtime: well under a minute per shape on CPU (tiny models).
"""
import argparse
import hashlib
import inspect
import json
import os
import sys
import time
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # dgemma_doc_model.py beside this file

SEED = 1234

# Two shapes. A: sliding window (8) far smaller than the prompt (24), tied lm_head (the published
# layout), one global KV head. B: window 64 (exceeded only late in generation), top-level
# tie_word_embeddings false (HF then unties lm_head AND the encoder/decoder stacks), non-square
# sqrt(hidden) so the embedding scale's bf16 rounding shows, partial_rotary_factor 0.5.
SHAPES = [
    dict(name="dgemma_tiny_a", tie=True, canvas=16, prompt_len=24,
         text=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   global_head_dim=32, num_global_key_value_heads=1,
                   num_experts=8, top_k_experts=2, moe_intermediate_size=32, sliding_window=8,
                   rope_parameters={
                       "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                       "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                          "rope_theta": 1000000.0}})),
    dict(name="dgemma_tiny_b", tie=False, canvas=16, prompt_len=24,
         text=dict(vocab_size=512, hidden_size=128, intermediate_size=96, num_hidden_layers=5,
                   layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                "sliding_attention", "full_attention"],
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   global_head_dim=64, num_global_key_value_heads=2,
                   num_experts=16, top_k_experts=4, moe_intermediate_size=48, sliding_window=64,
                   rope_parameters={
                       "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                       "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                          "rope_theta": 1000000.0}})),
]
COMMON_TEXT = dict(hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=4096,
                   use_bidirectional_attention="vision", attention_bias=False,
                   pad_token_id=0, eos_token_id=1, bos_token_id=2)
# A vision tower is built (and saved, and skipped by tessera) as in the published checkpoint; keys as
# the converter passes them (global_head_dim included), tiny.
TINY_VISION = dict(model_type="gemma4_vision", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                   num_attention_heads=2, num_key_value_heads=2, head_dim=32, global_head_dim=32)
# The published generation_config.json's values (convert_diffusion_gemma_weights.py).
GEN_DEFAULTS = dict(max_new_tokens=256, max_denoising_steps=48, t_min=0.4, t_max=0.8, stability_threshold=1,
                    confidence_threshold=0.005, eos_token_id=[1, 106, 50], pad_token_id=0, bos_token_id=2)
GEN_ENTROPY_BOUND = 0.1
# Generation cases: the defaults (mostly one token accepted a step), and a loose one that accepts many
# tokens a step and stops early, so acceptance and stopping are both exercised.
GEN_CASES = [
    dict(case="defaults", max_new_tokens=32, overrides={}),
    dict(case="loose", max_new_tokens=64,
         overrides=dict(max_denoising_steps=8, entropy_bound=1.5, confidence_threshold=0.5)),
]


def log(*a):
    print(*a, flush=True)


def jsonable(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().tolist()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "to_dict"):
        try:
            return jsonable(x.to_dict())
        except Exception:
            pass
    return str(x)


def save_npy(d, name, t, dtype=np.float64):
    a = t.detach().to("cpu", torch.float64).numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    np.save(os.path.join(d, name), np.ascontiguousarray(a.astype(dtype)))
    return name


class Part:
    """Runs one part of the work; a failure is printed and recorded, never fatal."""

    def __init__(self, ref, name):
        self.ref, self.name = ref, name

    def __enter__(self):
        self.t0 = time.time()
        log(f"  [{self.name}] ...")
        return self

    def __exit__(self, et, ev, tb):
        dt = time.time() - self.t0
        if et is None:
            self.ref.setdefault("done", []).append(self.name)
            log(f"  [{self.name}] ok ({dt:.1f} s)")
        else:
            text = "".join(traceback.format_exception(et, ev, tb))
            self.ref.setdefault("errors", {})[self.name] = text
            log(f"  [{self.name}] FAILED ({dt:.1f} s)\n{text}")
        return True  # swallow


def import_classes():
    import transformers
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    gen_mod = __import__("transformers.models.diffusion_gemma.generation_diffusion_gemma",
                         fromlist=["DiffusionGemmaGenerationConfig"])
    return transformers, DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, gen_mod


def signatures(classes):
    out = {}
    transformers, Cfg, Model, gen_mod = classes
    from transformers import DynamicCache
    mdl = sys.modules[Model.__module__]
    items = {
        "DiffusionGemmaForBlockDiffusion.forward": Model.forward,
        "DiffusionGemmaForBlockDiffusion.generate": getattr(Model, "generate", None),
        "DiffusionGemmaForBlockDiffusion._denoising_step": getattr(Model, "_denoising_step", None),
        "DiffusionGemmaDecoderModel.forward": getattr(getattr(mdl, "DiffusionGemmaDecoderModel", None), "forward", None),
        "DiffusionGemmaEncoderModel.forward": getattr(getattr(mdl, "DiffusionGemmaEncoderModel", None), "forward", None),
        "DiffusionGemmaConfig": Cfg,
        "DiffusionGemmaTextConfig": getattr(sys.modules[Cfg.__module__], "DiffusionGemmaTextConfig", None),
        "DiffusionGemmaGenerationConfig.__init__": gen_mod.DiffusionGemmaGenerationConfig.__init__,
        "EntropyBoundSampler.accept_canvas": getattr(getattr(gen_mod, "EntropyBoundSampler", None), "accept_canvas", None),
        "DynamicCache.__init__": DynamicCache.__init__,
    }
    for k, f in items.items():
        try:
            out[k] = str(inspect.signature(f)) if f is not None else "MISSING"
        except Exception as e:  # builtins, dataclasses without text signatures
            out[k] = f"(no signature: {e})"
        log(f"  {k}{out[k]}")
    return out


def dump_sources(out_dir, classes):
    """The exact module text of this transformers, to settle docs/DIFFUSION_GEMMA.md's OPEN items."""
    transformers, Cfg, Model, gen_mod = classes
    d = os.path.join(out_dir, "_sources_do_not_commit")
    os.makedirs(d, exist_ok=True)
    hashes = {}
    names = [Model.__module__, Cfg.__module__, gen_mod.__name__, "transformers.cache_utils",
             "transformers.masking_utils", "transformers.modeling_rope_utils"]
    for n in names:
        try:
            src = inspect.getsource(sys.modules[n] if n in sys.modules else __import__(n, fromlist=["x"]))
            open(os.path.join(d, n.split(".")[-1] + ".py"), "w").write(src)
            hashes[n] = hashlib.sha256(src.encode()).hexdigest()
        except Exception as e:
            hashes[n] = f"unavailable: {e}"
    return hashes


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def randomize(model, shape, gen):
    """Random weights, every value bf16-representable; scales chosen so logits are peaked enough
    (std ~ 8 before the soft-cap) that acceptance takes several tokens in the loose case."""
    H = shape["text"]["hidden_size"]
    I = shape["text"]["moe_intermediate_size"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = torch.randn(p.shape, generator=gen)
            u = torch.rand(p.shape, generator=gen)
            if name.endswith("router.scale") or name.endswith("per_expert_scale"):
                v = 0.5 + u
            elif p.dim() == 1 and "norm" in name:
                v = 1.0 + 0.2 * n
            elif name.endswith("experts.gate_up_proj"):
                v = n * H ** -0.5
            elif name.endswith("experts.down_proj"):
                v = n * I ** -0.5
            elif "embed_tokens" in name or name == "lm_head.weight":
                v = n
            elif p.dim() == 2:
                v = n * p.shape[1] ** -0.5
            else:
                v = 0.1 * n
            p.copy_(bf16(v).to(p.dtype))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(bf16(0.5 + torch.rand(b.shape, generator=gen)).to(b.dtype))


def tie_report(model):
    """Which weights share storage (after tie_weights): settles OPEN 5 (untied = two stacks?)."""
    m = model.model
    rep = {}
    try:
        e = m.encoder.language_model
        d = m.decoder
        rep["encoder_decoder_q_proj_shared"] = (
            e.layers[0].self_attn.q_proj.weight.data_ptr() == d.layers[0].self_attn.q_proj.weight.data_ptr())
        rep["encoder_decoder_embed_shared"] = e.embed_tokens.weight.data_ptr() == d.embed_tokens.weight.data_ptr()
        rep["lm_head_shares_decoder_embed"] = model.lm_head.weight.data_ptr() == d.embed_tokens.weight.data_ptr()
        rep["encoder_decoder_q_proj_equal"] = bool(torch.equal(e.layers[0].self_attn.q_proj.weight,
                                                               d.layers[0].self_attn.q_proj.weight))
    except Exception as ex:
        rep["error"] = repr(ex)
    return rep


def new_cache(model):
    from transformers import DynamicCache
    try:
        return DynamicCache(config=model.config.get_text_config(decoder=True))
    except TypeError:
        return DynamicCache()


def cache_info(cache):
    out = []
    for layer in getattr(cache, "layers", []):
        k = getattr(layer, "keys", None)
        out.append(dict(type=type(layer).__name__,
                        keys_shape=list(k.shape) if isinstance(k, torch.Tensor) else None,
                        seq_length=int(layer.get_seq_length()) if hasattr(layer, "get_seq_length") else None))
    return out


class Tap:
    """Hidden states of a layer stack by hooks (independent of output_hidden_states conventions):
    row 0 the input of layer 0, row i the output of layer i, last row the final norm's output."""

    def __init__(self, layers, norm):
        self.layers, self.norm, self.rows, self.handles = layers, norm, [], []

    def __enter__(self):
        def pre(mod, args, kwargs):
            if not self.rows:
                self.rows.append((args[0] if args else kwargs["hidden_states"]).detach().clone())

        def post(mod, args, out):
            self.rows.append((out[0] if isinstance(out, (tuple, list)) else out).detach().clone())

        self.handles.append(self.layers[0].register_forward_pre_hook(pre, with_kwargs=True))
        for layer in self.layers:
            self.handles.append(layer.register_forward_hook(post))
        self.handles.append(self.norm.register_forward_hook(post))
        return self

    def __exit__(self, *a):
        for h in self.handles:
            h.remove()
        return False

    def stacked(self):
        return torch.stack([r[0] for r in self.rows])  # batch 0


def softcap(model, logits):
    cap = getattr(model, "final_logit_softcapping", None) or 30.0
    return cap * torch.tanh(logits / cap)


def entropy(z):
    return torch.distributions.Categorical(logits=z).entropy()


def traced_generate(model, gen_mod, ids, case, seed):
    """generate() with recorders around the sampler, the decoder forward and _denoising_step. Every
    random draw is recorded, so tessera's tests can replay the rules without torch's generator."""
    steps, draws = [], []
    st = dict(in_step=False, cur=None)
    orig_forward = model.forward
    orig_step = getattr(model, "_denoising_step", None)
    orig_prep = getattr(model, "_prepare_sampler", None)

    def forward(*a, **k):
        out = orig_forward(*a, **k)
        if st["in_step"]:
            st["cur"]["raw"] = out.logits[0].detach().clone()
        return out

    def prepare_sampler(gc):
        s = orig_prep(gc)
        orig_init, orig_accept = s.initialize_canvas, s.accept_canvas

        def initialize_canvas(*a, **k):
            x = orig_init(*a, **k)
            if st["in_step"]:
                st["cur"]["renoise_draw"] = x[0].tolist()
            else:
                draws.append(x[0].tolist())
            return x

        def accept_canvas(*a, **k):
            args = list(a) + [k.get(n) for n in ("current_canvas", "denoiser_canvas", "logits", "cur_step")[len(a):]]
            out = orig_accept(*a, **k)
            if st["in_step"]:
                z = args[2][0].detach().to(torch.float64)
                st["cur"].update(denoiser_canvas=args[1][0].tolist(), processed=z.clone(),
                                 accepted=s.accepted_token_mask[0].tolist())
            return out

        s.initialize_canvas, s.accept_canvas = initialize_canvas, accept_canvas
        return s

    def denoising_step(*a, **k):
        st["in_step"] = True
        cc = k.get("current_canvas")
        st["cur"] = dict(canvas_index=len(draws) - 1, cur_step=int(k.get("cur_step", -1)),
                         input_canvas=cc[0].tolist() if cc is not None else None,
                         had_self_conditioning=k.get("self_conditioning_logits") is not None)
        try:
            res = orig_step(*a, **k)
        finally:
            st["in_step"] = False
        try:
            st["cur"].update(next_canvas=res[0][0].tolist(), argmax_canvas=res[1][0].tolist(),
                             finished=bool(res[3][0]))
        except Exception as e:  # another return layout: keep what was recorded
            st["cur"]["result_error"] = repr(e)
        steps.append(st["cur"])
        return res

    model.forward = forward
    if orig_step is not None:
        model._denoising_step = denoising_step
    if orig_prep is not None:
        model._prepare_sampler = prepare_sampler
    try:
        kw = dict(max_new_tokens=case["max_new_tokens"])
        for k, v in case["overrides"].items():
            if k == "entropy_bound":
                kw["sampler_config"] = gen_mod.EntropyBoundSamplerConfig(entropy_bound=float(v))
            else:
                kw[k] = v
        torch.manual_seed(seed)
        seqs = model.generate(input_ids=ids, **kw)
    finally:
        for n in ("forward", "_denoising_step", "_prepare_sampler"):
            model.__dict__.pop(n, None)
    seqs = seqs.sequences if hasattr(seqs, "sequences") else seqs
    return seqs[0].tolist(), draws, steps, kw


def check_rules(steps, gc, entropy_bound):
    """Re-derives each recorded step from docs/DIFFUSION_GEMMA.md's rules (own code) and says where
    the doc and transformers disagree; an empty list means the doc's sampler is what ran."""
    bad, hist, prev_canvas = [], [], None
    N, tmin, tmax = gc["max_denoising_steps"], gc["t_min"], gc["t_max"]
    K, Q = gc["stability_threshold"], gc["confidence_threshold"]
    need = ("raw", "processed", "accepted", "denoiser_canvas", "next_canvas", "argmax_canvas", "finished")
    for i, s in enumerate(steps):
        if s["canvas_index"] != prev_canvas:  # the stopping history restarts with each canvas
            hist, prev_canvas = [], s["canvas_index"]
        t = tmin + (tmax - tmin) * s["cur_step"] / N
        s["temperature"] = t
        missing = [k for k in need if k not in s]
        if missing:
            bad.append((i, "not recorded: " + ",".join(missing)))
            continue
        z = s["processed"]
        if not torch.allclose(s["raw"].to(torch.float64) / t, z, rtol=1e-6, atol=1e-9):
            bad.append((i, "temperature"))
        H = entropy(z)
        s["entropy"] = H.tolist()
        acc, run, before = [False] * H.numel(), 0.0, [0.0] * H.numel()
        for r in torch.sort(H).indices.tolist():  # accepted iff the lower entropies sum to <= bound
            acc[r], before[r] = run <= entropy_bound, run
            run += float(H[r])
        if acc != s["accepted"]:
            # transformers sums f32 entropies: a row within 1e-4 of the bound may fall either way.
            near = all(abs(before[j] - entropy_bound) < 1e-4 for j in range(len(acc)) if acc[j] != s["accepted"][j])
            bad.append((i, "acceptance at the bound (precision)" if near else "acceptance"))
        if "renoise_draw" in s:
            want = [s["denoiser_canvas"][j] if acc[j] else s["renoise_draw"][j] for j in range(len(acc))]
            if want != s["next_canvas"]:
                bad.append((i, "renoise"))
        a = torch.argmax(z, dim=-1).tolist()
        if a != s["argmax_canvas"]:
            bad.append((i, "argmax"))
        stable = K == 0 or (len(hist) >= K and all(h == a for h in hist[-K:]))
        hist.append(a)
        if (stable and float(H.mean()) < Q) != s["finished"]:
            bad.append((i, "stopping at the threshold (precision)" if abs(float(H.mean()) - Q) < 1e-6 else "stopping"))
    return bad


def doc_model_check(m64, ref, got, prompt, canvas1, canvas2, commit, canvas3):
    """transformers against dgemma_doc_model.py (docs/DIFFUSION_GEMMA.md written as code): max |diff|
    per output, and which sliding-window rule of the decoder transformers follows (docs OPEN 2)."""
    import dgemma_doc_model as dm
    cfg = ref["config_json"]
    doc = dm.DocModel(m64.state_dict(), cfg["text_config"], cfg)
    diff = lambda a, b: float(np.abs(dm.to_f64(a) - dm.to_f64(b)).max())  # the doc model answers numpy
    out = {}
    if "enc" in got:
        lg, _, kv = doc.encode(prompt)
        out["encoder_logits"] = diff(lg, got["enc"])
        for i, (hk, hv) in enumerate(got.get("kv", [])):  # HF keeps the last T_kept positions
            n = hk.shape[1]
            dk = np.stack([k for _, k, _ in kv[i][-n:]]).transpose(1, 0, 2)
            dv = np.stack([v for _, _, v in kv[i][-n:]]).transpose(1, 0, 2)
            out[f"kv_layer{i}"] = max(diff(dk, hk), diff(dv, hv))
    else:
        doc.encode(prompt)
    steps = {}
    if "l1" in got:
        for rule in dm.SLIDING_RULES:
            steps[rule] = doc.decode(canvas1, None, rule)
            out[f"decoder_step1[{rule}]"] = diff(steps[rule], got["l1"])
        best = min(dm.SLIDING_RULES, key=lambda r: out[f"decoder_step1[{r}]"])
        out["decoder_step1"] = out[f"decoder_step1[{best}]"]
        distinct = diff(steps[dm.SLIDING_RULES[0]], steps[dm.SLIDING_RULES[1]]) > 1e-6
        out["decoder_sliding_rule"] = best if distinct else "indistinguishable here (prompt within the window)"
        if "tensorkv" in got:
            out["tensorkv_vs_whole_prefix"] = diff(steps["whole_prefix"], got["tensorkv"])
        if "l2" in got:
            out["decoder_step2"] = diff(doc.decode(canvas2, got["sc"], best), got["l2"])
        if "commit" in got:
            lg2, _, _ = doc.encode(commit)
            out["commit_logits"] = diff(lg2, got["commit"])
            if "l3" in got:
                out["decoder_after_commit"] = diff(doc.decode(canvas3, None, best), got["l3"])
    out["agrees_within_1e-3"] = all(v < 1e-3 for k, v in out.items() if isinstance(v, float) and
                                    not k.startswith("decoder_step1[") and k != "tensorkv_vs_whole_prefix")
    return out


def run_shape(shape, out_root, classes, device, summary):
    transformers, Cfg, Model, gen_mod = classes
    name = shape["name"]
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    ref = dict(shape=name, transformers_version=transformers.__version__, torch_version=torch.__version__,
               device=device, reference_dtype="float64", attn_implementation="eager", errors={}, done=[])
    log(f"== {name}")
    T = dict(COMMON_TEXT, **shape["text"], tie_word_embeddings=shape["tie"])
    C, P, V, H = shape["canvas"], shape["prompt_len"], T["vocab_size"], T["hidden_size"]
    gc_dict = dict(GEN_DEFAULTS)
    model = None

    with Part(ref, "build_and_save"):
        cfg = None
        for vision in (TINY_VISION, None):  # a vision tower may be mandatory in this version
            try:
                cfg = Cfg(text_config=dict(T), vision_config=dict(vision) if vision else None, canvas_length=C,
                          tie_word_embeddings=shape["tie"])
                try:  # as the converter does for -it checkpoints
                    cfg.eos_token_id = [1, 106]
                except Exception:
                    log("  could not set eos_token_id on the config:\n" + traceback.format_exc())
                torch.manual_seed(SEED)
                model = Model(cfg)
                ref["vision_config_used"] = vision
                break
            except Exception:
                log("  building with vision_config=%s failed:\n%s" % (vision, traceback.format_exc()))
                model = None
        if model is None:
            raise RuntimeError("could not build DiffusionGemmaForBlockDiffusion")
        randomize(model, shape, torch.Generator().manual_seed(SEED))
        try:  # the decoder's values become the encoder's / lm_head's where the config ties them
            model.tie_weights()
        except Exception:
            log("  tie_weights failed:\n" + traceback.format_exc())
        ref["tied_before_save"] = tie_report(model)
        gcfg = gen_mod.DiffusionGemmaGenerationConfig(
            sampler_config=gen_mod.EntropyBoundSamplerConfig(entropy_bound=GEN_ENTROPY_BOUND), **gc_dict)
        # As the converter does: the model first, then the generation config over whatever it wrote.
        model.to(torch.bfloat16).save_pretrained(d)
        try:
            gcfg.save_pretrained(d)
        except Exception:
            log("  generation_config.save_pretrained failed, writing it by hand:\n" + traceback.format_exc())
            j = dict(gc_dict, sampler_config={"entropy_bound": GEN_ENTROPY_BOUND,
                                              "_cls_name": "EntropyBoundSamplerConfig"},
                     transformers_version=transformers.__version__)
            json.dump(j, open(os.path.join(d, "generation_config.json"), "w"), indent=2)
        ref["config_json"] = json.load(open(os.path.join(d, "config.json")))
        ref["generation_config_json"] = json.load(open(os.path.join(d, "generation_config.json")))
        from safetensors import safe_open
        names = []
        for fn in sorted(f for f in os.listdir(d) if f.endswith(".safetensors")):
            with safe_open(os.path.join(d, fn), "pt") as f:
                for k in f.keys():
                    sl = f.get_slice(k)
                    names.append([k, list(sl.get_shape()), str(sl.get_dtype()), fn])
        ref["tensor_names"] = names
        log(f"  saved {len(names)} tensors")

    m64 = None
    with Part(ref, "reload_float64"):
        kw = dict(dtype=torch.float64, attn_implementation="eager")
        try:
            m64 = Model.from_pretrained(d, experts_implementation="eager", **kw)
        except Exception:
            log("  from_pretrained with experts_implementation failed, retrying without:\n" + traceback.format_exc())
            m64 = Model.from_pretrained(d, **kw)
        m64 = m64.to(device).eval()
        ref["tied_after_reload"] = tie_report(m64)
        ref["loaded_generation_config"] = jsonable(m64.generation_config)
        m64.generation_config = gen_mod.DiffusionGemmaGenerationConfig(
            sampler_config=gen_mod.EntropyBoundSamplerConfig(entropy_bound=GEN_ENTROPY_BOUND), **gc_dict)
        ref["param_shapes"] = {n: list(p.shape) for n, p in m64.named_parameters()}
        ref["layer_scalar"] = {n: float(b.reshape(-1)[0]) for n, b in m64.named_buffers() if n.endswith("layer_scalar")}
        ref["rope_inv_freq"] = {n: b.tolist() for n, b in m64.named_buffers()
                                if n.endswith("inv_freq") and "original" not in n and "vision" not in n}
        ref["final_logit_softcapping"] = getattr(m64, "final_logit_softcapping", None)
        ref["embed_scale_f64"] = H ** 0.5
        ref["embed_scale_bf16"] = float(torch.tensor(H ** 0.5).to(torch.bfloat16))
        if model is not None:  # the saved bf16 values must come back exactly
            sd = {k: v.float() for k, v in model.state_dict().items()}
            ref["reload_max_abs_diff"] = max(
                (float((p.detach().cpu().float() - sd[n]).abs().max()) for n, p in m64.named_parameters() if n in sd),
                default=None)
    if m64 is None:
        json.dump(jsonable(ref), open(os.path.join(d, "reference.json"), "w"), indent=1)
        summary[name] = dict(done=ref["done"], errors=list(ref["errors"]))
        return

    rng = np.random.RandomState(SEED + 1)
    prompt = [2] + rng.randint(3, V, size=P - 1).tolist()
    canvas1 = rng.randint(0, V, size=C).tolist()
    canvas2 = rng.randint(0, V, size=C).tolist()
    commit = rng.randint(3, V, size=C).tolist()
    canvas3 = rng.randint(0, V, size=C).tolist()
    ref.update(prompt_ids=prompt, canvas1=canvas1, canvas2=canvas2, commit_ids=commit, canvas3=canvas3)
    ids = torch.tensor([prompt], device=device)
    t = lambda x: torch.tensor([x], device=device)
    dec = m64.model.decoder
    enc_text = m64.model.encoder.language_model
    cache = None
    got = {}  # transformers' results, for the check against the document's model below

    with torch.no_grad():
        with Part(ref, "encoder"):
            cache = new_cache(m64)
            with Tap(enc_text.layers, enc_text.norm) as tap:
                eo = m64.model.encoder(input_ids=ids, past_key_values=cache)
            cache = getattr(eo, "past_key_values", None) or cache
            got["enc"] = softcap(m64, m64.lm_head(eo.last_hidden_state))[0]
            save_npy(d, "encoder_logits.npy", got["enc"])
            save_npy(d, "encoder_hidden_states.npy", tap.stacked())
            ref["encoder_hidden_rows"] = "row 0 input of layer 0 (scaled embedding), row i output of layer i, last after norm"
            ref["cache_after_prompt"] = cache_info(cache)
            got["kv"] = []
            for i, layer in enumerate(cache.layers):
                save_npy(d, f"encoder_kv_layer{i}_k.npy", layer.keys[0])
                save_npy(d, f"encoder_kv_layer{i}_v.npy", layer.values[0])
                got["kv"].append((layer.keys[0].clone(), layer.values[0].clone()))

        tmax = gc_dict["t_max"]
        with Part(ref, "decoder_steps"):
            with Tap(dec.layers, dec.norm) as tap:
                o1 = m64(past_key_values=cache, decoder_input_ids=t(canvas1))
            l1 = got["l1"] = o1.logits[0].to(torch.float64)
            save_npy(d, "decoder_step1_logits.npy", l1)
            save_npy(d, "decoder_step1_hidden_states.npy", tap.stacked())
            sc = got["sc"] = (l1 / tmax)  # what generate feeds back after a first step at T = t_max
            save_npy(d, "decoder_step2_sc_logits.npy", sc)
            o2 = m64(past_key_values=cache, decoder_input_ids=t(canvas2), self_conditioning_logits=sc[None])
            got["l2"] = o2.logits[0]
            save_npy(d, "decoder_step2_logits.npy", o2.logits[0])
            ref["decoder_step2"] = "canvas2 with self_conditioning_logits = decoder_step1_logits / t_max"
            ref["cache_after_decoder_steps"] = cache_info(cache)  # must equal cache_after_prompt

        with Part(ref, "decoder_tensorkv_path"):
            o = m64(input_ids=ids, decoder_input_ids=t(canvas1))
            got["tensorkv"] = o.logits[0]
            save_npy(d, "decoder_tensorkv_step1_logits.npy", o.logits[0])
            ref["tensorkv_vs_cached_step1_max_abs_diff"] = float((o.logits[0].double() - l1).abs().max())

        with Part(ref, "commit_then_step"):
            with Tap(enc_text.layers, enc_text.norm) as tap:
                eo2 = m64.model.encoder(input_ids=t(commit), past_key_values=cache)
            cache = getattr(eo2, "past_key_values", None) or cache
            save_npy(d, "commit_encoder_hidden_states.npy", tap.stacked())
            got["commit"] = softcap(m64, m64.lm_head(eo2.last_hidden_state))[0]
            save_npy(d, "commit_encoder_logits.npy", got["commit"])
            ref["cache_after_commit"] = cache_info(cache)
            o3 = m64(past_key_values=cache, decoder_input_ids=t(canvas3))
            got["l3"] = o3.logits[0]
            save_npy(d, "decoder_after_commit_logits.npy", o3.logits[0])

    with Part(ref, "doc_model_check"):
        ref["doc_model_check"] = doc_model_check(m64, ref, got, prompt, canvas1, canvas2, commit, canvas3)
        log("  " + json.dumps(ref["doc_model_check"]))

    traces = {}
    for case in GEN_CASES:
        with Part(ref, f"generate_{case['case']}"):
            seq, draws, steps, kw = traced_generate(m64, gen_mod, ids, case, SEED + 7)
            seq2, draws2, steps2, _ = traced_generate(m64, gen_mod, ids, case, SEED + 7)
            gc = dict(gc_dict)
            gc.update({k: v for k, v in case["overrides"].items() if k != "entropy_bound"})
            bound = case["overrides"].get("entropy_bound", GEN_ENTROPY_BOUND)
            bad = check_rules(steps, gc, bound)
            raws = [s.pop("raw") for s in steps if "raw" in s]
            for s in steps:
                s.pop("processed", None)
            for s in steps2:
                s.pop("raw", None), s.pop("processed", None)
            if raws:
                save_npy(d, f"trace_{case['case']}_raw_logits.npy", torch.stack(raws), np.float32)
            traces[case["case"]] = dict(
                generate_kwargs=jsonable(kw), seed=SEED + 7, torch_manual_seed_before_generate=True,
                effective_config=dict(gc, entropy_bound=bound), sequences=seq, new_tokens=seq[len(prompt):],
                canvas_init_draws=draws, steps=steps, deterministic=(seq == seq2 and draws == draws2),
                doc_rule_mismatches=bad, raw_logits_file=f"trace_{case['case']}_raw_logits.npy" if raws else None)
            log(f"  {case['case']}: {len(steps)} steps, {len(draws)} canvases, mismatches {bad[:5]}, "
                f"deterministic {traces[case['case']]['deterministic']}")
    ref["generation_traces"] = traces

    json.dump(jsonable(ref), open(os.path.join(d, "reference.json"), "w"), indent=1)
    summary[name] = dict(done=ref["done"], errors=list(ref["errors"]),
                         files=sorted(os.listdir(d)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--device", default="cpu", help="cpu (default: deterministic and fast enough) or cuda")
    ap.add_argument("--only", default=None, help="one shape name")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    torch.set_grad_enabled(False)
    summary = dict(python=sys.version, torch=torch.__version__)
    try:
        classes = import_classes()
    except Exception:
        log("cannot import DiffusionGemma from transformers:\n" + traceback.format_exc())
        summary["fatal"] = traceback.format_exc()
        json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
        return 1
    summary["transformers"] = classes[0].__version__
    log(f"transformers {classes[0].__version__}, torch {torch.__version__}, device {a.device}")
    try:
        summary["signatures"] = signatures(classes)
        summary["source_sha256"] = dump_sources(a.out, classes)
    except Exception:
        log(traceback.format_exc())
    for shape in SHAPES:
        if a.only and shape["name"] != a.only:
            continue
        try:
            run_shape(shape, a.out, classes, a.device, summary)
        except Exception:
            log(traceback.format_exc())
            summary[shape["name"]] = dict(fatal=traceback.format_exc())
    summary["seconds"] = round(time.time() - t0, 1)
    json.dump(jsonable(summary), open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    log(f"done in {summary['seconds']} s; see {os.path.join(a.out, 'summary.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

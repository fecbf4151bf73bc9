"""DiffusionGemma written from docs/DIFFUSION_GEMMA.md sections 3-5 alone (float64 numpy, plain loops,
no transformers code). make_dgemma_fixtures.py compares it with transformers on the GPU machine: if it
agrees with transformers' logits, the document is what tessera must implement; where it does not, the
difference names the section that is wrong. It also tries the candidate rules for the decoder's
sliding-window layers (docs OPEN 2) and reports which one transformers follows. Before those
references exist, make_dgemma_selfcheck.py runs it against tessera's C++ on a numpy-made checkpoint:
a self-consistency check of the document, not an independent reference.

`DocModel.generate` adds section 6 (the canvas sampler) with the random draws read from a trace instead
of a generator: tests/golden/engine_dgemma_canvas_test.cpp records every draw tessera's engine makes
and replay_canvas_trace.py runs them through it.

Shapes come from the weights (head dims, KV heads, whether v_proj exists), RoPE and windows from the
config, so the check does not depend on how a transformers version spells the head-dim keys.
Weights and inputs may be torch tensors (any dtype / device) or array-likes; outputs are numpy float64.
"""
import math

import numpy as np

DEC, ENC = "model.decoder.", "model.encoder.language_model."
# How a canvas row sees the committed keys in a sliding layer (docs section 3.2 / OPEN 2).
SLIDING_RULES = ("cache_last_w_minus_1", "whole_prefix", "per_query_window")


def to_f64(v):
    """A torch tensor (any device / dtype, bf16 included) or an array-like as a float64 numpy array."""
    if hasattr(v, "detach"):
        v = v.detach().to("cpu")
        if v.is_floating_point():
            v = v.double()
        return v.numpy().astype(np.float64)
    return np.asarray(v, dtype=np.float64)


def rms(x, w=None, eps=1e-6):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x, axis=-1):
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


class DocModel:
    def __init__(self, state_dict, text_cfg, top_cfg):
        self.sd = {k: to_f64(v) for k, v in state_dict.items()}
        self.t = text_cfg
        self.H = text_cfg["hidden_size"]
        self.L = text_cfg["num_hidden_layers"]
        self.heads = text_cfg["num_attention_heads"]
        self.eps = text_cfg.get("rms_norm_eps", 1e-6)
        self.W = text_cfg.get("sliding_window", 512)
        self.E = text_cfg["num_experts"]
        self.K = text_cfg["top_k_experts"]
        self.cap = text_cfg.get("final_logit_softcapping") or 30.0
        types = text_cfg.get("layer_types") or [
            "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(self.L)]
        self.sliding = [t == "sliding_attention" for t in types]
        self.sliding[-1] = False
        self.rope = text_cfg.get("rope_parameters") or {}
        self.scale = math.sqrt(self.H)
        self.tied = top_cfg.get("tie_word_embeddings", True)
        self.cache = [[] for _ in range(self.L)]  # per layer: list of (pos, k [kvh, d], v [kvh, d])

    def w(self, stack, name):
        """A stack's tensor; the encoder falls back to the decoder's when tied (state_dict has both)."""
        for p in ((ENC, DEC) if stack == "enc" else (DEC,)):
            if p + name in self.sd:
                return self.sd[p + name]
        return None

    def rope_apply(self, x, pos, layer):
        """x [T, n, d]; pairs (i, i + d/2) for i < r at theta^(-2i/d) (docs 3.3)."""
        d = x.shape[-1]
        kind = "sliding_attention" if self.sliding[layer] else "full_attention"
        p = self.rope.get(kind) or ({"rope_type": "default", "rope_theta": 1e4} if self.sliding[layer] else
                                    {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6})
        theta = p.get("rope_theta", 1e4)
        if p.get("rope_type", "default") == "proportional":
            r = int(math.floor(p.get("partial_rotary_factor", 1.0) * d / 2))
        else:
            r = d // 2
        inv = np.array([theta ** (-2.0 * i / d) for i in range(r)], dtype=np.float64) / p.get("factor", 1.0)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [T, r]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        a, b = x[..., :r], x[..., d // 2:d // 2 + r]
        out[..., :r] = a * c - b * s
        out[..., d // 2:d // 2 + r] = b * c + a * s
        return out

    def qkv(self, stack, l, x, pos):
        pre = f"layers.{l}.self_attn."
        wq, wk, wv = self.w(stack, pre + "q_proj.weight"), self.w(stack, pre + "k_proj.weight"), \
            self.w(stack, pre + "v_proj.weight")
        d = wq.shape[0] // self.heads
        kvh = wk.shape[0] // d
        T = x.shape[0]
        q = rms((x @ wq.T).reshape(T, self.heads, d), self.w(stack, pre + "q_norm.weight"), self.eps)
        k_raw = (x @ wk.T).reshape(T, kvh, d)
        v = (x @ wv.T).reshape(T, kvh, d) if wv is not None else k_raw  # full layers: V = raw K
        k = rms(k_raw, self.w(stack, pre + "k_norm.weight"), self.eps)
        return self.rope_apply(q, pos, l), self.rope_apply(k, pos, l), rms(v, None, self.eps)

    def attend(self, stack, l, q, pos, keys, allowed):
        """keys: list of (pos, k, v); allowed(pq, pk) -> bool. Scale 1, no soft-cap (docs 3.2)."""
        K = np.stack([k for _, k, _ in keys])  # [S, kvh, d]
        V = np.stack([v for _, _, v in keys])
        kp = [p for p, _, _ in keys]
        T, n, d = q.shape
        g = n // K.shape[1]
        out = np.zeros((T, n, d))
        for i in range(T):
            m = np.array([allowed(pos[i], pk) for pk in kp])
            for h in range(n):
                s = np.where(m, K[:, h // g, :] @ q[i, h], -np.inf)
                out[i, h] = softmax(s, 0) @ V[:, h // g, :]
        return out.reshape(T, n * d) @ self.w(stack, f"layers.{l}.self_attn.o_proj.weight").T

    def ffn(self, stack, l, h):
        pre = f"layers.{l}."
        n = lambda name, x: rms(x, self.w(stack, pre + name + ".weight"), self.eps)
        x1 = n("pre_feedforward_layernorm", h)
        m1 = (gelu_tanh(x1 @ self.w(stack, pre + "mlp.gate_proj.weight").T) *
              (x1 @ self.w(stack, pre + "mlp.up_proj.weight").T)) @ self.w(stack, pre + "mlp.down_proj.weight").T
        m1 = n("post_feedforward_layernorm_1", m1)
        r = rms(h, None, self.eps) * self.w(stack, pre + "router.scale") * self.H ** -0.5
        p = softmax(r @ self.w(stack, pre + "router.proj.weight").T, -1)
        top_i = np.argsort(-p, axis=-1, kind="stable")[:, :self.K]  # ties: the lower expert first
        top_w = np.take_along_axis(p, top_i, -1)
        top_w = top_w / top_w.sum(-1, keepdims=True) * self.w(stack, pre + "router.per_expert_scale")[top_i]
        x2 = n("pre_feedforward_layernorm_2", h)
        gu, dn = self.w(stack, pre + "experts.gate_up_proj"), self.w(stack, pre + "experts.down_proj")
        I = dn.shape[2]
        m2 = np.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(self.K):
                e = int(top_i[t, j])
                a = gu[e] @ x2[t]
                m2[t] += top_w[t, j] * (dn[e] @ (gelu_tanh(a[:I]) * a[I:]))
        m2 = n("post_feedforward_layernorm_2", m2)
        return n("post_feedforward_layernorm", m1 + m2)

    def layer(self, stack, l, x, pos, keys_for, allowed):
        pre = f"layers.{l}."
        a_in = rms(x, self.w(stack, pre + "input_layernorm.weight"), self.eps)
        q, k, v = self.qkv(stack, l, a_in, pos)
        new = [(pos[i], k[i], v[i]) for i in range(len(pos))]
        att = self.attend(stack, l, q, pos, keys_for(l, new), allowed(l))
        h = x + rms(att, self.w(stack, pre + "post_attention_layernorm.weight"), self.eps)
        out = (h + self.ffn(stack, l, h)) * self.w(stack, pre + "layer_scalar").reshape(())
        return out, new

    def head(self, h, stack):
        h = rms(h, self.w(stack, "norm.weight"), self.eps)  # each stack's final norm, one lm_head
        lm = self.sd.get("lm_head.weight")
        if lm is None:
            lm = self.w("dec", "embed_tokens.weight")
        z = h @ lm.T
        return self.cap * np.tanh(z / self.cap), h

    def encode(self, ids):
        """Causal, written to the cache (docs 1, 3.2). Returns (logits, final hidden, kv per layer)."""
        start = len(self.cache[0])
        pos = list(range(start, start + len(ids)))
        x = self.w("enc", "embed_tokens.weight")[np.asarray(ids)] * self.scale
        kv = []
        W = self.W
        for l in range(self.L):
            x, new = self.layer("enc", l, x, pos, lambda l_, new_: self.cache[l_] + new_,
                                lambda l_: (lambda pq, pk: pk <= pq and (not self.sliding[l_] or pk > pq - W)))
            self.cache[l] += new
            kv.append(new)
        logits, hf = self.head(x, "enc")
        return logits, hf, kv

    def decode(self, canvas, sc_logits=None, rule=SLIDING_RULES[0]):
        """One denoising step (docs 3.2, 5); nothing is written to the cache."""
        L0 = len(self.cache[0])
        pos = list(range(L0, L0 + len(canvas)))
        E = self.w("dec", "embed_tokens.weight")
        e = E[np.asarray(canvas)] * self.scale
        if sc_logits is None:
            soft = np.zeros_like(e)
        else:
            soft = softmax(to_f64(sc_logits), -1) @ E * self.scale
        pre = "self_conditioning."
        nrm = rms(soft, self.w("dec", pre + "pre_norm.weight"), self.eps)
        sc = (gelu_tanh(nrm @ self.w("dec", pre + "gate_proj.weight").T) *
              (nrm @ self.w("dec", pre + "up_proj.weight").T)) @ self.w("dec", pre + "down_proj.weight").T
        x = rms(e + sc, None, self.eps)
        W = self.W

        def keys_for(l, new):
            committed = self.cache[l]
            if self.sliding[l] and rule == "cache_last_w_minus_1":
                committed = committed[max(0, len(committed) - (W - 1)):]
            return committed + new

        def allowed(l):
            if self.sliding[l] and rule == "per_query_window":
                return lambda pq, pk: abs(pq - pk) < W
            return lambda pq, pk: True

        for l in range(self.L):
            x, _ = self.layer("dec", l, x, pos, keys_for, allowed)
        return self.head(x, "dec")[0]

    # ---- docs section 6: the sampler, with recorded draws in place of a generator ----

    def generate(self, prompt, trace, params, eos_ids, max_tokens, round_s_to_bf16=False):
        """Section 6 for one sequence in float64, every random draw taken from `trace` (what the engine
        drew: per canvas {"initial": [C] tokens, "steps": [{"uniforms": [C], "noise": [C]}, ...]}); all
        the rest (logits, entropies, argmax, samples by inverse CDF in index order, acceptance,
        re-noising, the stop rule, commits, eos and max_tokens) is computed here. params: the
        generation_config knobs (max_denoising_steps, entropy_bound, t_min, t_max, stability_threshold,
        confidence_threshold). round_s_to_bf16: the processed logits S kept for self-conditioning are
        rounded to bf16 as a bf16 model stores them (docs 5). Returns {"canvases": per canvas a list of
        per-step dicts (logits, entropy, argmax, sampled, margin: the smallest distance of u from an
        edge of the sampled token's CDF interval, accepted, next, stop), "committed": the argmax
        canvases, "output": the tokens, "finish": "stop" | "length"}."""
        N, B = int(params["max_denoising_steps"]), float(params["entropy_bound"])
        t_min, t_max = float(params["t_min"]), float(params["t_max"])
        K, Q = int(params["stability_threshold"]), float(params["confidence_threshold"])
        self.cache = [[] for _ in range(self.L)]
        self.encode(list(prompt))
        C = len(trace[0]["initial"])
        eos = set(int(e) for e in eos_ids)
        result = {"canvases": [], "committed": [], "output": [], "finish": "length"}
        for b in range(-(-int(max_tokens) // C)):
            if b >= len(trace):
                raise ValueError(f"the trace has {len(trace)} canvases; canvas {b} is needed")
            x = np.asarray(trace[b]["initial"], dtype=np.int64)
            S, hist, steps = None, [], []
            for k, n in enumerate(range(N, 0, -1)):
                raw = self.decode(list(x), sc_logits=S)
                T = t_min + (t_max - t_min) * n / N
                z = raw / T
                m = z.max(-1, keepdims=True)
                e = np.exp(z - m)
                tot = e.sum(-1)
                H = np.log(tot) - (e * (z - m)).sum(-1) / tot
                a = z.argmax(-1)
                d = trace[b]["steps"][k]
                u = np.asarray(d["uniforms"], dtype=np.float64)
                y, margin = np.zeros(C, dtype=np.int64), np.zeros(C)
                for r in range(C):  # the first token whose cumulative probability exceeds u
                    cum = np.cumsum(e[r]) / tot[r]
                    i = int(np.searchsorted(cum, u[r], side="right"))
                    i = min(i, len(cum) - 1)
                    y[r] = i
                    margin[r] = min(abs(u[r] - (cum[i - 1] if i > 0 else 0.0)), abs(cum[i] - u[r]))
                order = np.argsort(H, kind="stable")
                acc, before = np.zeros(C, dtype=bool), 0.0
                for r in order:
                    if before > B:
                        break
                    acc[r] = True
                    before += H[r]
                nxt = np.where(acc, y, np.asarray(d["noise"], dtype=np.int64))
                stable = K == 0 or (len(hist) == K and all((h == a).all() for h in hist))
                if K > 0:
                    hist = (hist + [a.copy()])[-K:]
                confident = H.mean() < Q
                stop = bool((stable and confident) or n == 1)
                steps.append(dict(logits=raw, entropy=H, argmax=a, sampled=y, margin=margin, accepted=acc,
                                  next=nxt, stop=stop))
                if stop:
                    break
                x = nxt
                S = bf16_round(z) if round_s_to_bf16 else z
            result["canvases"].append(steps)
            a = steps[-1]["argmax"]
            result["committed"].append([int(t) for t in a])
            self.encode([int(t) for t in a])  # the commit: positions continue
            ended = False
            for t in a:
                if int(t) in eos:
                    ended = True
                    break
                result["output"].append(int(t))
            if len(result["output"]) > max_tokens:
                result["output"] = result["output"][:max_tokens]
                break  # cut before the end token: "length"
            if ended:
                result["finish"] = "stop"
                break
            if len(result["output"]) >= max_tokens:
                break
        return result


def bf16_round(x):
    """float64 -> the nearest bf16 value (through float32, round to nearest even), as float64."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)

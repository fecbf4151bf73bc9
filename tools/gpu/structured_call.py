#!/usr/bin/env python3
"""tessera: the helper of tools/gpu_structured_call.sh (issue 30's end-to-end structured-output numbers).

Standard library only (the GPU machine's /usr/bin/python3 has no extra packages; `jsonschema` is used
when importable). Subcommands:
  schema OUTPUT_LEN FILE       the benchmark schema for that many output tokens (see bench_schema)
  extra-body SCHEMA_FILE [JSON] the --extra-body of a constrained run (JSON: more fields to merge)
  model-dir SRC DST [--tiny] [--eos IDS]
                               a model directory: SRC's config.json (+ generation_config.json),
                               shrunk to a CPU-sized model with --tiny, eos ids replaced with --eos
  metrics URL FILE             saves GET URL/metrics
  check URL MAX_TOKENS [JSON [TIMEOUT_S]]
                               one constrained completion of a small bounded schema: must finish
                               `stop` and its text must be a JSON document the schema accepts
  wait URL SECONDS PID         polls GET URL/health until it answers 200 (1 once process PID is gone)
  summary DIR                  the table of DIR/runs.tsv's runs (the bench JSONs and metric snapshots
                               beside it); runs.tsv: one line a run, tab-separated: kind (ar or
                               diffusion), tag, mode (free or json), concurrency, output_len,
                               block_size, label
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

# The benchmark schema: an object holding an array of free strings (lines of text, the usual shape of
# an extraction result). Why minItems: with ignore_eos the engine ends a constrained request as soon
# as its JSON document is complete (nothing but an eos could follow, and ignore_eos takes the eos
# away), while the unconstrained run always produces max_tokens. So that both runs generate (and the
# bench counts) the same tokens, the document must not be completable within max_tokens: every
# request then ends with `length` at exactly max_tokens, as the free one does. Each item costs two
# quote bytes (its own '"' ... '"'), and no Qwen3 token holds more than four ('","","'; counted on
# tokenizer.json), so T tokens write at most 2 T items: minItems 2 T + 2 is out of reach, whatever the
# dummy weights choose. (Checked after the run too: `summary` flags any output length != T.)
def bench_schema(output_len):
    return {
        "type": "object",
        "properties": {"lines": {"type": "array", "items": {"type": "string"}, "minItems": 2 * output_len + 2}},
        "required": ["lines"],
        "additionalProperties": False,
    }


# The validity check's schema: the same shape, bounded, so that even random weights finish it.
CHECK_SCHEMA = {
    "type": "object",
    "properties": {
        "lines": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 2, "maxItems": 4}
    },
    "required": ["lines"],
    "additionalProperties": False,
}


def response_format(schema, name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def http(url, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


# A CPU-sized model of the same family (the dry run of the script on a machine without a GPU).
TINY = {
    "qwen3_moe": dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, num_hidden_layers=2, num_experts=8,
                      num_experts_per_tok=2, max_window_layers=2, max_position_embeddings=4096),
    # The vocabulary just covers the Qwen3 tokenizer's ids: 262,144 rows of logits a canvas row made
    # the CPU's canvases slow (a host-side mask and draw for each of them).
    "diffusion_gemma_text": dict(hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                                 num_attention_heads=2, num_key_value_heads=1, num_global_key_value_heads=1,
                                 head_dim=16, global_head_dim=32, num_hidden_layers=2, num_experts=8,
                                 top_k_experts=2, sliding_window=64, vocab_size=151936,
                                 layer_types=["sliding_attention", "full_attention"]),
}
# ... and its canvases short, in few steps (config.json / generation_config.json keys).
TINY_CANVAS = dict(canvas_length=32)
TINY_GENERATION = dict(max_denoising_steps=8)


def model_dir(src, dst, tiny, eos):
    os.makedirs(dst, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    text = cfg.get("text_config", cfg)
    if tiny:
        text.update(TINY[text["model_type"]])
        if "canvas_length" in cfg:
            cfg.update(TINY_CANVAS)
    if eos is not None:
        # The tokenizer is not the model's own (dummy weights): its eos ids must be the tokenizer's.
        for c in (cfg, text):
            if "eos_token_id" in c:
                c["eos_token_id"] = eos
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=1)
    gen = os.path.join(src, "generation_config.json")
    if os.path.exists(gen):
        g = json.load(open(gen))
        if eos is not None and "eos_token_id" in g:
            g["eos_token_id"] = eos
        if tiny and "max_denoising_steps" in g:
            g.update(TINY_GENERATION)
        json.dump(g, open(os.path.join(dst, "generation_config.json"), "w"), indent=1)


def validate(doc, schema):
    """Python's jsonschema when present, else a hand check of CHECK_SCHEMA's shape."""
    try:
        import jsonschema
        jsonschema.validate(doc, schema)
        return "valid (jsonschema)"
    except ImportError:
        pass
    items = schema["properties"]["lines"]
    ok = (isinstance(doc, dict) and set(doc) == {"lines"} and isinstance(doc["lines"], list)
          and items["minItems"] <= len(doc["lines"]) <= items["maxItems"]
          and all(isinstance(s, str) and len(s) <= items["items"]["maxLength"] for s in doc["lines"]))
    if not ok:
        raise ValueError("does not match the schema")
    return "valid (hand check; no jsonschema module)"


def check(url, max_tokens, extra, timeout):
    name = json.loads(http(url + "/v1/models"))["data"][0]["id"]
    body = {"model": name, "prompt": [1000 + 37 * i for i in range(24)], "max_tokens": max_tokens,
            "temperature": 0, "response_format": response_format(CHECK_SCHEMA, "check")}
    body.update(extra)
    try:
        r = json.loads(http(url + "/v1/completions", body, timeout=timeout))
    except (OSError, ValueError) as e:  # HTTP errors, timeouts, a body that is not JSON
        print("check: FAILED: the request failed: %s" % e)
        return 1
    c = r["choices"][0]
    text = c["text"]
    print("check: finish_reason %s, %d tokens, text %r" % (c["finish_reason"], r["usage"]["completion_tokens"],
                                                           text[:300]))
    if c["finish_reason"] != "stop":
        print("check: FAILED (the bounded schema must finish with stop)")
        return 1
    try:
        print("check: %s: %s" % (validate(json.loads(text), CHECK_SCHEMA), json.dumps(json.loads(text))[:200]))
    except ValueError as e:
        print("check: FAILED: %s" % e)
        return 1
    return 0


def read_metrics(path):
    vals = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            vals[name] = float(value)
        except ValueError:
            pass
    return vals


def delta(before, after, name):
    return after.get(name, 0.0) - before.get(name, 0.0)


def load_run(d, tag):
    path = os.path.join(d, "bench_%s.json" % tag)
    if not os.path.exists(path):
        return None
    return json.load(open(path))


def lengths_note(run, want):
    lens = run.get("output_lens", [])
    bad = [n for n in lens if n != want]
    note = "all %d x %d tok" % (len(lens), want) if not bad else "MISMATCH: %d of %d not %d" % (len(bad), len(lens), want)
    if run.get("failed"):
        note += ", %d FAILED" % run["failed"]
    return note


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def wait_ready(url, seconds, pid):
    deadline = time.time() + seconds
    last = ""
    while time.time() < deadline:
        if not alive(pid):  # the server exited (a failed load or warm-up): no use waiting
            print("wait: the server (pid %d) exited" % pid)
            return 1
        try:
            http(url + "/health", timeout=5)
            return 0
        except urllib.error.HTTPError as e:
            last = "HTTP %d" % e.code
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.5)
    print("wait: %s not ready after %s s (last: %s)" % (url, seconds, last))
    return 1


def read_runs(path):
    runs = []
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 7:
            continue
        runs.append(dict(kind=f[0], tag=f[1], mode=f[2], concurrency=int(f[3]), output_len=int(f[4]),
                         block_size=int(f[5]), label=f[6]))
    return runs


def summary(d):
    runs = read_runs(os.path.join(d, "runs.tsv"))
    out = []
    ar = [r for r in runs if r["kind"] == "ar"]
    if ar:
        out.append("%s: output tok/s and median TPOT, free vs json_schema" % ar[0]["label"])
        out.append("%4s %12s %12s %8s %10s %10s  %s" % ("C", "free tok/s", "json tok/s", "json/free", "free TPOT",
                                                        "json TPOT", "tokens"))
        for c in sorted({r["concurrency"] for r in ar}):
            pair = {r["mode"]: load_run(d, r["tag"]) for r in ar if r["concurrency"] == c}
            f, j = pair.get("free"), pair.get("json")
            if not f or not j:
                out.append("%4d  missing run (see the logs)" % c)
                continue
            want = [r["output_len"] for r in ar if r["concurrency"] == c][0]
            ratio = j["output_throughput"] / f["output_throughput"] if f["output_throughput"] else float("nan")
            out.append("%4d %12.1f %12.1f %8.3f %9.2fms %9.2fms  free %s; json %s" % (
                c, f["output_throughput"], j["output_throughput"], ratio, f["median_tpot_ms"], j["median_tpot_ms"],
                lengths_note(f, want), lengths_note(j, want)))
            out.append("     cost of the constraint: %.1f%% of throughput (issue 30's bound: 10%%) -> %s" % (
                100 * (1 - ratio), "within" if ratio >= 0.9 else "OVER"))
    dr = [r for r in runs if r["kind"] == "diffusion"]
    if dr:
        out.append("diffusion: tokens per forward (server histogram tessera_diffusion_tokens_per_forward: each "
                   "request's completion tokens / forwards it took part in, mean over the run's requests)")
        out.append("%-24s %4s %6s %10s %12s %10s  %s" % ("model / policy", "C", "mode", "tok/fwd", "tok/step",
                                                         "out tok/s", "tokens"))
        for r in dr:
            b = load_run(d, r["tag"])
            m0 = os.path.join(d, "metrics_%s_before.txt" % r["tag"])
            m1 = os.path.join(d, "metrics_%s_after.txt" % r["tag"])
            if not b or not os.path.exists(m0) or not os.path.exists(m1):
                out.append("%-24s %4d %6s  missing run (see the logs)" % (r["label"], r["concurrency"], r["mode"]))
                continue
            before, after = read_metrics(m0), read_metrics(m1)
            n = delta(before, after, "tessera_diffusion_tokens_per_forward_count")
            tpf = delta(before, after, "tessera_diffusion_tokens_per_forward_sum") / n if n else float("nan")
            # Denoising steps alone (block commits ride on the next block's first step; prompt
            # chunks that did not fit one forward with the first block count as forwards above).
            blocks = delta(before, after, "tessera_diffusion_steps_per_block_count")
            steps = delta(before, after, "tessera_diffusion_steps_per_block_sum")
            per_step = "%.2f" % (r["block_size"] * blocks / steps) if steps and r.get("block_size") else "-"
            out.append("%-24s %4d %6s %10.2f %12s %10.1f  %s" % (r["label"], r["concurrency"], r["mode"], tpf, per_step,
                                                                b["output_throughput"], lengths_note(b, r["output_len"])))
    text = "\n".join(out)
    print(text)
    open(os.path.join(d, "summary.txt"), "a").write(text + "\n")
    return 0


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "schema":
        json.dump(bench_schema(int(argv[2])), open(argv[3], "w"))
        return 0
    if cmd == "extra-body":
        body = {"response_format": response_format(json.load(open(argv[2])), "lines")} if argv[2] != "-" else {}
        if len(argv) > 3:
            body.update(json.loads(argv[3]))
        print(json.dumps(body, separators=(",", ":")))
        return 0
    if cmd == "model-dir":
        eos = None
        if "--eos" in argv:
            eos = [int(x) for x in argv[argv.index("--eos") + 1].split(",")]
        model_dir(argv[2], argv[3], "--tiny" in argv, eos)
        return 0
    if cmd == "metrics":
        open(argv[3], "w").write(http(argv[2] + "/metrics", timeout=30))
        return 0
    if cmd == "check":
        return check(argv[2], int(argv[3]), json.loads(argv[4]) if len(argv) > 4 else {},
                     float(argv[5]) if len(argv) > 5 else 120)
    if cmd == "wait":
        return wait_ready(argv[2], float(argv[3]), int(argv[4]))
    if cmd == "summary":
        return summary(argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

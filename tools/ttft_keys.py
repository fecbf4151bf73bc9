#!/usr/bin/env python3
"""Prefix-cache isolation across API keys, by timing (issue 34 item 4; results in docs/RELIABILITY.md).

Starts `tessera serve` (default: the demo model) with two API keys and prefix caching on (the
default), then runs TRIALS interleaved trials, each on a fresh random prompt of PROMPT_LEN token ids:
  a  key A sends the prompt: uncached (the baseline);
  b  key A sends it again: its own cached prefix, so the first token must come clearly sooner
     (this shows that the measurement can see a cache hit at all);
  c  key B sends key A's prompt: must look like a: no signal across keys;
  d  key B sends it again: its own cache (B's cache works; c was not slowed some other way).
a comes first; b and c in random order; d after c. TTFT is timed at the client (request sent to the
first chunk with output; a stream of max_tokens 1), and each answer's usage.prompt_tokens_details.
cached_tokens is recorded too, the server's own account. Reports each case's median and percentiles,
a two-sided Mann-Whitney U test (normal approximation with tie correction) and a bootstrap 95% CI of
the median difference of b, c and d against a, then stops the server with SIGTERM.

  tools/ttft_keys.py [--bin build/tessera] [--model models/demo] [--trials 200] [--prompt-len 1800]
                     [--extra-body '{"diffusion": {"steps": 1}}'] [--seed 1] [--json FILE]
Exit code 0 when b differs from a (p < 0.001), c does not (p >= 0.01, and the 95% CI of c's median
difference within +-20% of the hit's saving, median a - median b: a leak of a fifth of a hit, e.g. a
fifth of the prompt cached across keys, would show) and the cached_tokens say the same; else 1.
"""
import argparse, json, math, os, random, re, signal, socket, statistics, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/tessera")
ap.add_argument("--model", default="models/demo")
ap.add_argument("--trials", type=int, default=200)
ap.add_argument("--prompt-len", type=int, default=1800)
ap.add_argument("--extra-body", default='{"diffusion": {"steps": 1}}',
                help="merged into each request ('{}' for an autoregressive model)")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--json", default="")
a = ap.parse_args()
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
KEYS = {"A": "sk-ttft-key-a-0123456789", "B": "sk-ttft-key-b-9876543210"}

srv = subprocess.Popen([a.bin, "serve", "--model", a.model, "--port", "0", "--api-key", KEYS["A"], "--api-key",
                        KEYS["B"], "--enable-prefix-caching"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = int(re.search(r":(\d+)$", srv.stdout.readline().strip()).group(1))


def request(key, ids):
    """One streamed completion; returns (ttft seconds, cached_tokens)."""
    body = {"prompt": ids, "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}}
    body.update(json.loads(a.extra_body))
    b = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEYS[key]}\r\n"
            f"Content-Type: application/json\r\nConnection: close\r\nContent-Length: {len(b)}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got, ttft = b"", None
    t0 = time.perf_counter()
    s.sendall(head + b)
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        got += chunk
        if ttft is None and b'"text":' in got: ttft = time.perf_counter() - t0
    s.close()
    if not got.startswith(b"HTTP/1.1 200") or ttft is None:
        sys.exit(f"ttft_keys: bad answer for key {key}: {got[:300]!r}")
    m = re.findall(rb'"cached_tokens":\s*(\d+)', got)
    return ttft, int(m[-1]) if m else -1


# The server is ready once /health answers 200 (a keyless probe is allowed).
for _ in range(600):
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if s.recv(100).startswith(b"HTTP/1.1 200"): break
    except OSError:
        pass
    time.sleep(0.1)
rnd = random.Random(a.seed)
for _ in range(5):  # warm-up: first-touch of pages and buffers, not measured
    ids = [rnd.randrange(10, 4000) for _ in range(a.prompt_len)]
    request("A", ids); request("A", ids)

t = {k: [] for k in "abcd"}
cached = {k: [] for k in "abcd"}
start = time.time()
for i in range(a.trials):
    ids = [rnd.randrange(10, 4000) for _ in range(a.prompt_len)]
    order = [("a", "A")] + rnd.sample([("b", "A"), ("c", "B")], 2)
    order.insert(order.index(("c", "B")) + 1, ("d", "B"))
    for case, key in order:
        ttft, c = request(key, ids)
        t[case].append(ttft * 1e3)
        cached[case].append(c)
elapsed = time.time() - start
srv.send_signal(signal.SIGTERM)
rc = srv.wait(timeout=60)


def mann_whitney(x, y):
    """Two-sided p of the Mann-Whitney U test, normal approximation with the tie correction."""
    allv = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    ranks, i = [0.0] * len(allv), 0
    ties = 0.0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1][0] == allv[i][0]: j += 1
        for k in range(i, j + 1): ranks[k] = (i + j) / 2 + 1
        ties += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    n1, n2 = len(x), len(y)
    r1 = sum(r for r, (_, g) in zip(ranks, allv) if g == 0)
    u = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    z = (u - n1 * n2 / 2) / sd if sd > 0 else 0.0
    return u, z, math.erfc(abs(z) / math.sqrt(2))


def boot_ci(x, y, reps=4000):
    """95% bootstrap CI of median(y) - median(x)."""
    r = random.Random(7)
    d = sorted(statistics.median(r.choices(y, k=len(y))) - statistics.median(r.choices(x, k=len(x)))
               for _ in range(reps))
    return d[int(0.025 * reps)], d[int(0.975 * reps)]


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


names = {"a": "A uncached", "b": "A repeats its prompt", "c": "B sends A's prompt", "d": "B repeats it"}
res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(start)), "model": a.model,
       "prompt_len": a.prompt_len, "trials": a.trials, "seconds": round(elapsed, 1), "serve_exit": rc, "cases": {}}
print(f"ttft_keys: {a.trials} trials of a {a.prompt_len}-token prompt, {a.model}, {elapsed:.0f} s; serve exit {rc}")
print(f"{'case':24} {'median ms':>9} {'p10':>7} {'p90':>7} {'cached_tokens':>22} {'vs a: median diff [95% CI]':>30} {'MW p':>9}")
ok = rc == 0
for k in "abcd":
    row = {"median_ms": statistics.median(t[k]), "p10_ms": pct(t[k], .1), "p90_ms": pct(t[k], .9),
           "cached_tokens": sorted(set(cached[k]))}
    line = f"{names[k]:24} {row['median_ms']:9.2f} {row['p10_ms']:7.2f} {row['p90_ms']:7.2f} {str(row['cached_tokens']):>22}"
    if k != "a":
        _, z, p = mann_whitney(t["a"], t[k])
        lo, hi = boot_ci(t["a"], t[k])
        row.update(diff_ms=statistics.median(t[k]) - statistics.median(t["a"]), ci_ms=[lo, hi], z=z, p=p)
        line += f" {row['diff_ms']:+9.2f} [{lo:+.2f}, {hi:+.2f}] {p:9.2g}"
    res["cases"][k] = row
    print(line)
signal_seen = res["cases"]["b"]["p"] < 1e-3 and res["cases"]["b"]["ci_ms"][1] < 0
c = res["cases"]["c"]
saving = -res["cases"]["b"]["diff_ms"]
no_leak = c["p"] >= 0.01 and max(abs(c["ci_ms"][0]), abs(c["ci_ms"][1])) <= 0.2 * saving
res["c_ci_as_share_of_saving"] = max(abs(c["ci_ms"][0]), abs(c["ci_ms"][1])) / saving
server_agrees = set(cached["a"]) == {0} and set(cached["c"]) == {0} and min(cached["b"]) > 0 and min(cached["d"]) > 0
print(f"cache hit visible (b vs a): {signal_seen}; no signal across keys (c vs a): {no_leak} (CI within "
      f"{100 * res['c_ci_as_share_of_saving']:.0f}% of the hit's saving); "
      f"cached_tokens agree: {server_agrees}")
res.update(signal_seen=signal_seen, no_leak=no_leak, server_agrees=server_agrees)
if a.json: json.dump(res, open(a.json, "w"), indent=1)
sys.exit(0 if ok and signal_seen and no_leak and server_agrees else 1)

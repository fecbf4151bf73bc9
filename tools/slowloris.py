#!/usr/bin/env python3
"""Slowloris against a real `tessera serve` (issue 34 item 3; results in docs/RELIABILITY.md).

Starts the server (default: the demo model) with short read deadlines, then opens at once
  - TRICKLE connections that send a request header one byte every --gap seconds, forever;
  - SHORT connections that send a whole header with Content-Length 5000 and 12 bytes of body;
  - SILENT connections that send nothing;
and meanwhile sends normal chat requests back to back on fresh connections. Reports when each slow
connection got its answer (status) and its close, the normal requests' latencies while the slow ones
were open, the server's open descriptors before / during / after, the 408 access-log lines and
/metrics' 408 counter, then stops the server with SIGTERM.

  tools/slowloris.py [--bin build/tessera] [--model models/demo] [--trickle 200] [--short 100]
                     [--silent 100] [--deadline 5] [--no-flags]
--no-flags runs a binary without the deadline flags (one from before them: pass --deadline 80, its
fixed 75 s read deadline and some margin, for the length of the normal requests' run).
"""
import argparse, json, os, re, signal, socket, subprocess, sys, tempfile, threading, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/tessera")
ap.add_argument("--model", default="models/demo")
ap.add_argument("--trickle", type=int, default=200)
ap.add_argument("--short", type=int, default=100)
ap.add_argument("--silent", type=int, default=100)
ap.add_argument("--deadline", type=float, default=5)
ap.add_argument("--gap", type=float, default=1)
ap.add_argument("--no-flags", action="store_true")
a = ap.parse_args()
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

log = tempfile.mktemp(prefix="tessera-slowloris-", suffix=".log")
flags = [] if a.no_flags else ["--header-timeout", str(a.deadline), "--body-timeout", str(a.deadline)]
srv = subprocess.Popen([a.bin, "serve", "--model", a.model, "--port", "0", "--access-log", log] + flags,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = int(re.search(r":(\d+)$", srv.stdout.readline().strip()).group(1))
base = f"http://127.0.0.1:{port}"

def get(path, body=None):
    req = urllib.request.Request(base + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

while True:  # the model loads after the bind
    try:
        if get("/health")[0] == 200: break
    except OSError:
        pass
    time.sleep(0.2)
fds = lambda: len(os.listdir(f"/proc/{srv.pid}/fd"))
fds_idle = fds()

results = {}  # kind -> list of (seconds to the answer or None, status, seconds to the close)
lock = threading.Lock()
t0 = time.monotonic()

def slow(kind):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(a.deadline * 4 + 10)
    stop = threading.Event()
    if kind == "trickle":
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: "
        def trickle():
            i = 0
            while not stop.is_set():
                try:
                    s.send(head[i:i + 1] if i < len(head) else b"a")
                except OSError:
                    return
                i += 1
                time.sleep(a.gap)
        threading.Thread(target=trickle, daemon=True).start()
    elif kind == "short":
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 5000\r\n\r\n{\"messages\": ")
    data, answered, status = b"", None, None
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk: break
            if answered is None:
                answered = time.monotonic() - t0
                m = re.match(rb"HTTP/1\.1 (\d+)", chunk)
                status = int(m.group(1)) if m else None
            data += chunk
    except OSError:
        pass
    closed = time.monotonic() - t0
    stop.set()
    s.close()
    with lock:
        results.setdefault(kind, []).append((answered, status, closed))

threads = [threading.Thread(target=slow, args=(k,)) for k, n in
           (("trickle", a.trickle), ("short", a.short), ("silent", a.silent)) for _ in range(n)]
for t in threads: t.start()
time.sleep(0.5)
fds_held = fds()
lat, body = [], json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}).encode()
while time.monotonic() - t0 < a.deadline:
    t = time.monotonic()
    st, _ = get("/v1/chat/completions", body)
    lat.append((st, time.monotonic() - t))
for t in threads: t.join()
time.sleep(0.5)
fds_after = fds()
metrics = get("/metrics")[1]
srv.send_signal(signal.SIGTERM)
rc = srv.wait(timeout=60)

def summary(rows):
    ans = [r[0] for r in rows if r[0] is not None]
    statuses = sorted({r[1] for r in rows})
    closes = [r[2] for r in rows]
    return (f"{len(rows)} connections, answers {statuses}, answered at "
            f"{min(ans):.2f}-{max(ans):.2f} s" if ans else f"{len(rows)} connections, no answer") + \
           f", closed at {min(closes):.2f}-{max(closes):.2f} s"
print(f"server: {a.bin}, {a.model}, {' '.join(flags) or 'default read deadlines'}, port {port}")
for k in ("trickle", "short", "silent"):
    print(f"{k:8s}: {summary(results.get(k, []))}")
oks = [d for st, d in lat if st == 200]
print(f"normal requests meanwhile: {len(lat)}, {len(oks)} answered 200, latency "
      f"{min(oks):.3f}-{max(oks):.3f} s" if oks else "normal requests meanwhile: none answered")
print(f"open descriptors: idle {fds_idle}, with the slow connections {fds_held}, after {fds_after}")
lines = [json.loads(l) for l in open(log) if l.strip()]
t408 = [l for l in lines if l.get("status") == 408]
print(f"access log: {len(t408)} lines with 408 ({sum(1 for l in t408 if l.get('path'))} with a path)")
m = re.search(r'tessera_request_errors_total\{code="408"\} (\d+)', metrics)
print(f"/metrics: tessera_request_errors_total{{code=\"408\"}} {m.group(1) if m else 0}")
print(f"SIGTERM: exit {rc}")

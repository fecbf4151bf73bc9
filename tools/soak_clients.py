#!/usr/bin/env python3
"""The python clients of tools/soak.sh (issue 34 item 2): what `tessera bench` cannot do.

  cancel  N clients that open a stream and drop the connection, half after a random 0.2-4 s
          (mostly while queued), half after two chunks of output (mid-stream); half of the drops
          with RST instead of FIN; again and again. Spread over the given servers in turn.
  slow    N slow readers: a chat stream big enough to fill the kernel's socket buffers (n choices
          with top_logprobs, so megabytes of SSE), read through a 4 KiB receive buffer at READ_BPS
          bytes a second. The server's write timeout must cut each one off (the stream ends
          without its terminating chunk) while everyone else is served; then the next one.
  check   N clients that send tool-call (forced function) and json_schema requests in turn and
          check the outputs: the call names the function and its arguments are a JSON object with
          a string "city"; the content is a JSON object with the schema's keys and types (an
          answer cut at max_tokens, finish_reason length, is counted apart: the toy model pads
          with whitespace, which JSON allows).
          bench counts these kinds too, but only checks the stream's framing.

Each mode runs until DURATION seconds have passed (the last request finishes), then writes its
counts as JSON.

  tools/soak_clients.py MODE --ports P1[,P2] --clients N --duration S --out FILE
                        [--read-bps 200] [--max-tokens 160] [--seed 1]
"""
import argparse, asyncio, json, random, socket, struct, time

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city", "strict": True,
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                   "properties": {"city": {"type": "string", "maxLength": 24}}}}}]
TOOL_BODY = {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["fortune", "lucky_number"],
          "properties": {"fortune": {"type": "string", "maxLength": 24}, "lucky_number": {"type": "integer"}}}
JSON_BODY = {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "fortune", "schema": SCHEMA, "strict": True}}}


def http_request(path, body):
    b = json.dumps(body)
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(b)}\r\n\r\n{b}").encode()


def bump(d, k, n=1):
    d[k] = d.get(k, 0) + n


async def cancel_client(a, i, stats):
    rnd = random.Random(a.seed * 100003 + i)
    port = a.ports[i % len(a.ports)]
    req = http_request("/v1/completions", {"prompt": "Tell me a fortune.", "max_tokens": 256,
                                           "ignore_eos": True, "stream": True})
    end = time.monotonic() + a.duration
    while time.monotonic() < end:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            stats["opened"] += 1
            w.write(req)
            await w.drain()
            # Half drop after a random 0.2-4 s (mostly still queued), half after their second chunk
            # of output (mid-stream; waiting up to 5 minutes for it).
            mid = rnd.random() < 0.5
            drop_at = time.monotonic() + (300 if mid else rnd.uniform(0.2, 4.0))
            got = b""
            while time.monotonic() < drop_at and not (mid and got.count(b"data: {") >= 2):
                try:
                    chunk = await asyncio.wait_for(r.read(65536), timeout=max(0.01, drop_at - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                if not chunk:
                    break
                got += chunk
            bump(stats["statuses"], got[9:12].decode() if got.startswith(b"HTTP/1.1 ") else "none")
            if b"[DONE]" in got: stats["finished_before_drop"] += 1
            elif b"data: {" in got: stats["dropped_mid_stream"] += 1
            else: stats["dropped_before_output"] += 1
            sock = w.get_extra_info("socket")
            if rnd.random() < 0.5 and sock is not None:  # RST instead of FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.close()
        except Exception as e:
            bump(stats["errors"], type(e).__name__)
            await asyncio.sleep(0.5)


async def slow_client(a, i, stats):
    port = a.ports[i % len(a.ports)]
    # Megabytes of SSE: n choices, each token with 20 alternatives (about 1.3 KB a token a choice).
    req = http_request("/v1/chat/completions", {
        "messages": [{"role": "user", "content": f"Tell me a long story, reader {i}."}], "n": 16,
        "max_tokens": a.max_tokens, "ignore_eos": True, "logprobs": True, "top_logprobs": 20, "stream": True})
    end = time.monotonic() + a.duration
    while time.monotonic() < end:
        # The small receive buffer is set before connect, so the window the server sees stays small.
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
        except OSError as e:
            bump(stats["errors"], type(e).__name__)
            s.close()
            await asyncio.sleep(1)
            continue
        stats["opened"] += 1
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(s, req)
        got, first_at, tail = 0, None, b""
        outcome = "open"
        while outcome == "open":
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(s, 1024), timeout=1800)
            except (ConnectionResetError, BrokenPipeError):
                outcome = "reset"
                break
            except asyncio.TimeoutError:
                outcome = "client_timeout"
                break
            if not chunk:
                outcome = "eof"
                break
            if first_at is None:
                first_at = time.monotonic()
                bump(stats["statuses"], chunk[9:12].decode() if chunk.startswith(b"HTTP/1.1 ") else "none")
            got += len(chunk)
            tail = (tail + chunk)[-64:]
            await asyncio.sleep(1024 / a.read_bps)
        s.close()
        # A stream the server finished ends with [DONE] and the chunked body's terminating chunk.
        whole = b"[DONE]" in tail and tail.endswith(b"0\r\n\r\n")
        bump(stats["outcomes"], "finished" if whole else f"cut ({outcome})")
        stats["bytes_read"].append(got)
        stats["seconds_open"].append(round(time.monotonic() - t0, 1))
        stats["seconds_after_first_byte"].append(round(time.monotonic() - (first_at or t0), 1))


async def check_client(a, i, stats):
    port = a.ports[i % len(a.ports)]
    end = time.monotonic() + a.duration
    n = 0
    while time.monotonic() < end:
        kind = "tool" if (i + n) % 2 == 0 else "json"
        n += 1
        body = {"messages": [{"role": "user", "content": "What is the weather in Oslo?" if kind == "tool"
                              else f"Give me fortune number {n} as JSON."}],
                "max_tokens": 128, "stream": True}
        body.update(TOOL_BODY if kind == "tool" else JSON_BODY)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            stats["opened"] += 1
            # Connection: close, so that the whole answer is read up to the server's close.
            w.write(http_request("/v1/chat/completions", body).replace(
                b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nConnection: close\r\n"))
            await w.drain()
            raw = await asyncio.wait_for(r.read(), timeout=1800)
            w.close()
        except Exception as e:
            bump(stats["errors"], type(e).__name__)
            await asyncio.sleep(0.5)
            continue
        bump(stats["outcomes"], f"{kind} {judge(kind, raw)}")


def judge(kind, raw):
    if not raw.startswith(b"HTTP/1.1 200"):
        return "http " + raw[9:12].decode(errors="replace")
    head, _, body = raw.partition(b"\r\n\r\n")
    # Undo the chunked framing: size line, data, CRLF.
    data, pos = b"", 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0: return "bad framing"
        size = int(body[pos:eol], 16)
        if size == 0: break
        data += body[eol + 2:eol + 2 + size]
        pos = eol + 2 + size + 2
    events = [ln[6:] for ln in data.decode().split("\n") if ln.startswith("data: ")]
    if not events or events[-1] != "[DONE]": return "no [DONE]"
    content, args, names, finish = "", {}, {}, None
    for e in events[:-1]:
        j = json.loads(e)
        if j.get("error"): return "error event"
        for c in j.get("choices", []):
            d = c.get("delta", {})
            content += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                k = tc.get("index", 0)
                f = tc.get("function", {})
                if f.get("name"): names[k] = f["name"]
                args[k] = args.get(k, "") + (f.get("arguments") or "")
            finish = c.get("finish_reason") or finish
    if finish == "length": return "truncated"
    try:
        if kind == "tool":
            if not names or set(names.values()) != {"get_weather"}: return "no get_weather call"
            for v in args.values():
                a = json.loads(v)
                if not isinstance(a, dict) or not isinstance(a.get("city"), str): return "bad arguments"
            return "ok"
        j = json.loads(content)
        if set(j) != {"fortune", "lucky_number"} or not isinstance(j["fortune"], str) or \
                not isinstance(j["lucky_number"], int) or len(j["fortune"]) > 24:
            return "schema mismatch"
        return "ok"
    except ValueError:
        return "not JSON"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["cancel", "slow", "check"])
    ap.add_argument("--ports", required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--read-bps", type=float, default=200)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    a.ports = [int(p) for p in a.ports.split(",")]
    stats = {"mode": a.mode, "clients": a.clients, "opened": 0, "statuses": {}, "errors": {}, "outcomes": {}}
    if a.mode == "cancel":
        stats.update(dropped_before_output=0, dropped_mid_stream=0, finished_before_drop=0)
    if a.mode == "slow":
        stats.update(bytes_read=[], seconds_open=[], seconds_after_first_byte=[], read_bps=a.read_bps)
    fn = {"cancel": cancel_client, "slow": slow_client, "check": check_client}[a.mode]

    async def run():
        await asyncio.gather(*(fn(a, i, stats) for i in range(a.clients)))
    asyncio.run(run())
    json.dump(stats, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()

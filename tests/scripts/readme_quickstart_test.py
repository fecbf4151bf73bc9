#!/usr/bin/env python3
"""tessera tests: README.md's quick start, run as written (ctest `readme_quickstart`).

The commands come from README.md itself, so the test breaks when the README changes and its commands
stop working: every complete shell command of the ```sh blocks before the first "## " heading, and
every inline `bash ...` / `curl ...` command of that prose. Each is run with bash from the repository
root, as a reader would paste it, with two changes only:
  - a server command (scripts/run.sh without a subcommand) gets --port 0 in place of its port (the
    README's :8000 or its --port N), so that a free port is used; the port comes from its
    "listening on" line, and /health must answer 200 before anything else;
  - a curl command's localhost:PORT is the actual port of the server the README started on PORT.
A curl whose request declares tools must get a tool_calls reply; one without, a prose reply. Every
server also gets a plain question (README: "a plain question gets English prose") and, started with
--api-key KEY, must refuse a request without the key (401) and take one with it. The test-suite
command (scripts/test.sh) is not run here (it is this suite): CI's entry point (.ci/run) must run it
as written. Only loopback is used. Servers are stopped with SIGTERM (exit code 0 expected) and every
process started is killed on the way out.

Environment: TESSERA_BUILD_DIR (the ctest build directory; scripts/run.sh builds and runs tessera
there), TESSERA_SOURCE_DIR (the repository).
"""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SOURCE = os.environ.get("TESSERA_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
READY_SECONDS = 300  # scripts/run.sh checks the packages and the build, then the model loads and warms up
REQUEST_SECONDS = 300
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def quick_start_commands(readme):
    """The quick start's commands in order: complete commands of its sh blocks, then its inline ones."""
    head = re.split(r"^## ", readme, maxsplit=1, flags=re.M)[0]
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", head, flags=re.M | re.S):
        pending = ""
        for line in block.splitlines(keepends=True):
            pending += line
            # A command is complete when bash can parse it (a quoted JSON body spans several lines).
            if pending.strip() and subprocess.run(["bash", "-n"], input=pending, text=True,
                                                  capture_output=True).returncode == 0:
                commands.append(pending.strip())
                pending = ""
        if pending.strip():
            check(False, "README quick start: an incomplete command in a sh block: " + pending.strip())
    prose = re.sub(r"^```.*?^```", "", head, flags=re.M | re.S)
    commands += [c for c in re.findall(r"`((?:bash|curl) [^`]+)`", prose)]
    return commands


def strip_comment(command):
    return shlex.join(shlex.split(command, comments=True))


def run_to_end(line, env, timeout):
    """Runs a command line in its own process group; the group is killed if it outlives `timeout`."""
    proc = subprocess.Popen(["bash", "-c", line], cwd=SOURCE, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(killed after {timeout} s)"
    return proc.returncode, out, err


def is_server(words):
    return words[:2] == ["bash", "scripts/run.sh"] and (len(words) == 2 or words[2].startswith("-"))


class Server:
    def __init__(self, command, readme_port, env, tmp):
        self.command, self.readme_port = command, readme_port
        words = shlex.split(command, comments=True)
        self.api_key = words[words.index("--api-key") + 1] if "--api-key" in words else None
        # --port N -> --port 0, or --port 0 added: a free port.
        line = re.sub(r"--port[ =]\d+", "--port 0", strip_comment(command))
        if "--port 0" not in line:
            line += " --port 0"
        self.out = open(os.path.join(tmp, f"server{readme_port}.out"), "w+")
        self.err = open(os.path.join(tmp, f"server{readme_port}.err"), "w+")
        print(f"start: {line}", flush=True)
        self.proc = subprocess.Popen(["bash", "-c", line], cwd=SOURCE, env=env, stdout=self.out, stderr=self.err,
                                     start_new_session=True)
        self.port = None

    def log(self):
        self.err.seek(0)
        return self.err.read()[-4000:]

    def wait_ready(self):
        deadline = time.time() + READY_SECONDS
        while self.port is None:
            self.out.seek(0)
            m = re.search(r"tessera: listening on http://[^:\s]+:(\d+)", self.out.read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None or time.time() > deadline:
                return check(False, f"{self.command}: no 'listening on' line (exit {self.proc.poll()})\n{self.log()}")
            else:
                time.sleep(0.2)
        status = None
        while time.time() < deadline:
            status, _ = http("GET", self.port, "/health")
            if status == 200 or self.proc.poll() is not None:
                break
            time.sleep(0.2)
        return check(status == 200, f"{self.command}: /health answers 200 on port {self.port} (got {status})")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
        check(code == 0, f"{self.command}: SIGTERM stops it with exit code 0 (got {code})")

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def http(method, port, path, body=None, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_SECONDS) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None, ""


def check_reply(what, text, want_tools):
    try:
        choice = json.loads(text)["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return check(False, f"{what}: a chat completion, got {text[:500]!r}")
    msg = choice.get("message", {})
    if want_tools:
        calls = msg.get("tool_calls") or []
        ok = choice.get("finish_reason") == "tool_calls" and calls and calls[0]["function"]["name"]
        return check(bool(ok), f"{what}: a tool_calls reply (got {json.dumps(choice)[:400]})")
    content = (msg.get("content") or "").strip()
    ok = not msg.get("tool_calls") and len(re.findall(r"[A-Za-z]+", content)) >= 3
    return check(ok, f"{what}: a prose reply (got {content[:200]!r})")


def main():
    readme = open(os.path.join(SOURCE, "README.md")).read()
    commands = quick_start_commands(readme)
    print("README quick start commands:\n  " + "\n  ".join(c.replace("\n", "\n    ") for c in commands), flush=True)
    env = dict(os.environ)
    servers = {}  # README port -> Server
    counts = {"server": 0, "curl": 0, "test": 0, "other": 0}
    with tempfile.TemporaryDirectory(prefix="tessera-readme-") as tmp:
        try:
            for command in commands:
                words = shlex.split(command, comments=True)
                if words[:2] == ["bash", "scripts/test.sh"]:
                    counts["test"] += 1
                    ci = open(os.path.join(SOURCE, ".ci/run")).read()
                    check(re.search(r"^exec " + re.escape(strip_comment(command)) + r"\s*$", ci, flags=re.M) is not None,
                          f"{command}: CI's entry point (.ci/run) runs it as written (it is this test suite)")
                elif is_server(words):
                    counts["server"] += 1
                    m = re.search(r"--port[ =](\d+)", command)
                    port = int(m.group(1)) if m else 8000  # tessera serve's default
                    server = Server(command, port, env, tmp)
                    servers[port] = server
                    if not server.wait_ready():
                        continue
                    # README: a plain question gets English prose.
                    key = {"authorization": f"Bearer {server.api_key}"} if server.api_key else {}
                    status, text = http("POST", server.port, "/v1/chat/completions",
                                        {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
                                        key)
                    check(status == 200, f"{command}: a plain question is answered (status {status})")
                    if status == 200:
                        check_reply(f"{command}: a plain question", text, want_tools=False)
                    if server.api_key:
                        status, _ = http("GET", server.port, "/v1/models")
                        check(status == 401, f"{command}: no key, 401 (got {status})")
                        status, _ = http("GET", server.port, "/v1/models", headers=key)
                        check(status == 200, f"{command}: with the key, 200 (got {status})")
                elif words and words[0] == "curl":
                    counts["curl"] += 1
                    m = re.search(r"localhost:(\d+)", command)
                    server = servers.get(int(m.group(1))) if m else None
                    if not check(server is not None and server.port is not None,
                                 f"{command.splitlines()[0]}: a README server runs on its port"):
                        continue
                    line = command.replace(f"localhost:{server.readme_port}", f"localhost:{server.port}")
                    code, out, err = run_to_end(line, env, REQUEST_SECONDS)
                    check(code == 0, f"{command.splitlines()[0]}: exit code 0 (got {code}) {err}")
                    body = re.search(r"-d '([^']*)'", command, flags=re.S)
                    want_tools = body is not None and "tools" in json.loads(body.group(1))
                    check_reply(command.splitlines()[0], out, want_tools)
                else:
                    counts["other"] += 1
                    code, out, err = run_to_end(command, env, READY_SECONDS + REQUEST_SECONDS)
                    check(code == 0 and out.strip() != "",
                          f"{command}: exit code 0 and output (got {code}, {out[-300:]!r}) {err[-2000:]}")
            for server in servers.values():
                server.stop()
        finally:
            for server in servers.values():
                server.kill()
    # The extraction found what the quick start is about: a server, a request to it, the tests.
    check(counts["server"] >= 1 and counts["curl"] >= 1 and counts["test"] >= 1,
          f"the quick start has a server command, a curl and the test command (found {counts})")
    print(f"{len(failures)} failure(s)" if failures else "all README quick start commands work as written")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

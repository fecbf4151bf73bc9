#!/usr/bin/env python3
"""tessera tests: reference renderer for chat templates, configured as transformers'
_compile_jinja_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, a `generation` block, tojson = json.dumps(ensure_ascii=False), raise_exception,
strftime_now).

Input (file given as argv[1], or stdin): a JSON list of {"template": str, "context": object}
cases. Output (stdout): a JSON list, one {"ok": str} or {"error": "<ExceptionType>: <message>"}
per case. A case with "sandbox": false renders in a plain Environment (list.append allowed).
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTracker(Extension):
    """transformers' AssistantTracker without mask tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def make_env(sandbox):
    cls = ImmutableSandboxedEnvironment if sandbox else jinja2.Environment
    env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    data = open(sys.argv[1], encoding="utf-8").read() if len(sys.argv) > 1 else sys.stdin.read()
    cases = json.loads(data)
    envs = {True: make_env(True), False: make_env(False)}
    results = []
    for case in cases:
        try:
            env = envs[case.get("sandbox", True)]
            results.append({"ok": env.from_string(case["template"]).render(**case.get("context", {}))})
        except Exception as e:  # noqa: BLE001 - every failure is reported to the test
            results.append({"error": "%s: %s" % (type(e).__name__, e)})
    sys.stdout.write(json.dumps(results, ensure_ascii=False))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes tests/data/templates/gemma4/golden.json: Gemma 4's published chat template
(tests/data/templates/gemma4/chat_template.jinja, see the README there) rendered by Python's Jinja2
over a set of conversations, configured as transformers' apply_chat_template does (the environment of
tests/tools/jinja_reference.py: sandboxed, trim_blocks, lstrip_blocks, loopcontrols, tojson,
raise_exception).

    python3 tools/make_gemma4_template_golden.py [--out tests/data/templates/gemma4/golden.json]

Needs python3 with jinja2 3.1 (installed on the development machine). The context of each case is
what tessera's ChatTemplate::Render builds: messages, tools (null when none), documents (null),
add_generation_prompt, bos_token, eos_token, then the extra kwargs (enable_thinking...). The
messages are what the server hands the template: content strings or parts, tool-call arguments as
objects. tests/unit/template_gemma4_test.cpp renders the same inputs with tessera's engine and
compares byte for byte.
"""
import argparse
import hashlib
import json
import os
import sys

import jinja2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import jinja_reference  # noqa: E402  (the repository's Jinja2 reference environment)

TEMPLATE = os.path.join(ROOT, "tests", "data", "templates", "gemma4", "chat_template.jinja")
PUBLISHED_SHA256 = "ae53464bf3be25802b3a5b37def7fd89667067d7577049b3b2d74c4d8de4c6d4"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days", "nullable": True},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documents",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filters": {
                    "type": "object",
                    "description": "Narrow the search",
                    "properties": {
                        "year": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["year"],
                },
                "points": {
                    "type": "array",
                    "description": "Coordinates",
                    "items": {
                        "type": "object",
                        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                        "required": ["x", "y"],
                    },
                },
                "limit": {"type": "number"},
                "exact": {"type": "boolean"},
            },
            "required": ["query"],
        },
    },
}
NO_PARAMS = {"type": "function", "function": {"name": "ping", "description": "Liveness check"}}

TOOLS = [WEATHER, SEARCH, NO_PARAMS]

ARGS_EVERY_TYPE = {
    "query": "say \"hi\" \\ then\nnew line {braces} [brackets], commas: and <tags>",
    "filters": {"year": 2024, "tags": ["a", "b c"], "nested": {"deep": {"deeper": [1, 2.5, -3e-05]}}},
    "points": [{"x": 1.5, "y": -2}, {"x": 0, "y": 0.25}],
    "limit": 10,
    "exact": False,
    "missing": None,
    "yes": True,
}


def case(name, messages, tools=None, add_generation_prompt=True, **kwargs):
    return {"name": name, "messages": messages, "tools": tools, "add_generation_prompt": add_generation_prompt,
            "kwargs": kwargs}


CASES = [
    case("plain", [{"role": "user", "content": "What is a mixture of experts?"}]),
    case("plain_no_generation_prompt",
         [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}],
         add_generation_prompt=False),
    case("system_multi_turn",
         [{"role": "system", "content": "  You are terse.  "}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "  Deploy me, 请.  "}]),
    case("developer_role", [{"role": "developer", "content": "Answer in French."},
                            {"role": "user", "content": "Good morning"}]),
    case("system_content_parts",
         [{"role": "system", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
          {"role": "user", "content": [{"type": "text", "text": " Describe "}, {"type": "text", "text": "this."}]}]),
    case("thinking_on", [{"role": "user", "content": "Prove that 17 is prime."}], enable_thinking=True),
    case("thinking_off_explicit", [{"role": "user", "content": "Quick answer please"}], enable_thinking=False),
    case("thinking_on_with_system", [{"role": "system", "content": "Think step by step."},
                                     {"role": "user", "content": "2+2?"}], enable_thinking=True),
    case("tools_declared", [{"role": "system", "content": "Be helpful."},
                            {"role": "user", "content": "Weather in Paris?"}], tools=TOOLS),
    case("tools_declared_thinking", [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],
         enable_thinking=True),
    case("tool_call_and_response",
         [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "call_1", "type": "function",
               "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}],
         tools=[WEATHER]),
    case("tool_call_and_response_thinking",
         [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": None, "reasoning_content": "I should call the weather tool.",
           "tool_calls": [{"id": "call_1", "type": "function",
                           "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
         tools=[WEATHER], enable_thinking=True),
    case("parallel_calls_then_answer",
         [{"role": "user", "content": "Weather in Paris and Rome?"},
          {"role": "assistant", "content": "Checking both.", "tool_calls": [
              {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
              {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
          {"role": "tool", "tool_call_id": "call_b", "content": "22C cloudy"},
          {"role": "tool", "tool_call_id": "call_a", "content": "18C sunny"},
          {"role": "assistant", "content": "Paris 18C, Rome 22C."},
          {"role": "user", "content": "Thanks"}],
         tools=[WEATHER]),
    case("call_arguments_every_type",
         [{"role": "user", "content": "Search"},
          {"role": "assistant", "content": None, "tool_calls": [
              {"id": "c1", "type": "function", "function": {"name": "search_docs", "arguments": ARGS_EVERY_TYPE}}]},
          {"role": "tool", "tool_call_id": "c1", "name": "search_docs", "content": "{\"hits\": [\"a\", \"b\"]}"}],
         tools=[SEARCH]),
    case("call_without_arguments",
         [{"role": "user", "content": "Are you there?"},
          {"role": "assistant", "tool_calls": [
              {"id": "p1", "type": "function", "function": {"name": "ping", "arguments": {}}}]},
          {"role": "tool", "tool_call_id": "p1", "content": "pong"},
          {"role": "assistant", "content": "Yes."}],
         tools=[NO_PARAMS], add_generation_prompt=False),
    case("tool_response_content_parts",
         [{"role": "user", "content": "Look it up"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "s1", "type": "function", "function": {"name": "search_docs", "arguments": {"query": "moe"}}}]},
          {"role": "tool", "tool_call_id": "s1",
           "content": [{"type": "text", "text": "first "}, {"type": "text", "text": "second"}]}],
         tools=[SEARCH]),
    case("tool_response_unknown_id",
         [{"role": "user", "content": "Go"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "x1", "type": "function", "function": {"name": "ping", "arguments": {}}}]},
          {"role": "tool", "tool_call_id": "nope", "content": "ok"}],
         tools=[NO_PARAMS]),
    case("legacy_tool_responses_field",
         [{"role": "user", "content": "Weather?"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
           "tool_responses": [{"name": "get_weather", "response": {"temp": -3, "sky": "snow"}}]}],
         tools=[WEATHER]),
    case("reasoning_history",
         [{"role": "user", "content": "2+2?"},
          {"role": "assistant", "content": "4", "reasoning_content": "Adding two and two."},
          {"role": "user", "content": "3+3?"},
          {"role": "assistant", "content": "<|channel>thought\nsix<channel|>6"}],
         add_generation_prompt=False),
    case("reasoning_after_last_user",
         [{"role": "user", "content": "3+3?"},
          {"role": "assistant", "content": "6", "reasoning": "Three and three."}],
         add_generation_prompt=False, enable_thinking=True),
    case("preserve_thinking",
         [{"role": "user", "content": "Weather in Oslo?"},
          {"role": "assistant", "content": "", "reasoning_content": "Use the tool.", "tool_calls": [
              {"id": "w1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
          {"role": "tool", "tool_call_id": "w1", "content": "-3C"},
          {"role": "assistant", "content": "It is -3C."},
          {"role": "user", "content": "And tomorrow?"}],
         tools=[WEATHER], enable_thinking=True, preserve_thinking=True),
    case("consecutive_assistant_messages",
         [{"role": "user", "content": "Tell me two things"},
          {"role": "assistant", "content": "First."},
          {"role": "assistant", "content": "Second."}]),
    case("unicode_and_newlines",
         [{"role": "system", "content": "Réponds en français.\n\nSois bref."},
          {"role": "user", "content": "日本語 😀\nline2\n"}]),
    case("empty_messages_thinking", [], enable_thinking=True),
    case("string_arguments_rejected",
         [{"role": "user", "content": "Weather?"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}],
         tools=[WEATHER]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "templates", "gemma4", "golden.json"))
    args = ap.parse_args()
    raw = open(TEMPLATE, "rb").read()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != PUBLISHED_SHA256:
        sys.exit("%s is not the published template (sha256 %s)" % (TEMPLATE, digest))
    env = jinja_reference.make_env(True)
    tpl = env.from_string(raw.decode("utf-8"))
    out_cases = []
    for c in CASES:
        ctx = {"messages": c["messages"], "tools": c["tools"], "documents": None,
               "add_generation_prompt": c["add_generation_prompt"], "bos_token": "<bos>", "eos_token": "<eos>"}
        ctx.update(c["kwargs"])
        entry = {"name": c["name"],
                 "input": {"messages": c["messages"], "tools": c["tools"],
                           "add_generation_prompt": c["add_generation_prompt"], "kwargs": c["kwargs"],
                           "bos_token": "<bos>", "eos_token": "<eos>"}}
        try:
            entry["rendered"] = tpl.render(**ctx)
        except jinja2.exceptions.TemplateError as e:
            entry["error"] = "%s: %s" % (type(e).__name__, e)
        out_cases.append(entry)
    doc = {
        "generated_with": "Python Jinja2 %s, transformers' chat-template environment (tests/tools/jinja_reference.py), "
                          "by tools/make_gemma4_template_golden.py" % jinja2.__version__,
        "template": "tests/data/templates/gemma4/chat_template.jinja",
        "template_sha256": digest,
        "cases": out_cases,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %d cases (%d errors) to %s" % (len(out_cases), sum("error" in c for c in out_cases), args.out))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# Renders tests/data/templates/openai-gpt-oss-120b.jinja with Jinja2 3.1 as Hugging Face's
# apply_chat_template does, over the contexts below, into gpt-oss-expected.json: the fixture
# test_template compares lanes' renders with. Run from the repository root.
import datetime
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATE = "2026-12-02"
HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = "openai-gpt-oss-120b.jinja"


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.strptime(DATE, "%Y-%m-%d").strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city's name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "default": 1},
    }, "required": ["city"]}}}
SHAPES = {"type": "function", "function": {
    "name": "shapes", "description": "Every kind of parameter",
    "parameters": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "number"}, "nullable": True},
        "flags": {"type": "array", "items": {"type": "boolean"}},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x"]}},
        "anything": {"type": "array"},
        "either": {"type": ["string", "number"]},
        "single": {"type": ["boolean"]},
        "choice": {"oneOf": [{"type": "string", "description": "a name"}, {"type": "number", "default": 3}]},
        "objs": {"oneOf": [{"type": "object"}, {"type": "string"}], "default": "x"},
        "note": {"type": "string", "nullable": True, "description": "Free text"},
        "ratio": {"type": "number", "default": 0.5},
        "on": {"type": "boolean", "default": False},
        "opts": {"type": "object", "properties": {"deep": {"type": "object", "properties": {"k": {"type": "string"}}}}, "required": ["deep"]},
        "blob": {"type": "object"},
        "free": {},
    }, "required": ["tags", "either"]}}}
NOARGS = {"type": "function", "function": {"name": "now", "description": "The time now", "parameters": {"type": "object", "properties": {}}}}

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}

CASES = [
    ("single", {"messages": [{"role": "user", "content": "Hello"}]}),
    ("system", {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]}),
    ("developer_high", {"messages": [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}],
                        "reasoning_effort": "high"}),
    ("identity_low", {"messages": [{"role": "user", "content": "Who are you?"}], "model_identity": "You are Lanes.",
                      "reasoning_effort": "low"}),
    ("multi", {"messages": [{"role": "user", "content": "Hi there"},
                            {"role": "assistant", "content": "Hello! How can I help?", "thinking": "The user greets."},
                            {"role": "user", "content": "Tell me a joke.\nMake it short."}]}),
    ("unicode", {"messages": [{"role": "user", "content": "Grüße, 世界! \"quotes\" and \\backslash\\ and {{ braces }}"}]}),
    ("tools", {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, NOARGS]}),
    ("tools_shapes", {"messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Go"}],
                      "tools": [SHAPES]}),
    ("tool_turns", {"messages": [{"role": "user", "content": "Weather in Paris?"},
                                 {"role": "assistant", "content": "", "thinking": "I should call get_weather.", "tool_calls": [CALL]},
                                 {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}],
                    "tools": [WEATHER]}),
    ("tool_turns_done", {"messages": [{"role": "user", "content": "Weather in Paris?"},
                                      {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]},
                                      {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
                                      {"role": "assistant", "content": "It is sunny in Paris."},
                                      {"role": "user", "content": "And tomorrow?"}],
                         "tools": [WEATHER]}),
    ("tool_args_text", {"messages": [{"role": "user", "content": "Weather?"},
                                     {"role": "assistant", "content": "", "tool_calls": [
                                         {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                                     {"role": "tool", "content": "cold"}],
                        "tools": [WEATHER]}),
    ("builtin", {"messages": [{"role": "user", "content": "Search it"}], "builtin_tools": ["browser", "python"], "tools": [NOARGS]}),
    ("builtin_python", {"messages": [{"role": "user", "content": "Compute"}], "builtin_tools": ["python"]}),
    ("training", {"messages": [{"role": "user", "content": "2+2?"},
                               {"role": "assistant", "content": "4", "thinking": "Simple sum."}]}),
    ("err_tool_first", {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]}),
    ("err_channel", {"messages": [{"role": "user", "content": "x"},
                                  {"role": "assistant", "content": "<|channel|>final<|message|>hi"}]}),
    ("err_both", {"messages": [{"role": "user", "content": "x"},
                               {"role": "assistant", "content": "a", "thinking": "b", "tool_calls": [CALL]}]}),
]


def main():
    src = open(os.path.join(HERE, TEMPLATE), encoding="utf-8").read()
    t = env.from_string(src)
    renders = {}
    for name, ctx in CASES:
        for gen in (False, True):
            c = dict(ctx, bos_token="<|startoftext|>", eos_token="<|return|>", add_generation_prompt=gen)
            try:
                got = {"ok": t.render(**c)}
            except jinja2.exceptions.TemplateError as e:
                got = {"error": str(e)}
            renders[name + ("+gen" if gen else "")] = {"context": c, **got}
    out = {"template": TEMPLATE, "date": DATE, "renders": renders}
    with open(os.path.join(HERE, "gpt-oss-expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

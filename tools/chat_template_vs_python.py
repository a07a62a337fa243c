#!/usr/bin/env python3
"""Compare `sluice template` with Python Jinja2 configured as transformers renders chat templates
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson with
ensure_ascii=False, raise_exception). The byte-for-byte oracle of the test suite is
@huggingface/jinja (tests/oracle/chat_template.test.mjs); this script shows where the Python
reference differs, which chat_template.cpp documents.

Usage: tools/chat_template_vs_python.py BUILD/bin/sluice MODEL_DIR [MODEL_DIR...]
Needs: pip jinja2 (3.1.x). Conversations: tests/oracle/conversations/qwen3.json.
"""
import json
import os
import subprocess
import sys
import tempfile

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(message):
        raise Exception(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def special_token(config, key):
    v = config.get(key)
    return v.get("content") if isinstance(v, dict) else v


def main():
    sluice, model_dirs = sys.argv[1], sys.argv[2:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cases = json.load(open(os.path.join(root, "tests/oracle/conversations/qwen3.json")))
    env = make_env()
    tmp = tempfile.mkdtemp()
    same = both_error = differ = 0
    for model_dir in model_dirs:
        config_path = os.path.join(model_dir, "tokenizer_config.json")
        config = json.load(open(config_path)) if os.path.exists(config_path) else {}
        source = config.get("chat_template")
        if not isinstance(source, str):
            source = open(os.path.join(model_dir, "chat_template.jinja")).read()
        template = env.from_string(source)
        for case in cases:
            for gen in (True, False):
                variables = dict(messages=case["messages"], tools=case.get("tools"), add_generation_prompt=gen)
                for key in ("bos_token", "eos_token"):
                    if special_token(config, key):
                        variables[key] = special_token(config, key)
                variables.update(case.get("kwargs", {}))
                try:
                    py = (True, template.render(**variables))
                except Exception as e:  # the template's own errors count as a result
                    py = (False, str(e))
                messages_path = os.path.join(tmp, "messages.json")
                json.dump(case["messages"], open(messages_path, "w"))
                args = [sluice, "template", model_dir, "--messages", messages_path]
                if case.get("tools"):
                    tools_path = os.path.join(tmp, "tools.json")
                    json.dump(case["tools"], open(tools_path, "w"))
                    args += ["--tools", tools_path]
                if case.get("kwargs"):
                    args += ["--kwargs", json.dumps(case["kwargs"])]
                if not gen:
                    args.append("--no-generation-prompt")
                r = subprocess.run(args, capture_output=True)
                ours = (r.returncode == 0, (r.stdout if r.returncode == 0 else r.stderr).decode())
                if py[0] and ours[0] and py[1] == ours[1]:
                    same += 1
                elif not py[0] and not ours[0]:
                    both_error += 1
                else:
                    differ += 1
                    print(f"DIFF {model_dir} | {case['name']} | add_generation_prompt={gen}")
                    if py[0] and ours[0]:
                        a, b = py[1], ours[1]
                        i = 0
                        while i < min(len(a), len(b)) and a[i] == b[i]:
                            i += 1
                        print(f"  python: {a[max(0, i - 30):i + 60]!r}\n  sluice: {b[max(0, i - 30):i + 60]!r}")
                    else:
                        print(f"  python: {py[1][:160]!r}\n  sluice: {ours[1][:160]!r}")
    print(f"{same} same, {both_error} both error, {differ} differ")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes prompts/long-edit.jsonl: one editing request of about 3,000
SmolLM2 tokens (a Python module of 60 small functions, then "rename
`total` to `running_sum` and return the whole file"), the long-context
editing prompt of issue 36's benchmark (docs/performance.md, "Adaptive
draft length"). Deterministic: the same file every run."""
import json
import pathlib

ops = ["+", "-", "*"]
fns = []
for i in range(60):
    op = ops[i % 3]
    fns.append(
        f"def step_{i:02d}(values, scale={i % 7 + 1}):\n"
        f"    \"\"\"Fold the values with {op} and scale the result.\"\"\"\n"
        f"    total = {i % 5}\n"
        f"    for v in values:\n"
        f"        total = total {op} v\n"
        f"    return total * scale\n"
    )
module = "\n\n".join(fns)
prompt = (
    "Here is a Python module.\n\n```python\n" + module + "```\n\n"
    "Rename the local variable `total` to `running_sum` in every function. "
    "Change nothing else, and return the whole module in one code block."
)
line = {"id": "long-edit", "type": "edit-long", "messages": [{"role": "user", "content": prompt}]}
out = pathlib.Path(__file__).resolve().parents[2] / "prompts" / "long-edit.jsonl"
out.write_text(json.dumps(line) + "\n")
print(f"wrote {out} ({len(prompt)} characters)")

#!/usr/bin/env python3
"""Asks `tuner propose --dry-run` what it would write today for every entry of
policy/draft-block-width.toml, from the entry's own record, and says whether
the entry's pool or decision (width, adaptive, ratio, interval, pooled
records) would change. Nothing is written: a dry run edits no table, and
propose reads the committed records without touching them.

The overrides an entry was proposed with (its note names each) are given
again, and a stale fingerprint or an older date is allowed: the question is
what the pool and the rule give, not whether the entry is fresh.

    scripts/entries-under-rules.py [TUNER]      (default target/release/tuner)

One markdown table row per entry; exit 1 when any entry's pool or decision
would change.
"""
import os
import re
import subprocess
import sys
import tomllib

TUNER = sys.argv[1] if len(sys.argv) > 1 else "target/release/tuner"
# The fields that carry the pool and the decision; a change to any other
# (the note's words) is not a change of the entry's pool or decision.
DECISION_FIELDS = ("width", "adaptive", "ratio", "ratio_interval", "pooled")
# What an entry's note says for each override, and its flag.
OVERRIDES = {
    "allowed by --allow-dirty": "--allow-dirty",
    "allowed by --allow-loose-gate": "--allow-loose-gate",
    "allowed by --allow-weak-plan": "--allow-weak-plan",
}


def main() -> int:
    if not os.access(TUNER, os.X_OK):
        print(f"no tuner at {TUNER}: cargo build --release -p tuner", file=sys.stderr)
        return 2
    with open("policy/draft-block-width.toml", "rb") as f:
        table = tomllib.load(f)
    print("| entry (record) | committed | today | pool today (left out) |")
    print("|---|---|---|---|")
    changed = 0
    for e in table.get("entry", []):
        note = e.get("note", "")
        flags = [flag for say, flag in OVERRIDES.items() if say in note]
        flags += ["--allow-stale-fingerprint", "--allow-older"]
        o = subprocess.run(
            [TUNER, "propose", e["record"], "--dry-run", *flags], capture_output=True, text=True
        )
        committed = f"{'adaptive up to ' if e.get('adaptive') else 'width '}{e['width']} {e['ratio']} {e['ratio_interval']}"
        committed += f", pooled {len(e.get('pooled', []))}" if "pooled" in e else ", not pooled"
        if o.returncode != 0:
            refused = next((l for l in o.stderr.splitlines() if "refused" in l or "error" in l), o.stderr[-200:])
            print(f"| {e['record']} | {committed} | refused: {refused[:220]} | |")
            changed += 1
            continue
        moved = set()
        for line in o.stdout.splitlines():
            m = re.match(r"^[+-]([a-z_]+) = ", line)
            if m and m.group(1) in DECISION_FIELDS:
                moved.add(m.group(1))
        pooled = [l.strip() for l in o.stderr.splitlines() if re.match(r"^  records/", l)]
        left = [l.strip()[len("left out: "):][:90] for l in o.stderr.splitlines() if l.startswith("  left out: ")]
        verdict = next((l[len("tuner propose: "):] for l in o.stderr.splitlines()
                        if l.startswith("tuner propose: ") and ("pooled rule" in l or "kept" in l or "replaces" in l)), "")
        today = "unchanged" if not moved else "CHANGES " + ", ".join(sorted(moved)) + f": {verdict}"
        changed += bool(moved)
        print(f"| {e['record']} | {committed} | {today} | {len(pooled)} record(s); left out: {'; '.join(left) or 'none'} |")
    print(f"\n{len(table.get('entry', []))} entries; {changed} would change or are refused", file=sys.stderr)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

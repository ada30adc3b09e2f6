#!/usr/bin/env bash
# Re-summarizes every committed record under today's rules, into copies (the
# committed folders are not touched), and asks `tuner propose --dry-run` what
# it would do with each: one markdown table row per record (docs/records.md,
# "The committed records under the rules of 2026-12-03").
#
#   scripts/records-under-rules.sh [TUNER]     (default target/release/tuner)
set -euo pipefail
tuner=${1:-target/release/tuner}
[ -x "$tuner" ] || { echo "no tuner at $tuner: cargo build --release -p tuner" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| record | decision | process spread | detectable drift (sweep test) | same width in a replicate | expected regret | propose --dry-run |"
echo "|---|---|---|---|---|---|---|"
for dir in records/*/; do
    dir=${dir%/}
    [ -f "$dir/raw.jsonl" ] || continue
    name=$(basename "$dir")
    mkdir -p "$work/$name"
    cp "$dir/raw.jsonl" "$work/$name/"
    [ -f "$dir/prompts.jsonl" ] && cp "$dir/prompts.jsonl" "$work/$name/"
    if ! "$tuner" summarize --json "$work/$name" > "$work/$name.json" 2> "$work/$name.err"; then
        echo "| $name | summarize failed: $(head -c 200 "$work/$name.err" | tr '\n|' '  ') | | | | | |"
        continue
    fi
    if out=$("$tuner" propose "$dir" --dry-run 2>&1 >/dev/null); then
        verdict=$(printf '%s\n' "$out" | sed -n 's/^tuner propose: \(.*\(kept\|replaces\|pooled rule.s choice\).*\)$/\1/p' | tail -1)
        verdict="would write: ${verdict:-the entry}"
    else
        verdict=$(printf '%s\n' "$out" | sed -n 's/^tuner propose: refused: //p' | head -1 | cut -c1-160)
        verdict="refused: ${verdict}"
    fi
    python3 - "$work/$name.json" "$name" "$verdict" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
d = s["decision"]
dec = "off" if d["width"] is None else f"width {d['width']}"
if d.get("ratio") is not None and d.get("ratio_interval"):
    lo, hi = d["ratio_interval"]
    dec += f" {d['ratio']:.3f} [{lo:.3f}, {hi:.3f}]"
sp = s.get("process_spread")
sd = s.get("sweep_drift")
st = s.get("stability")
cell = lambda x: x.replace("|", "/")
print("| {} | {} | {} | {} | {} | {} | {} |".format(
    sys.argv[2], dec,
    "-" if sp is None else f"{100*sp:.1f}%",
    "-" if sd is None else f"{100*sd['detectable']:.1f}%" + (" (drifted)" if sd["drifted"] else ""),
    "-" if st is None else f"{100*st['same']:.0f}%",
    "-" if st is None else f"{100*st['expected_regret']:.1f}%",
    cell(sys.argv[3])))
EOF
done

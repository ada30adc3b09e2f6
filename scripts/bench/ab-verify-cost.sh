#!/usr/bin/env bash
# A/B of two runtime binaries on the verify-cost curve: one fresh
# `runtime bench --verify-cost` process per sample, the two binaries
# alternating and the first swapping every round, so drift of a shared host
# spreads over both.
#
# Usage: scripts/bench/ab-verify-cost.sh A_BINARY B_BINARY PROMPT_TOKENS MAX_ROWS THREADS ROUNDS [REPS]
# Each sample is one process's median pass time per width (REPS repetitions,
# default 3, after one warm-up). Prints every sample and, per width, each
# side's median over rounds, B / A, and each side's W / W1 ratio of medians.
set -euo pipefail
[ $# -ge 6 ] && [ $# -le 7 ] || {
    echo "usage: $0 A_BINARY B_BINARY PROMPT_TOKENS MAX_ROWS THREADS ROUNDS [REPS]" >&2
    exit 2
}
A=$1; B=$2; P=$3; W=$4; T=$5; R=$6; REPS=${7:-3}
for n in "$P" "$W" "$T" "$R" "$REPS"; do
    [ "$n" -ge 1 ] 2>/dev/null || { echo "$0: $n is not a positive integer" >&2; exit 2; }
done
[ "$R" -le 100 ] && [ "$W" -le 16 ] || { echo "$0: at most 100 rounds and 16 rows" >&2; exit 2; }
for r in $(seq 1 "$R"); do
    if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
    for side in $order; do
        bin=$A; [ "$side" = B ] && bin=$B
        # `--max-width`, the old name of `--max-rows`: older builds, which an A/B compares with, know only it.
        "$bin" bench --verify-cost --prompt-tokens "$P" --max-width "$W" --threads "$T" --reps "$REPS" --warmup 1 --json 2>/dev/null |
            python3 -c "import json,sys; d=json.load(sys.stdin); print('$side', ' '.join(str(c['seconds']['median']) for c in d['verify_cost']))"
    done
done | python3 -c "
import sys, statistics as st
r = {'A': [], 'B': []}
for line in sys.stdin:
    side, *ms = line.split()
    r[side].append([float(x) * 1e3 for x in ms])
    print(side, ' '.join(f'{float(x) * 1e3:.3f}' for x in ms), 'ms', flush=True)
med = {s: [st.median(col) for col in zip(*rows)] for s, rows in r.items()}
for w, (a, b) in enumerate(zip(med['A'], med['B']), start=1):
    print(f'W={w}: A {a:.3f} ms  B {b:.3f} ms  B/A {b / a:.3f}  A W/W1 {a / med[\"A\"][0]:.3f}  B W/W1 {b / med[\"B\"][0]:.3f}')
"

#!/usr/bin/env bash
# A/B of two runtime binaries on prefill and decode tok/s: one fresh
# `runtime bench` process per sample, the two binaries alternating and the
# first swapping every round, so drift of a shared host spreads over both.
#
# Usage: scripts/bench/ab-runtime.sh A_BINARY B_BINARY PROMPT_TOKENS GEN_TOKENS THREADS ROUNDS [MODEL]
# MODEL is a path or a known name (default: the runtime's default model).
# Prints every sample and, per statistic, each side's median and B / A.
set -euo pipefail
[ $# -eq 6 ] || [ $# -eq 7 ] || {
  echo "usage: $0 A_BINARY B_BINARY PROMPT_TOKENS GEN_TOKENS THREADS ROUNDS [MODEL]" >&2
  exit 2
}
A=$1; B=$2; P=$3; G=$4; T=$5; R=$6; MODEL=${7:-smollm2-135m}
for r in $(seq 1 "$R"); do
  if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for side in $order; do
    bin=$A; [ "$side" = B ] && bin=$B
    "$bin" bench --model "$MODEL" --prompt-tokens "$P" --gen-tokens "$G" --threads "$T" --reps 1 --warmup 1 --json 2>/dev/null \
      | python3 -c "import json,sys; d=json.load(sys.stdin); print('$side', d['prefill_tok_per_s']['median'], d['decode_tok_per_s']['median'])"
  done
done | python3 -c "
import sys, statistics as st
r = {'A': ([], []), 'B': ([], [])}
for line in sys.stdin:
    side, p, d = line.split()
    r[side][0].append(float(p)); r[side][1].append(float(d))
    print(f'{side} prefill {float(p):.1f} decode {float(d):.1f}', flush=True)
for i, name in ((0, 'prefill'), (1, 'decode')):
    a, b = st.median(r['A'][i]), st.median(r['B'][i])
    print(f'{name} tok/s median: A {a:.1f}  B {b:.1f}  B/A {b / a:.2f}')
"

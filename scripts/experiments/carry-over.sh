#!/bin/bash
# Do speculative arms speed up the classic arms after them? Runs `runtime
# generate` processes as `tuner sweep` starts them (Gemma 3 270M, the sweep's
# 12 prompts, 48 tokens, 1 warm-up pass, 2 threads): 6 classic arms, then 3
# at width 4, three times, then 6 classic; prints each arm's decode tok/s.
# docs/records.md has the 2026-12-05 result. Needs a release build and the
# model in the cache (`runtime fetch-model -m gemma3-270m`).
set -euo pipefail
cd "$(dirname "$0")/../.."
M=$(./target/release/runtime fetch-model -m gemma3-270m 2>/dev/null)
arm() { # $1 label, $2 drafter flags
  ./target/release/runtime generate --json --model "$M" --prompts prompts/sweep.jsonl --max-tokens 48 \
    --threads 2 --repeat 1 --warmup 1 --temperature 0 --seed 0 $2 2>/dev/null |
    python3 -c "
import json, sys
t = ms = 0
for l in sys.stdin:
    d = json.loads(l)
    if d.get('event') == 'completion' and not d['warmup']:
        t += d['decode_tokens']; ms += d['decode_ms']
print('$1', round(t / ms * 1000, 2))"
}
for block in 1 2 3; do
  for i in 1 2 3 4 5 6; do arm "C$block.$i" "--drafter none"; done
  for i in 1 2 3; do arm "S$block.$i" "--drafter ngram --draft-width 4"; done
done
for i in 1 2 3 4 5 6; do arm "C4.$i" "--drafter none"; done

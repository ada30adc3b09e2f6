#!/usr/bin/env python3
"""What an arm's warm-up pass buys: each arm's recorded pass against its
warm-up pass, from a record's logs (docs/records.md, "The warm-up pass").

Per arm (a fresh runtime process that ran one warm-up pass and one recorded
pass over the prompt set): the geometric mean over prompts of the recorded
request's decode tok/s over the warm-up request's, and the same for the
arm's first prompt alone (where a cold process would show). Per record:
the median, 10th and 90th percentiles over arms, and the speculative arms'
mean log ratio against the classic arms' (what dropping the warm-up would
move a width's ratio to classic by); then that over every record's arms.
A warm-up that mattered would put the ratio above 1.0 (the recorded pass
faster); one that biased a decision would put the last column off 1.0.

    python3 scripts/warmup-effect.py 'records/2026-12-06-*qwen2.5-coder-1.5b*'
"""
import glob
import json
import math
import os
import statistics as st
import sys


def arm_ratios(path):
    warm, rec, order = {}, {}, []
    with open(path) as fh:
        for line in fh:
            if not line.startswith('{"event":"completion"'):
                continue
            d = json.loads(line)
            rate = d.get("decode_tok_per_s") or 0.0
            if d["warmup"]:
                warm[d["prompt_id"]] = rate
                order.append(d["prompt_id"])
            else:
                rec[d["prompt_id"]] = rate
    both = [p for p in rec if warm.get(p, 0) > 0 and rec[p] > 0]
    if len(both) < 3:
        return None
    whole = math.exp(st.mean(math.log(rec[p] / warm[p]) for p in both))
    first = rec[order[0]] / warm[order[0]] if order and order[0] in both else None
    return whole, first


def widths(rec):
    """Arm index -> width (None: a classic arm), from the record's plan."""
    with open(os.path.join(rec, "raw.jsonl")) as fh:
        header = json.loads(fh.readline())
    return {a["index"]: a["width"] for a in header["plan"]}


def spec_over_classic(c, s):
    """exp(mean log speculative - mean log classic) and its 95% half-width (log scale)."""
    d = st.mean(s) - st.mean(c)
    se = math.sqrt(st.variance(s) / len(s) + st.variance(c) / len(c))
    return math.exp(d), 1.96 * se


def main(patterns):
    print(
        "| record | arms | recorded / warm-up: median | 10th–90th pct | first prompt: median "
        "| speculative arms' over classic arms' [95%] |"
    )
    print("|---|---|---|---|---|---|")
    all_c, all_s = [], []
    for pattern in patterns:
        for rec in sorted(g for g in glob.glob(pattern) if os.path.isdir(os.path.join(g, "logs"))):
            w = widths(rec)
            rs, c, s = [], [], []
            for f in sorted(glob.glob(rec + "/logs/arm-*.stdout.jsonl")):
                r = arm_ratios(f)
                if not r:
                    continue
                rs.append(r)
                index = int(os.path.basename(f)[len("arm-") :].split("-")[0])
                (c if w.get(index) is None else s).append(math.log(r[0]))
            if not rs:
                continue
            whole = sorted(r[0] for r in rs)
            first = [r[1] for r in rs if r[1] is not None]
            n = len(whole)
            split = "–"
            if len(c) > 1 and len(s) > 1:
                ratio, half = spec_over_classic(c, s)
                split = f"{ratio:.3f} [{ratio * math.exp(-half):.3f}, {ratio * math.exp(half):.3f}]"
                all_c += c
                all_s += s
            print(
                f"| `{rec.rstrip('/').split('/')[-1]}` | {n} | {st.median(whole):.3f} "
                f"| {whole[n // 10]:.3f}–{whole[(9 * n) // 10]:.3f} | {st.median(first):.3f} | {split} |"
            )
    if len(all_c) > 1 and len(all_s) > 1:
        ratio, half = spec_over_classic(all_c, all_s)
        print(
            f"\nAll arms: {len(all_c)} classic, {len(all_s)} speculative; what the warm-up changes in a "
            f"speculative-to-classic ratio: {ratio:.4f} [{ratio * math.exp(-half):.4f}, {ratio * math.exp(half):.4f}]"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["records/*"])

#!/usr/bin/env python3
"""Replays draft-length schedules on acceptance traces (runtime's
`accept_trace` example): the tokens each round accepts are exact (greedy
output is classic's at every length), the cost of each verify pass comes
from a measured cost curve, so schedules compare without timing noise.

    python3 scripts/bench/replay-adaptive.py TRACE.jsonl [...] [--curve CTX=R1,...]...

Prints, per task type and trace, decode speed against classic (one-row
passes per token) for the fixed widths 1..8 and the adaptive controller
(a port of policy/src/adaptive.rs; its constants are options here,
`--prior 0.5 --start-weight 1` for example, so variants can be compared).
`--cap N` (8) and `--max-tokens N` (96: the tokens each trace was made
with; the sweep's prompts run 48) as the runtime's flags.

The traces:
    cargo build --release -p runtime --example accept_trace
    target/release/examples/accept_trace MODEL.gguf prompts/sweep.jsonl 48 > sweep.jsonl

"""
import json, sys, math
from collections import defaultdict

DEFAULT_CURVES = [(64, [1, 1.092, 1.266, 1.269, 1.367, 1.517, 1.694, 1.835, 2.067]),
                  (2048, [1, 1.108, 1.256, 1.359, 1.549, 1.701, 1.882, 2.028, 2.333])]


def at(rel, rows):
    rows = max(rows, 1)
    if rows <= len(rel):
        return rel[rows - 1]
    step = max(rel[-1] - rel[-2], 0.0)
    return rel[-1] + step * (rows - len(rel))


def relative(curves, ctx, rows):
    i = sum(1 for c, _ in curves if c <= ctx)
    if i == 0:
        return at(curves[0][1], rows)
    if i == len(curves):
        return at(curves[-1][1], rows)
    (c0, r0), (c1, r1) = curves[i - 1], curves[i]
    t = (ctx - c0) / (c1 - c0)
    a, b = at(r0, rows), at(r1, rows)
    return a + (b - a) * t


class Adaptive:
    # The defaults are policy/src/adaptive.rs's constants (DECAY, PRIOR,
    # PRIOR_START_WEIGHT, PRIOR_WEIGHT, PROBE_AFTER).
    def __init__(self, curves, cap, decay=0.5, prior=0.9, start_weight=2.0, prior_weight=1.0, probe_after=8):
        self.curves, self.cap = curves, cap
        self.decay, self.prior, self.pw, self.probe_after = decay, prior, prior_weight, int(probe_after)
        self.sum = [0.0] * cap
        self.w = [0.0] * cap
        self.p0w = start_weight
        self.streak = 0

    def estimates(self, n):
        prev = self.prior
        out = []
        for i in range(n):
            if i < self.cap:
                k = self.p0w if i == 0 else self.pw
                prev = (self.sum[i] + k * prev) / (self.w[i] + k)
            out.append(prev)
        return out

    def expected(self, n):
        e, p = 1.0, 1.0
        for a in self.estimates(n):
            p *= a
            e += p
        return e

    def choose(self, ctx, budget):
        cap = min(self.cap, budget)
        best, rate = 0, 1.0
        for n in range(1, cap + 1):
            r = self.expected(n) / relative(self.curves, ctx, n + 1)
            if r > rate:
                best, rate = n, r
        if best == 0 and cap > 0 and self.streak >= self.probe_after:
            best = 1
        self.streak = self.streak + 1 if best == 0 else 0
        return best

    def observe(self, drafted, accepted):
        drafted = min(drafted, self.cap)
        accepted = min(accepted, drafted)
        tested = accepted + 1 if accepted < drafted else accepted
        self.p0w *= self.decay
        for i in range(self.cap):
            self.sum[i] *= self.decay
            self.w[i] *= self.decay
            if i < tested:
                self.sum[i] += 1.0 if i < accepted else 0.0
                self.w[i] += 1.0


class Fixed:
    def __init__(self, w):
        self.w = w

    def choose(self, ctx, budget):
        return min(self.w, budget)

    def observe(self, d, a):
        pass


def replay(tr, sched, curves, max_tokens):
    out, avail, agree, pt = tr["out"], tr["avail"], tr["agree"], tr["prompt_tokens"]
    p, cost, lengths = 1, 0.0, defaultdict(int)
    while p < out:
        room = max_tokens - p
        n = min(sched.choose(pt + p, room), room)
        lengths[n] += 1
        d = min(n, avail[p])
        ctx = pt + p
        if d == 0:
            cost += 1.0
            p += 1
            continue
        k = min(d, agree[p], out - p)
        rejected = k < d and p + k < out
        cost += relative(curves, ctx, d + 1)
        sched.observe(k + int(rejected), k)
        p += k + 1
    return out - 1, cost, lengths


def main():
    args = sys.argv[1:]
    curves, files, kw = [], [], {}
    i = 0
    while i < len(args):
        if args[i] == "--curve":
            c, r = args[i + 1].split("=")
            curves.append((int(c), [float(x) for x in r.split(",")]))
            i += 2
        elif args[i].startswith("--"):
            kw[args[i][2:].replace("-", "_")] = float(args[i + 1])
            i += 2
        else:
            files.append(args[i])
            i += 1
    curves = sorted(curves) or DEFAULT_CURVES
    cap = int(kw.pop("cap", 8))
    max_tokens = int(kw.pop("max_tokens", 96))
    known = {"decay", "prior", "start_weight", "prior_weight", "probe_after"}
    if set(kw) - known or not files:
        sys.exit(f"replay-adaptive: unknown option(s) {sorted(set(kw) - known)} or no trace file; "
                 f"options: --curve CTX=R1,... --cap N --max-tokens N " + " ".join('--' + k.replace('_', '-') + ' X' for k in sorted(known)))
    if not 1 <= cap <= 32 or max_tokens < 1:
        sys.exit("replay-adaptive: --cap must be 1..=32 and --max-tokens at least 1")
    for f in files:
        trs = [json.loads(l) for l in open(f)]
        types = defaultdict(list)
        for t in trs:
            types[t["type"]].append(t)
        print(f"== {f}")
        rows = []
        for ty, ts in types.items():
            res = {}
            for w in range(1, 9):
                runs = [replay(t, Fixed(w), curves, max_tokens) for t in ts]
                res[w] = sum(r[0] for r in runs) / sum(r[1] for r in runs)
            tok = c = 0
            for t in ts:
                a, b, _ = replay(t, Adaptive(curves, cap, **kw), curves, max_tokens)
                tok, c = tok + a, c + b
            res["A"] = tok / c
            rows.append((ty, res))
            best = max(range(1, 9), key=lambda w: res[w])
            print(f"{ty:12s} " + " ".join(f"{res[w]:.3f}" for w in range(1, 9)) +
                  f" | A {res['A']:.3f}  best {best} {res[best]:.3f}  A/best {res['A']/res[best]:.3f}")
        g = {k: math.exp(sum(math.log(r[k]) for _, r in rows) / len(rows)) for k in list(range(1, 9)) + ["A"]}
        best = max(range(1, 9), key=lambda w: g[w])
        print(f"{'geomean':12s} " + " ".join(f"{g[w]:.3f}" for w in range(1, 9)) +
              f" | A {g['A']:.3f}  best {best} {g[best]:.3f}  A/best {g['A']/g[best]:.3f}")


if __name__ == "__main__":
    main()

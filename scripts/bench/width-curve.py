#!/usr/bin/env python3
"""Speculative width curve: decode tok/s and acceptance for W = 1..8 against
classic decoding, per drafter and task, from `runtime generate --json`
events (never from log text).

Arms alternate within each repetition (classic, W=1, ..., W=8, then the
next repetition), so a drift of the host lines up with no width. Each arm
is one `runtime` process running its prompt with --warmup 1 (discarded)
and --repeat R. Reports, per arm: median decode tok/s over the recorded
passes of all repetitions, the ratio to classic's median, acceptance rate
and tokens per verify; and checks every arm's token ids against classic's.

    scripts/bench/width-curve.py [--runtime target/release/runtime] [--model PATH]
        [--threads 1] [--reps 3] [--max-tokens 96] [--drafters ngram,layerskip]
"""
import argparse, json, statistics, subprocess, sys

TASKS = {
    # A repetitive editing task: the answer copies the input, so prompt
    # lookup finds long matches.
    "edit-repetitive": [{"role": "user", "content":
        "Repeat the following list exactly, one item per line, twice:\n"
        "alpha bravo charlie\ndelta echo foxtrot\ngolf hotel india\njuliet kilo lima\nmike november oscar"}],
    # Free writing: little to look up.
    "free-writing": [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a message in a bottle."}],
}

def run_arm(a, messages, drafter, width):
    cmd = [a.runtime, "generate", "--json", "--threads", str(a.threads), "--max-tokens", str(a.max_tokens),
           "--warmup", "1", "--repeat", str(a.passes), "--prompts", "/dev/stdin"]
    if a.model:
        cmd += ["--model", a.model]
    if drafter:
        cmd += ["--drafter", drafter, "--draft-block-size", str(width)]
    if drafter == "layerskip":
        cmd += ["--layerskip-layers", str(a.layerskip_layers)]
    line = json.dumps({"id": "task", "messages": messages}) + "\n"
    out = subprocess.run(cmd, input=line, capture_output=True, text=True, env={"DRAFTWISE_LOG": "warn", "PATH": "/usr/bin:/bin"})
    if out.returncode != 0:
        sys.exit(f"arm {drafter} {width} failed: {out.stderr}")
    ev = [json.loads(l) for l in out.stdout.splitlines()]
    comps = [e for e in ev if e["event"] == "completion" and not e["warmup"]]
    diags = [e for e in ev if e["event"] == "speculative_diagnostics" and not e["warmup"]]
    if drafter and any(e["event"] == "declined" for e in ev):
        sys.exit(f"arm {drafter} {width} declined: not a measurement")
    return comps, diags

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runtime", default="target/release/runtime")
    p.add_argument("--model")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--passes", type=int, default=2, help="recorded passes per arm process")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--drafters", default="ngram,layerskip")
    p.add_argument("--layerskip-layers", type=int, default=8)
    p.add_argument("--widths", default="1,2,3,4,5,6,7,8")
    a = p.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    print(f"# width curve: threads {a.threads}, {a.reps} reps x {a.passes} passes, max_tokens {a.max_tokens}")
    print(f"# command: {' '.join(sys.argv)}")
    for task, messages in TASKS.items():
        for drafter in a.drafters.split(","):
            arms = [(None, 0)] + [(drafter, w) for w in widths]
            tps = {arm: [] for arm in arms}
            acc = {arm: [] for arm in arms}
            epv = {arm: [] for arm in arms}
            ids = {}
            for _ in range(a.reps):
                for arm in arms:
                    comps, diags = run_arm(a, messages, *arm)
                    tps[arm] += [c["decode_tok_per_s"] for c in comps if c["decode_tok_per_s"]]
                    acc[arm] += [d["acceptance_rate"] for d in diags if d["acceptance_rate"] is not None]
                    epv[arm] += [d["emitted_per_verify"] for d in diags if d["emitted_per_verify"] is not None]
                    ids.setdefault(arm, comps[0]["token_ids_sha256"])
                    if ids[arm] != comps[0]["token_ids_sha256"]:
                        sys.exit(f"{task} {arm}: output changed between repetitions")
            base = statistics.median(tps[(None, 0)])
            print(f"\n## {task}, drafter {drafter} (classic median {base:.1f} tok/s, n={len(tps[(None, 0)])})")
            print("| W | median tok/s | min..max | ratio vs classic | acceptance | tokens/verify | ids == classic |")
            print("|---|---|---|---|---|---|---|")
            for arm in arms[1:]:
                t = tps[arm]
                m = statistics.median(t)
                same = "yes" if ids[arm] == ids[(None, 0)] else "NO"
                fa = f"{statistics.median(acc[arm]):.2f}" if acc[arm] else "-"
                fe = f"{statistics.median(epv[arm]):.2f}" if epv[arm] else "-"
                print(f"| {arm[1]} | {m:.1f} | {min(t):.1f}..{max(t):.1f} | {m / base:.2f}x | {fa} | {fe} | {same} |")

if __name__ == "__main__":
    main()

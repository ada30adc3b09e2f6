#!/usr/bin/env python3
"""Prefill and decode: draftwise `runtime bench` at each activation precision
against llama.cpp's `llama-server`, in alternation, one line per arm.

    scripts/bench/engine-vs-llama-server.py --model M [--threads T]
        [--prompt-tokens P] [--gen-tokens G] [--rounds R]
        [--precisions int8,int16] [--pages huge,4k] [--runtime PATH]
        [--llama-server PATH] [--bandwidth PATH] [--out FILE]

Each round runs every arm once, the order rotating round by round so a
shared host's drift falls on all of them:
- draftwise: a fresh `RUNTIME bench --model M --prompt-tokens P
  --gen-tokens G --threads T --precision X --reps 1 --warmup 1 --json`
  (model load not timed; its `prefill_tok_per_s` / `decode_tok_per_s`);
  per page kind of --pages (default `huge`): `huge` runs it with
  `DRAFTWISE_HUGE_PAGES=1` (huge pages advised for the weights, whatever
  the caller's environment says), `4k` with `DRAFTWISE_HUGE_PAGES=0`
  (4 KiB pages), as arms `draftwise X` and `draftwise X 4k`;
- llama.cpp: one POST /completion to one `llama-server -m M -t T -np 1
  -c max(2048, P+G+16)` started before the first round (its defaults
  otherwise: flash attention auto, batch 2048, ubatch 512), with the same
  prompt ids the runtime used (from one untimed `runtime bench --warmup 0`
  run before the server starts), `n_predict` G, `cache_prompt` false,
  temperature 0, top_k 1, `ignore_eos`; its `timings.prompt_per_second`,
  and for decode `(predicted_n - 1) / predicted_ms`: the server starts its
  generation clock when it samples the first token, from the prompt pass's
  logits, so `predicted_ms` times G - 1 decode passes while
  `predicted_per_second` divides G tokens by it (G / (G - 1) too fast:
  1.6% at G = 64). `runtime bench` times G decode passes for G tokens, so
  both sides are decode passes per second. One warm-up request is thrown
  away. While the runtime arms run, the server idles (it holds no thread
  busy when idle).

The unit of replication is the round (one fresh runtime process per arm,
one request to the long-lived server). Prints per arm the median and
min..max over the rounds, and the ratios of medians against llama.cpp;
with --bandwidth (the `read_bandwidth` example's binary) the
read ceiling is measured before and after, on each page kind of --pages,
and printed beside them.
Every raw sample goes to --out as JSON lines.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read(1 << 24))


def bounded(lo: int, hi: int):
    def parse(s: str) -> int:
        v = int(s)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is outside {lo}..={hi}")
        return v

    return parse


def pages_env(pages: str) -> dict:
    env = dict(os.environ)
    env["DRAFTWISE_HUGE_PAGES"] = "0" if pages == "4k" else "1"
    return env


def bandwidth(binary: str, threads: int, pages: str) -> str:
    try:
        out = subprocess.run([binary, "256", str(threads), "5"], capture_output=True, text=True, timeout=600,
                             env=pages_env(pages))
    except subprocess.TimeoutExpired:
        return "(read_bandwidth timed out)"
    if out.returncode != 0:
        return f"(read_bandwidth failed, exit {out.returncode}: {out.stderr.strip()[-300:]})"
    return " | ".join(line for line in out.stdout.splitlines() if "thread" in line or "pages" in line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=bounded(1, 256), default=1)
    ap.add_argument("--prompt-tokens", type=bounded(1, 32768), default=64)
    # Two at least: llama-server's decode time spans G - 1 passes.
    ap.add_argument("--gen-tokens", type=bounded(2, 32768), default=64)
    ap.add_argument("--rounds", type=bounded(1, 100), default=5)
    ap.add_argument("--precisions", default="int8,int16")
    ap.add_argument("--pages", default="huge")
    ap.add_argument("--runtime", default="target/release/runtime")
    ap.add_argument("--llama-server", default=None, help="default: what scripts/bench/llama-server.sh prints")
    ap.add_argument("--bandwidth", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    precisions = [p for p in a.precisions.split(",") if p]
    if not precisions or len(set(precisions)) != len(precisions):
        ap.error(f"--precisions: {a.precisions!r}: one or both of int8, int16, each once")
    for p in precisions:
        if p not in ("int8", "int16"):
            ap.error(f"--precisions: {p!r} is neither int8 nor int16")
    pages = [p for p in a.pages.split(",") if p]
    if not pages or len(set(pages)) != len(pages) or any(p not in ("huge", "4k") for p in pages):
        ap.error(f"--pages: {a.pages!r}: one or both of huge, 4k, each once")
    server = a.llama_server
    if server is None:
        here = os.path.dirname(os.path.abspath(__file__))
        # Its build progress and errors go to stderr, shown as they come.
        server = subprocess.run(
            [os.path.join(here, "llama-server.sh")], check=True, stdout=subprocess.PIPE, text=True
        ).stdout.strip()

    def runtime(precision: str, warmup: int = 1, page: str = "huge") -> dict:
        cmd = [a.runtime, "bench", "--model", a.model, "--prompt-tokens", str(a.prompt_tokens),
               "--gen-tokens", str(a.gen_tokens), "--threads", str(a.threads), "--precision", precision,
               "--reps", "1", "--warmup", str(warmup), "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=pages_env(page))
        if out.returncode != 0:
            raise SystemExit(f"runtime bench failed (exit {out.returncode}): {' '.join(cmd)}\n{out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout)

    first = runtime(precisions[0], warmup=0)
    ids = first["prompt_ids"]
    port = free_port()
    ctx = max(2048, a.prompt_tokens + a.gen_tokens + 16)
    log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [server, "-m", a.model, "-t", str(a.threads), "-np", "1", "-c", str(ctx), "--port", str(port),
         "--host", "127.0.0.1"],
        stdout=log, stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if proc.poll() is not None or time.time() > deadline:
                log.flush()
                log.seek(0)
                tail = log.read()[-2000:]
                print(f"llama-server did not come up (log {log.name}):\n{tail}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        body = {"prompt": ids, "n_predict": a.gen_tokens, "cache_prompt": False, "temperature": 0,
                "top_k": 1, "ignore_eos": True}

        def llama() -> dict:
            t = post(base + "/completion", body, 1800)["timings"]
            n = t.get("predicted_n")
            if n != a.gen_tokens:
                raise SystemExit(f"llama-server predicted {n} tokens, not {a.gen_tokens}")
            if t.get("prompt_n") != len(ids):
                raise SystemExit(f"llama-server evaluated {t.get('prompt_n')} prompt tokens, not {len(ids)}")
            # Decode passes per second (see the module's docstring); the
            # server's own figure is kept beside it in --out.
            return {"prefill_tok_per_s": t["prompt_per_second"],
                    "decode_tok_per_s": (n - 1) / t["predicted_ms"] * 1e3,
                    "server_predicted_per_second": t["predicted_per_second"]}

        llama()
        def ceilings() -> str:
            return " || ".join(bandwidth(a.bandwidth, a.threads, p) for p in pages)

        bw_before = ceilings() if a.bandwidth else None
        arms = [f"draftwise {p}" + ("" if g == "huge" else f" {g}") for g in pages for p in precisions] + ["llama.cpp"]
        samples = {arm: [] for arm in arms}
        out = open(a.out, "w") if a.out else None
        for r in range(a.rounds):
            order = arms[r % len(arms):] + arms[: r % len(arms)]
            for arm in order:
                if arm == "llama.cpp":
                    s = llama()
                else:
                    words = arm.split()
                    j = runtime(words[1], page=words[2] if len(words) > 2 else "huge")
                    s = {k: j[k]["median"] for k in ("prefill_tok_per_s", "decode_tok_per_s")}
                    s["pages"] = j.get("pages")
                samples[arm].append(s)
                if out:
                    out.write(json.dumps({"round": r, "arm": arm, **s}) + "\n")
                    out.flush()
        bw_after = ceilings() if a.bandwidth else None
        if out:
            out.write(json.dumps({"read_ceiling_before": bw_before, "read_ceiling_after": bw_after}) + "\n")
            out.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    print(f"model {os.path.basename(a.model)} | threads {a.threads} | prompt {a.prompt_tokens} | gen {a.gen_tokens} | rounds {a.rounds}")
    if bw_before:
        print(f"read ceiling before: {bw_before}\nread ceiling after:  {bw_after}")
    med = {}
    for key in ("prefill_tok_per_s", "decode_tok_per_s"):
        for arm in arms:
            v = [s[key] for s in samples[arm]]
            med[arm, key] = statistics.median(v)
            print(f"{key:18} {arm:19} median {med[arm, key]:8.2f}  ({min(v):.2f}..{max(v):.2f})")
        for arm in arms[:-1]:
            print(f"{key:18} {arm:19} / llama.cpp {med[arm, key] / med['llama.cpp', key]:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

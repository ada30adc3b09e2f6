#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server's /v1/completions.

C concurrent clients (threads, released together by a barrier) each send R
streamed requests one after another: a fixed prompt of about 64 tokens from
a set of distinct ones (client i's request j gets prompt (i + j*C) mod P, so
clients running at the same moment send different text), `max_tokens` 128,
`temperature` 0 and `ignore_eos` true, so that every request generates
exactly `max_tokens` tokens. Both draftwise `runtime serve` and llama.cpp's
`llama-server` take `ignore_eos`.

Measured, per run:
- aggregate generated tokens/s: the completion tokens of every request over
  the wall time from the first request sent to the last one finished;
- time to first token (TTFT): from a request's send (before connecting) to
  the first stream event that carries completion text; p50 and p95 over the
  run's requests;
- per-request tokens/s: (completion tokens - 1) over the time from the first
  text event to the last one, i.e. the streaming rate once the first token
  is out (prefill and queueing excluded);
- errors: a request that fails (HTTP status, timeout, a malformed or
  unfinished stream) or whose completion token count is not `max_tokens`.

Completion tokens are the server's own count, from the `usage` of the last
stream chunk (`stream_options.include_usage`). Where a server sends no usage
the count falls back to the number of stream events carrying text, which
equals the token count only when the server sends one event per token; the
report then says `"token_count_source": "stream-events"` and the human line
says so.

The unit of replication is the run: one run of C clients is one sample.
Requests inside a run share the server's state at that moment and are not
independent samples; the percentiles describe the run. Repeat runs (with the
servers alternated: compare-serve.sh does so) for an interval.

A warm-up (--warmup requests, one client, default 1) is sent first and
thrown away.

Standard library only. Exit status: 0 when every request succeeded with the
expected token count, 1 when any failed (the report is still written), 2 for
a usage error or an unreachable server.

Usage:
  serve-load.py --url http://127.0.0.1:8080 [--clients C] [--requests R]
      [--max-tokens N] [--warmup N] [--label NAME] [--json-out FILE]
      [--timeout-s S] [--model NAME]
"""

import argparse
import hashlib
import http.client
import json
import math
import statistics
import sys
import threading
import time
import urllib.parse

SCHEMA = 1

# Distinct prompts of about 64 tokens each (English prose and one closing
# sentence they share: 63 to 68 tokens with SmolLM2's tokenizer; the report
# gives the server's count).
# Distinct first words, so that no two share a long common prefix.
_PROMPT_BODIES = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle. The message is "
    "written in a language she does not recognize, and the paper smells faintly of cedar and salt. "
    "Describe how she spends the following week trying to work out where it came from.",
    "Explain to a new employee how the night shift at a small bakery works, from the moment the ovens "
    "are switched on until the first customers arrive. Mention the order in which the doughs are "
    "prepared, who cleans what, and the one mistake everybody makes in their first week.",
    "Describe a walk through an old botanical garden in late autumn. Pay attention to the greenhouses, "
    "the labels on the trees, the sound of gravel under your shoes and the smell of wet leaves. "
    "End the description at the gate, as the gardener is locking up for the evening.",
    "Summarize the history of a fictional river town that grew rich from a ferry crossing, declined "
    "when a bridge was built upstream, and slowly reinvented itself. Include the names of two families "
    "who shaped the town, one building that survived every change, and what people do there today.",
    "Give step by step instructions for repotting a large houseplant whose roots have started to grow "
    "out of the bottom of its pot. Cover choosing the new pot, the soil mix, how to loosen the root "
    "ball without tearing it, watering afterwards, and how to tell whether the plant has settled in.",
    "Imagine a museum devoted entirely to everyday objects from the last century: can openers, radios, "
    "typewriters, bus tickets. Write the text of the guided tour for its most popular room, in the "
    "voice of a curator who is proud of the collection and slightly tired of answering the same questions.",
    "Tell the story of two chess players who have met in the final of the same village tournament "
    "every year for thirty years. This year one of them arrives late, carrying a letter. Describe the "
    "game move by move only where it matters, and let the letter explain itself at the very end.",
    "Outline a plan for a week long cycling trip along a coastline with small fishing harbours. For "
    "each day give the distance, where to stop for lunch, one thing worth seeing, and where to sleep. "
    "Assume the riders are fit but not competitive and would rather eat well than ride fast.",
    "Compose a letter from a retired railway signalman to his granddaughter, explaining what his job "
    "was like before the signals were automated. He describes the levers, the bells, the ledgers and "
    "the weather, and admits which parts he misses and which he was glad to see disappear.",
    "Describe the kitchen of a busy restaurant during the dinner rush as seen by a dishwasher on his "
    "first evening. Include the shouting of orders, the heat near the grill, the rhythm of the plates "
    "coming back, and the moment the head chef finally notices him and says something unexpected.",
    "Narrate a thunderstorm arriving over a mountain village in summer, from the first distant rumble to "
    "the clear evening afterwards. Follow a shepherd bringing her flock down from the high pasture, a "
    "child watching from a window, and the innkeeper who has seen a hundred storms like it.",
    "Present a beginner's guide to keeping a notebook of bird sightings. Explain what to write down for "
    "each bird, how to sketch quickly without skill, which mistakes make old entries useless, and why "
    "noting the weather and the time of day matters more than people expect when they start.",
    "Recount a long train journey across a wide plain in winter, told by a passenger who shares the "
    "compartment with a silent stranger. Over two days small things happen: a shared orange, a delayed "
    "connection, a card game. By the last station the reader should understand who the stranger is.",
    "Portray a small island library that opens only on Tuesdays and Saturdays. Describe the building, "
    "the volunteer who runs it, the regular visitors and the strange system used to sort the books. "
    "Include one afternoon when the ferry is cancelled and everybody is stuck there until morning.",
    "Sketch the daily routine of a clockmaker who repairs tower clocks in churches and town halls across "
    "a region. Describe the tools she carries, the climb up narrow stairs, the sound of the mechanism, "
    "and a conversation with a sexton who insists that his clock has always been two minutes fast.",
    "Invent a festival celebrated once a year in a desert oasis town, when the caravans of the region "
    "meet. Describe the preparations, the market, the music, the food and the traditional contest that "
    "closes the festival, and explain through one old trader why the custom began in the first place.",
]
PROMPTS = [body + " Keep the answer under three hundred words." for body in _PROMPT_BODIES]

# A stream event's payload is at most this many bytes, and a response at
# most this many events: a server gone wrong fails the request instead of
# filling memory.
MAX_EVENT_BYTES = 1 << 20
MAX_EVENTS = 100_000


class RequestError(Exception):
    pass


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def parse_url(url):
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        raise SystemExit(f"serve-load: --url {url!r}: an http://HOST:PORT address is needed")
    return u.hostname, u.port or 80, u.path.rstrip("/")


def get_json(host, port, path, timeout_s):
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(MAX_EVENT_BYTES)
        if resp.status != 200:
            raise RequestError(f"GET {path}: HTTP {resp.status}: {body[:300]!r}")
        return json.loads(body)
    finally:
        conn.close()


def one_request(host, port, base, model, prompt, max_tokens, timeout_s):
    """Sends one streamed completion; returns its timings and counts."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    payload = json.dumps(body).encode()
    t_send = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("POST", base + "/v1/completions", body=payload,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RequestError(f"HTTP {resp.status}: {resp.read(2000)[:300]!r}")
        t_first = None
        t_last = None
        text_events = 0
        usage = None
        finish_reason = None
        done = False
        n_events = 0
        text_parts = []
        while True:
            line = resp.readline(MAX_EVENT_BYTES)
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, `event:` lines
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            n_events += 1
            if n_events > MAX_EVENTS:
                raise RequestError(f"more than {MAX_EVENTS} stream events")
            try:
                chunk = json.loads(data)
            except ValueError as e:
                raise RequestError(f"stream event is not JSON ({e}): {data[:200]!r}")
            if "error" in chunk:
                raise RequestError(f"stream error event: {json.dumps(chunk['error'])[:300]}")
            for choice in chunk.get("choices") or []:
                text = choice.get("text") or ""
                if text:
                    now = time.perf_counter()
                    if t_first is None:
                        t_first = now
                    t_last = now
                    text_events += 1
                    text_parts.append(text)
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
            if chunk.get("usage"):
                usage = chunk["usage"]
        t_done = time.perf_counter()
        if not done:
            raise RequestError("the stream ended without `data: [DONE]`")
        if t_first is None:
            raise RequestError("the stream carried no completion text")
    finally:
        conn.close()
    if usage is not None and "completion_tokens" in usage:
        completion_tokens = int(usage["completion_tokens"])
        prompt_tokens = usage.get("prompt_tokens")
        source = "usage"
    else:
        completion_tokens = text_events
        prompt_tokens = None
        source = "stream-events"
    return {
        "t_send": t_send,
        "t_first": t_first,
        "t_last": t_last,
        "t_done": t_done,
        "ttft_ms": (t_first - t_send) * 1e3,
        "e2e_ms": (t_done - t_send) * 1e3,
        "completion_tokens": completion_tokens,
        "prompt_tokens": prompt_tokens,
        "token_count_source": source,
        "text_events": text_events,
        "finish_reason": finish_reason,
        "text_sha256": hashlib.sha256("".join(text_parts).encode()).hexdigest(),
        "tok_per_s": ((completion_tokens - 1) / (t_last - t_first)) if t_last > t_first else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--url", required=True, help="the server's base address, e.g. http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=1, help="concurrent clients C (default 1)")
    ap.add_argument("--requests", type=int, default=4, help="requests per client R, one after another (default 4)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens generated per request (default 128)")
    ap.add_argument("--warmup", type=int, default=1, help="requests sent first by one client and discarded (default 1)")
    ap.add_argument("--model", default=None,
                    help="the `model` field sent (default: the first id GET /v1/models lists)")
    ap.add_argument("--label", default="", help="a name for this run in the report (e.g. the server)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per-request socket timeout (default 600)")
    ap.add_argument("--json-out", default=None, help="write the report here as well as to stdout's last line")
    args = ap.parse_args()
    for name in ("clients", "requests", "max_tokens"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        ap.error("--warmup must be 0 or more")

    host, port, base = parse_url(args.url)
    model = args.model
    if model is None:
        try:
            models = get_json(host, port, base + "/v1/models", 10.0)
            model = models["data"][0]["id"]
        except (OSError, RequestError, ValueError, KeyError, IndexError, TypeError) as e:
            print(f"serve-load: cannot read the model id from {args.url}/v1/models ({e}); "
                  f"is the server up? (or pass --model)", file=sys.stderr)
            return 2

    for i in range(args.warmup):
        try:
            one_request(host, port, base, model, PROMPTS[-1 - (i % len(PROMPTS))], args.max_tokens, args.timeout_s)
        except (OSError, RequestError, http.client.HTTPException) as e:
            print(f"serve-load: warm-up request {i + 1} to {args.url} failed: {e}", file=sys.stderr)
            return 2

    C, R = args.clients, args.requests
    results = [[None] * R for _ in range(C)]
    barrier = threading.Barrier(C)

    def client(i):
        barrier.wait()
        for j in range(R):
            prompt_id = (i + j * C) % len(PROMPTS)
            rec = {"client": i, "request": j, "prompt_id": prompt_id}
            try:
                rec.update(one_request(host, port, base, model, PROMPTS[prompt_id], args.max_tokens, args.timeout_s))
                if rec["completion_tokens"] != args.max_tokens:
                    rec["error"] = (f"completion_tokens {rec['completion_tokens']} (from {rec['token_count_source']}) "
                                    f"!= max_tokens {args.max_tokens} with ignore_eos: the server stopped early "
                                    f"or does not honour ignore_eos (finish_reason {rec['finish_reason']!r})")
            except (OSError, RequestError, http.client.HTTPException, ValueError) as e:
                rec["error"] = f"{type(e).__name__}: {e}"
                rec.setdefault("t_send", None)
            results[i][j] = rec

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(C)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    reqs = [r for row in results for r in row]
    ok = [r for r in reqs if "error" not in r]
    errors = [r for r in reqs if "error" in r]
    sent = [r["t_send"] for r in reqs if r.get("t_send") is not None]
    finished = [r["t_done"] for r in reqs if r.get("t_done") is not None]
    t0 = min(sent) if sent else None
    wall_s = (max(finished) - t0) if (sent and finished) else None
    total_tokens = sum(r["completion_tokens"] for r in ok)
    sources = sorted({r["token_count_source"] for r in ok})
    ttft = [r["ttft_ms"] for r in ok]
    per_req = [r["tok_per_s"] for r in ok if r["tok_per_s"] is not None]
    prompt_tokens = [r["prompt_tokens"] for r in ok if r.get("prompt_tokens") is not None]
    for r in reqs:  # times relative to the run's first send, for the raw record
        for k in ("t_send", "t_first", "t_last", "t_done"):
            if r.get(k) is not None and t0 is not None:
                r[k] = round(r[k] - t0, 6)

    def summary(values, digits):
        if not values:
            return None
        return {
            "n": len(values),
            "p50": round(percentile(values, 0.5), digits),
            "p95": round(percentile(values, 0.95), digits),
            "min": round(min(values), digits),
            "max": round(max(values), digits),
            "mean": round(statistics.fmean(values), digits),
        }

    report = {
        "schema": SCHEMA,
        "tool": "scripts/bench/serve-load.py",
        "label": args.label,
        "url": args.url,
        "model": model,
        "clients": C,
        "requests_per_client": R,
        "max_tokens": args.max_tokens,
        "warmup_requests": args.warmup,
        "prompt_set_sha256": hashlib.sha256("\n".join(PROMPTS).encode()).hexdigest(),
        "unit_of_replication": "run (one run of C clients is one sample; its requests are not independent)",
        "started_unix_s": round(time.time() - (wall_s or 0), 3),
        "wall_s": round(wall_s, 6) if wall_s is not None else None,
        "completion_tokens_total": total_tokens,
        "aggregate_tok_per_s": round(total_tokens / wall_s, 3) if wall_s else None,
        "ttft_ms": summary(ttft, 2),
        "per_request_tok_per_s": summary(per_req, 3),
        "e2e_ms": summary([r["e2e_ms"] for r in ok], 2),
        "prompt_tokens": summary(prompt_tokens, 1),
        "token_count_source": sources[0] if len(sources) == 1 else sources,
        "errors": len(errors),
        "error_messages": sorted({r["error"] for r in errors})[:10],
        "requests": reqs,
    }
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")

    count_note = "" if sources == ["usage"] else \
        f" [token counts from {sources}: the server sent no usage; counted stream events, exact only at one event per token]"
    ttft_s = report["ttft_ms"] or {}
    prq = report["per_request_tok_per_s"] or {}
    print(f"{args.label or args.url} C={C} R={R}: "
          f"{report['aggregate_tok_per_s']} tok/s aggregate ({total_tokens} tokens / {report['wall_s']} s), "
          f"TTFT p50 {ttft_s.get('p50')} ms p95 {ttft_s.get('p95')} ms, "
          f"per-request {prq.get('p50')} tok/s median, errors {len(errors)}/{len(reqs)}{count_note}",
          file=sys.stderr)
    for msg in report["error_messages"]:
        print(f"serve-load: error: {msg}", file=sys.stderr)
    print(json.dumps({k: v for k, v in report.items() if k != "requests"}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

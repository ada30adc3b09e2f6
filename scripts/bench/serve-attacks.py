#!/usr/bin/env python3
"""Measures `runtime serve` under three attacks, on 127.0.0.1 (stdlib only).

    scripts/bench/serve-attacks.py BINARY [MODEL.gguf] [--only slowloris]

The server runs with at most 1024 open files (NOFILE overrides), the usual
default soft limit, as a server started from a login shell would.

1. slowloris: 1100 connections each send a request line and one header, then
   nothing; /health is timed 10 times over the next 5 s (5 s timeout each).
2. flood: 8 clients at once send a 1,000,000-byte prompt, three times; the
   server's VmRSS is sampled (peak) and read after.
3. disconnect: a streamed request with an 8,000-token prompt (token ids); the
   client leaves after 1 s; the time until /health says nothing runs.
"""
import json, os, re, resource, socket, subprocess, sys, threading, time

args = [a for a in sys.argv[1:] if not a.startswith("--only")]
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
if only:
    args.remove(only)
binary = args[0]
model = args[1] if len(args) > 1 else os.path.expanduser("~/.cache/draftwise/SmolLM2-135M-Instruct.Q4_1.gguf")
NOFILE = int(os.environ.get("NOFILE", "1024"))

def limit_files():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
MODEL = "SmolLM2-135M-Instruct.Q4_1"

def start():
    p = subprocess.Popen([binary, "serve", "--port", "0", "--threads", "2", "--model", model],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=limit_files, env={**os.environ, "DRAFTWISE_LOG": "warn"})
    for line in p.stderr:
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, (m.group(1), int(m.group(2)))
    raise SystemExit("the server did not start")

def request(addr, method, path, body=None, timeout=5.0):
    s = socket.create_connection(addr, timeout=timeout)
    data = body.encode() if body else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    s.sendall(head.encode() + data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    return out

def health_ms(addr):
    t0 = time.time()
    try:
        r = request(addr, "GET", "/health", timeout=5.0)
        return (time.time() - t0) * 1e3, r.split(b" ", 2)[1].decode()
    except Exception as e:
        return (time.time() - t0) * 1e3, type(e).__name__

def rss_kib(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"):
            return int(l.split()[1])

def running(addr):
    return json.loads(request(addr, "GET", "/health").split(b"\r\n\r\n", 1)[1])["running"]

p, addr = start()
try:
    # 1. slowloris
    conns = []
    for _ in range(1100):
        try:
            c = socket.create_connection(addr, timeout=2)
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            conns.append(c)
        except Exception:
            pass
    samples = []
    for _ in range(10):
        samples.append(health_ms(addr))
        time.sleep(0.5)
    print(f"slowloris: {len(conns)} connections held; /health (ms, status): {[(round(a), b) for a, b in samples]}")
    for c in conns:
        c.close()
    time.sleep(1)
    if only == "slowloris":
        raise SystemExit(0)
    # 2. flood
    before = rss_kib(p.pid)
    body = json.dumps({"model": MODEL, "prompt": "hello " * (1_000_000 // 6), "max_tokens": 1})
    peak = before
    statuses = []
    t0 = time.time()
    for _ in range(3):
        ts = [threading.Thread(target=lambda: statuses.append(request(addr, "POST", "/v1/completions", body, timeout=600).split(b" ", 2)[1].decode())) for _ in range(8)]
        for t in ts:
            t.start()
        while any(t.is_alive() for t in ts):
            peak = max(peak, rss_kib(p.pid))
            time.sleep(0.05)
    after = rss_kib(p.pid)
    print(f"flood: 24 prompts of 1 MB in {time.time() - t0:.1f} s, statuses {sorted(set(statuses))}; "
          f"VmRSS before {before} KiB, peak {peak} KiB, after {after} KiB")
    # 3. disconnect during a long prefill
    ids = [300 + (i * 7919) % 20000 for i in range(8000)]
    body = json.dumps({"model": MODEL, "prompt": ids, "max_tokens": 1, "temperature": 0, "stream": True}).encode()
    c = socket.create_connection(addr)
    c.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    while not running(addr):
        time.sleep(0.05)
    time.sleep(1)
    c.close()
    t0 = time.time()
    while running(addr) and time.time() - t0 < 120:
        time.sleep(0.05)
    freed = time.time() - t0
    print(f"disconnect: engine {'freed' if freed < 120 else 'still busy'} {freed:.2f} s after the client left mid-prefill")
finally:
    p.kill()

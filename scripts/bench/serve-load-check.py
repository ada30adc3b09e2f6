#!/usr/bin/env python3
"""Makes serve-load.py's checks fail on purpose, against a fake server.

A stand-in OpenAI-compatible server (standard library, in this process)
answers /v1/models and streamed /v1/completions in one of several ways, and
serve-load.py must: pass a correct stream; fail a short count (a server that
ignores `ignore_eos`), an HTTP error, an error event and a stream without
`[DONE]`; fall back to counting stream events, and say so, when no usage
comes; and refuse an address where nothing listens. Prints one line per case
and exits 1 if any case went wrong. About 5 s.

Usage: scripts/bench/serve-load-check.py
"""

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TOKENS = 8


def make_handler(mode):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send_json(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": "fake-model"}]})
            else:
                self.send_json(404, {"error": "not found"})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            # What every request must carry for the counts to mean anything.
            want = {"model": "fake-model", "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            wrong = {k: req.get(k) for k, v in want.items() if req.get(k) != v}
            if wrong or not req.get("prompt"):
                self.send_json(400, {"error": f"fake server: unexpected fields {wrong}"})
                return
            if mode == "http-500":
                self.send_json(500, {"error": {"message": "boom"}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            n = MAX_TOKENS - 1 if mode == "short" else MAX_TOKENS

            def event(obj):
                self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                self.wfile.flush()

            for i in range(n):
                if mode == "error-event" and i == 3:
                    event({"error": {"message": "engine failed"}})
                    return
                event({"choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]})
            event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
            if mode != "no-usage":
                event({"choices": [], "usage": {"prompt_tokens": 64, "completion_tokens": n, "total_tokens": 64 + n}})
            if mode != "no-done":
                self.wfile.write(b"data: [DONE]\n\n")

    return Handler


def run_load(url):
    return subprocess.run(
        [sys.executable, os.path.join(HERE, "serve-load.py"), "--url", url, "--clients", "2", "--requests", "2",
         "--max-tokens", str(MAX_TOKENS), "--warmup", "0", "--label", "check", "--timeout-s", "10"],
        capture_output=True, text=True, timeout=60)


def case(mode):
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(mode))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        return run_load(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def main():
    failures = 0

    def check(name, ok, proc):
        nonlocal failures
        print(f"{'ok  ' if ok else 'FAIL'} {name} (exit {proc.returncode})")
        if not ok:
            failures += 1
            print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n", file=sys.stderr)

    p = case("ok")
    rep = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}
    check("a correct stream passes, counted from usage", p.returncode == 0 and rep.get("errors") == 0
          and rep.get("token_count_source") == "usage" and rep.get("completion_tokens_total") == 4 * MAX_TOKENS, p)

    p = case("short")
    check("a short completion (ignore_eos not honoured) fails every request",
          p.returncode == 1 and "!= max_tokens" in p.stderr and "errors 4/4" in p.stderr, p)

    p = case("no-usage")
    rep = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    check("no usage: counted from stream events, and said so",
          p.returncode == 0 and rep.get("token_count_source") == "stream-events" and "sent no usage" in p.stderr, p)

    p = case("http-500")
    check("an HTTP error fails", p.returncode == 1 and "HTTP 500" in p.stderr, p)

    p = case("error-event")
    check("an error event in the stream fails", p.returncode == 1 and "stream error event" in p.stderr, p)

    p = case("no-done")
    check("a stream without [DONE] fails", p.returncode == 1 and "[DONE]" in p.stderr, p)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = run_load(f"http://127.0.0.1:{port}")
    check("nothing listening: refused with exit 2", p.returncode == 2 and "is the server up?" in p.stderr, p)

    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

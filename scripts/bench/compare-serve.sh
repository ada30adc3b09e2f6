#!/usr/bin/env bash
# Serving under load: draftwise `runtime serve` against llama.cpp's
# `llama-server -np N`, on the same GGUF, thread count and per-sequence
# context, at several numbers of concurrent clients (serve-load.py).
#
# Usage:
#   scripts/bench/compare-serve.sh [--runtime PATH] [--llama-server PATH]
#       [--model PATH|smollm2|qwen1.5b] [--threads N] [--ctx N] [--parallel N]
#       [--concurrency 1,2,4,8] [--rounds K] [--requests R] [--max-tokens N]
#       [--startup-timeout-s S] [--request-timeout-s S] [--out DIR] [--quiet-max-pct P]
#       [--quiet-wait-s S] [--allow-contended]
#       [--draftwise-args "..."] [--llama-server-args "..."]
#
# Defaults: --runtime target/release/runtime (or $DRAFTWISE_RUNTIME), the
# llama-server scripts/bench/llama-server.sh builds (once), --model smollm2
# (~/.cache/draftwise/SmolLM2-135M-Instruct.Q4_1.gguf; qwen1.5b is
# qwen2.5-coder-1.5b-instruct-q4_k_m.gguf there), 2 threads, 512 positions
# per sequence, --parallel the largest concurrency, 1,2,4,8 clients, 3
# rounds, 4 requests per client of 128 tokens each.
#
# The servers, as started:
# - draftwise: `runtime serve --model M --threads T --ctx-size CTX
#   --parallel N` when its `serve --help` lists --parallel; a binary without
#   it runs one sequence at a time, and the summary says so.
# - llama-server: `-m M -t T -np N -c N*CTX` (its -c is the whole KV pool,
#   shared out as N slots of CTX: the n_ctx_slot its log states is checked),
#   and --no-cache-prompt --cache-ram 0: the fixed prompt set stands for
#   distinct users' prompts, and draftwise keeps no prompt cache either, so
#   both prefill every prompt in full. Everything else is llama-server's
#   default (flash attention auto, batch 2048, ubatch 512).
# Each request is 64-ish prompt tokens, `max_tokens` tokens generated with
# `ignore_eos` (exactly that many: serve-load.py fails a request otherwise),
# temperature 0. Note that a draftwise server with a drafter runs
# `ignore_eos` requests with classic decoding (docs/serve.md), so this
# measures batching, not speculation.
#
# A contended host is waited on, not measured through: before every run (both
# servers idle) the whole host's CPU use is sampled over 1 s, and the run
# waits until it is at most --quiet-max-pct percent of one core (default
# 15), for up to --quiet-wait-s seconds (default 600), then fails naming the
# busiest processes. --allow-contended measures anyway and marks the runs.
# It matters more for one side than the other: llama-server's OpenMP
# threads spin at every barrier of a pass, and on 2 cores shared with a
# compiler they wait out scheduler quanta (2026-12-07, SmolLM2, 2 threads,
# load ~8 from other builds: one client got 4 tok/s against draftwise's 62;
# 18 with OMP_WAIT_POLICY=passive, 36 with one thread).
#
# Replication: each round starts both servers afresh (model load not timed),
# checks that each uses no CPU while idle, then runs every concurrency level
# against both, one server after the other, the one that goes first
# alternating between levels and rounds so that drift of a shared host
# spreads over both. One run of C clients against one server is one sample
# (serve-load.py sends one thrown-away warm-up request first). The summary
# gives each sample, the median over rounds with min/max, the ratio
# draftwise / llama-server paired within a round, and each server against
# its own concurrency-1 rate in the same round.
#
# The runtime binary is copied into $OUT first and every round runs the copy:
# a rebuild of the original during the comparison (a shared checkout) then
# changes nothing, and host.txt names what ran. A request that receives no
# byte for --request-timeout-s seconds (default 300) fails the comparison: a
# server that hangs is found, not waited on.
#
# Writes $OUT/runs.jsonl (one serve-load.py report per run), $OUT/raw/ (the
# per-request records), the server logs, host.txt, summary.json and
# summary.md (printed at the end). Fails (exit 1) on any failed request, a
# server that dies or does not answer /health within the startup timeout,
# or a wrong token count; 2 for a usage error.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/draftwise
RUNTIME=${DRAFTWISE_RUNTIME:-$ROOT/target/release/runtime}
LLAMA_SERVER=""
MODEL=smollm2
THREADS=2
CTX=512
PARALLEL=""
CONCURRENCY=1,2,4,8
ROUNDS=3
REQUESTS=4
MAX_TOKENS=128
STARTUP_TIMEOUT_S=180
REQUEST_TIMEOUT_S=300
QUIET_MAX_PCT=15
QUIET_WAIT_S=600
ALLOW_CONTENDED=0
OUT=""
DRAFTWISE_ARGS=""
LLAMA_SERVER_ARGS=""
COMMAND_LINE="$0 $*"

usage_error() {
    echo "compare-serve: $*" >&2
    exit 2
}
die() {
    echo "compare-serve: error: $*" >&2
    exit 1
}
int_arg() { # name value min
    [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || usage_error "$1 $2: an integer of at least $3 is needed"
}

while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help | --allow-contended) ;;
    --*) [ $# -ge 2 ] || usage_error "$1 needs a value (see --help)" ;;
    esac
    case "$1" in
    --runtime) RUNTIME=$2; shift 2 ;;
    --llama-server) LLAMA_SERVER=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --ctx) CTX=$2; shift 2 ;;
    --parallel) PARALLEL=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --max-tokens) MAX_TOKENS=$2; shift 2 ;;
    --startup-timeout-s) STARTUP_TIMEOUT_S=$2; shift 2 ;;
    --request-timeout-s) REQUEST_TIMEOUT_S=$2; shift 2 ;;
    --quiet-max-pct) QUIET_MAX_PCT=$2; shift 2 ;;
    --quiet-wait-s) QUIET_WAIT_S=$2; shift 2 ;;
    --allow-contended) ALLOW_CONTENDED=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    --draftwise-args) DRAFTWISE_ARGS=$2; shift 2 ;;
    --llama-server-args) LLAMA_SERVER_ARGS=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument $1 (see --help)" ;;
    esac
done
int_arg --threads "$THREADS" 1
int_arg --ctx "$CTX" 1
int_arg --rounds "$ROUNDS" 1
int_arg --requests "$REQUESTS" 1
int_arg --max-tokens "$MAX_TOKENS" 1
int_arg --startup-timeout-s "$STARTUP_TIMEOUT_S" 1
int_arg --request-timeout-s "$REQUEST_TIMEOUT_S" 1
int_arg --quiet-max-pct "$QUIET_MAX_PCT" 0
int_arg --quiet-wait-s "$QUIET_WAIT_S" 0
[[ "$CONCURRENCY" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || usage_error "--concurrency $CONCURRENCY: a comma-separated list of positive integers, e.g. 1,2,4,8"
IFS=, read -r -a LEVELS <<<"$CONCURRENCY"
MAX_LEVEL=0
for c in "${LEVELS[@]}"; do
    if [ "$c" -gt "$MAX_LEVEL" ]; then MAX_LEVEL=$c; fi
done
[ -n "$PARALLEL" ] || PARALLEL=$MAX_LEVEL
int_arg --parallel "$PARALLEL" 1
case "$MODEL" in
smollm2) MODEL=$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf ;;
qwen1.5b) MODEL=$CACHE/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf ;;
esac
[ -f "$MODEL" ] || die "--model $MODEL: no such file (a GGUF file both servers load; \`runtime fetch-model\` fetches the default one)"
# The prompt plus the generated tokens must fit one sequence's context.
[ $((MAX_TOKENS + 80)) -le "$CTX" ] || usage_error "--ctx $CTX: a ~70-token prompt and --max-tokens $MAX_TOKENS do not fit; give at least $((MAX_TOKENS + 80))"

# --- the two binaries ---------------------------------------------------------
[ -x "$RUNTIME" ] || die "no draftwise runtime binary at $RUNTIME: build it (cargo build --release -p runtime) or pass --runtime PATH"
if [ -z "$LLAMA_SERVER" ]; then
    LLAMA_SERVER=$("$ROOT/scripts/bench/llama-server.sh") || die "scripts/bench/llama-server.sh could not provide llama-server (its message is above)"
fi
[ -x "$LLAMA_SERVER" ] || die "no llama-server binary at $LLAMA_SERVER (scripts/bench/llama-server.sh builds one)"
RUNTIME_HELP=$("$RUNTIME" serve --help) || die "$RUNTIME serve --help failed: is it a draftwise runtime binary?"
# An option line of its own, not the footer's list of llama.cpp flags it maps.
if grep -qE '^ +(-[A-Za-z], )?--parallel[ =<]' <<<"$RUNTIME_HELP"; then
    DW_PARALLEL_ARGS=(--parallel "$PARALLEL")
    DW_PARALLEL_NOTE="--parallel $PARALLEL"
else
    DW_PARALLEL_ARGS=()
    DW_PARALLEL_NOTE="no --parallel in this binary's serve --help: one sequence at a time"
    echo "compare-serve: note: $RUNTIME has no serve --parallel; draftwise runs one sequence at a time" >&2
fi
LLAMA_CTX=$((PARALLEL * CTX))

[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/draftwise-compare-serve.XXXXXX")
mkdir -p "$OUT/raw" "$OUT/logs"
: >"$OUT/runs.jsonl"
RUNTIME_ORIGIN=$RUNTIME
cp "$RUNTIME" "$OUT/runtime" || die "cannot copy $RUNTIME into $OUT"
RUNTIME=$OUT/runtime

# --- servers ----------------------------------------------------------------------
DW_PID=""
LL_PID=""
BUSY_BEFORE=""
stop_server() { # pid
    local pid=$1 i
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    echo "compare-serve: server $pid did not stop within 10 s of SIGTERM; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_servers() {
    stop_server "$DW_PID"
    DW_PID=""
    stop_server "$LL_PID"
    LL_PID=""
}
trap 'stop_servers' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

http_status() { # url
    python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print(0)
PY
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
wait_healthy() { # name pid log base_url
    local name=$1 pid=$2 log=$3 url=$4 deadline=$((SECONDS + STARTUP_TIMEOUT_S))
    while [ "$SECONDS" -lt "$deadline" ]; do
        kill -0 "$pid" 2>/dev/null || { tail -n 30 "$log" >&2; die "$name exited while starting (log above, all of it in $log)"; }
        if [ -n "$url" ] && [ "$(http_status "$url/health")" = 200 ]; then
            return 0
        fi
        sleep 0.5
    done
    tail -n 30 "$log" >&2
    die "$name did not answer GET /health with 200 within ${STARTUP_TIMEOUT_S}s (log above, all of it in $log; --startup-timeout-s to wait longer)"
}
start_draftwise() { # round
    local log=$OUT/logs/draftwise-r$1.log deadline addr=""
    : >"$log" # exists before the server writes to it: the wait below reads it
    # shellcheck disable=SC2086 # DRAFTWISE_ARGS is a list of words
    "$RUNTIME" serve --model "$MODEL" --threads "$THREADS" --ctx-size "$CTX" --host 127.0.0.1 --port 0 \
        "${DW_PARALLEL_ARGS[@]}" $DRAFTWISE_ARGS >"$log" 2>&1 &
    DW_PID=$!
    # --port 0: the `listening on` line names the port.
    deadline=$((SECONDS + STARTUP_TIMEOUT_S))
    while [ -z "$addr" ]; do
        kill -0 "$DW_PID" 2>/dev/null || { tail -n 30 "$log" >&2; die "draftwise exited while starting (log above, all of it in $log)"; }
        [ "$SECONDS" -lt "$deadline" ] || { tail -n 30 "$log" >&2; die "draftwise printed no 'listening on' line within ${STARTUP_TIMEOUT_S}s ($log)"; }
        addr=$(grep -m1 -oE 'listening on http://[0-9.]+:[0-9]+' "$log" | sed 's/^listening on //' || true)
        [ -n "$addr" ] || sleep 0.2
    done
    DW_URL=$addr
    wait_healthy draftwise "$DW_PID" "$log" "$DW_URL"
}
start_llama_server() { # round
    local log=$OUT/logs/llama-server-r$1.log port slot_ctx
    port=$(free_port)
    # shellcheck disable=SC2086 # LLAMA_SERVER_ARGS is a list of words
    "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -np "$PARALLEL" -c "$LLAMA_CTX" --host 127.0.0.1 --port "$port" \
        --no-cache-prompt --cache-ram 0 $LLAMA_SERVER_ARGS >"$log" 2>&1 &
    LL_PID=$!
    LL_URL=http://127.0.0.1:$port
    wait_healthy llama-server "$LL_PID" "$log" "$LL_URL"
    slot_ctx=$(grep -m1 -oE 'n_ctx_slot = [0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    [ "$slot_ctx" = "$CTX" ] ||
        die "llama-server's slots hold ${slot_ctx:-an unstated number of} positions, not --ctx $CTX (-c $LLAMA_CTX over -np $PARALLEL; $log)"
}
cpu_ticks() { # pid: user + system clock ticks so far
    awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}
idle_check() { # round: both servers idle must use (almost) no CPU, or one would slow the other's runs
    local a0 b0 a1 b1 hz
    hz=$(getconf CLK_TCK)
    a0=$(cpu_ticks "$DW_PID")
    b0=$(cpu_ticks "$LL_PID")
    sleep 2
    a1=$(cpu_ticks "$DW_PID")
    b1=$(cpu_ticks "$LL_PID")
    echo "round $1 idle CPU over 2 s: draftwise $(((a1 - a0) * 100 / hz / 2))%, llama-server $(((b1 - b0) * 100 / hz / 2))% of a core" >>"$OUT/host.txt"
    [ $(((a1 - a0) * 100 / hz / 2)) -le 5 ] || die "idle draftwise used $(((a1 - a0) * 100 / hz / 2))% of a core over 2 s: it would slow llama-server's runs"
    [ $(((b1 - b0) * 100 / hz / 2)) -le 5 ] || die "idle llama-server used $(((b1 - b0) * 100 / hz / 2))% of a core over 2 s: it would slow draftwise's runs"
}
host_busy_pct() { # the whole host's CPU use over 1 s, in percent of one core
    python3 - <<'PY'
import time
def sample():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f), f[3] + f[4]  # total, idle + iowait
t0, i0 = sample()
time.sleep(1.0)
t1, i1 = sample()
ncpu = sum(1 for line in open("/proc/stat") if line.startswith("cpu") and line[3].isdigit())
print(round(100.0 * ncpu * (1 - (i1 - i0) / max(t1 - t0, 1))))
PY
}
# Waits until the host is quiet and sets BUSY_BEFORE to the percentage it
# measured last. Runs in this shell (not in a $(...)), so that a TERM while
# it waits is handled within one `sleep 5`.
quiet_gate() {
    local busy deadline=$((SECONDS + QUIET_WAIT_S)) said=0
    while :; do
        busy=$(host_busy_pct)
        BUSY_BEFORE=$busy
        if [ "$busy" -le "$QUIET_MAX_PCT" ]; then
            return 0
        fi
        if [ "$ALLOW_CONTENDED" = 1 ]; then
            echo "compare-serve: warning: host busy ($busy% of a core besides the idle servers); measuring anyway (--allow-contended)" >&2
            return 0
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            ps -eo pid,pcpu,etime,args --sort=-pcpu | head -n 6 | cut -c1-160 >&2
            die "the host stayed busy ($busy% of a core used besides the idle servers, more than --quiet-max-pct $QUIET_MAX_PCT) for ${QUIET_WAIT_S}s; busiest processes above. Rerun on a quiet host, or pass --allow-contended (the runs are then marked)"
        fi
        if [ "$said" = 0 ]; then
            echo "compare-serve: host busy ($busy% of a core besides the idle servers); waiting up to ${QUIET_WAIT_S}s for it to quiet down" >&2
            said=1
        fi
        sleep 5
    done
}
host_ticks() { # busy and total clock ticks of the whole host so far
    awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat
}
run_load() { # side url clients round
    local side=$1 url=$2 c=$3 r=$4 raw line rc=0 load_before pid
    local h0 t0 h1 t1 s0 s1 others_during
    raw=$OUT/raw/$side-c$c-r$r.json
    pid=$([ "$side" = draftwise ] && echo "$DW_PID" || echo "$LL_PID")
    quiet_gate
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    read -r h0 t0 < <(host_ticks)
    s0=$(cpu_ticks "$pid")
    line=$(python3 "$ROOT/scripts/bench/serve-load.py" --url "$url" --clients "$c" --requests "$REQUESTS" \
        --max-tokens "$MAX_TOKENS" --warmup 1 --timeout-s "$REQUEST_TIMEOUT_S" --label "$side" --json-out "$raw") || rc=$?
    [ "$rc" -eq 0 ] || die "serve-load.py against $side at $c clients (round $r) failed (exit $rc; its messages above, its report in $raw, the server's log in $OUT/logs)"
    # What the host spent during the run besides the measured server: the
    # load client itself and anything foreign (percent of one core).
    read -r h1 t1 < <(host_ticks)
    s1=$(cpu_ticks "$pid")
    others_during=$(((h1 - h0 - (s1 - s0)) * 100 * $(nproc) / (t1 - t0 > 0 ? t1 - t0 : 1)))
    python3 -c 'import json, sys; d = json.loads(sys.argv[1]); d.update(side=sys.argv[2], round=int(sys.argv[3]), load1_before=float(sys.argv[4]), host_busy_pct_before=int(sys.argv[5]), others_pct_during=int(sys.argv[7]), contended=int(sys.argv[5]) > int(sys.argv[6])); print(json.dumps(d))' \
        "$line" "$side" "$r" "$load_before" "$BUSY_BEFORE" "$QUIET_MAX_PCT" "$others_during" >>"$OUT/runs.jsonl"
    echo "compare-serve: $side at $c clients: host CPU besides the server during the run: $others_during% of a core (the load client included)" >&2
    kill -0 "$pid" 2>/dev/null || die "$side exited during the run at $c clients (logs in $OUT/logs)"
}

# --- runs ---------------------------------------------------------------------------
{
    echo "command: $COMMAND_LINE"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs available"
    echo "model: $MODEL ($(sha256sum "$MODEL" | cut -c1-16))"
    echo "draftwise: $RUNTIME_ORIGIN (copied to $RUNTIME, sha256 $(sha256sum "$RUNTIME" | cut -c1-16)): $("$RUNTIME" build-info 2>&1 | head -n1); $DW_PARALLEL_NOTE; extra args: ${DRAFTWISE_ARGS:-none}"
    echo "llama-server: $LLAMA_SERVER: $("$LLAMA_SERVER" --version 2>&1 | grep -m1 -i 'version' || echo unknown); -np $PARALLEL -c $LLAMA_CTX; extra args: ${LLAMA_SERVER_ARGS:-none}"
    [ ! -f "$(dirname "$LLAMA_SERVER")/../BUILD-INFO" ] || sed 's/^/llama-server build: /' "$(dirname "$LLAMA_SERVER")/../BUILD-INFO"
    echo "threads $THREADS, context $CTX per sequence, concurrency $CONCURRENCY, rounds $ROUNDS, requests per client $REQUESTS, max_tokens $MAX_TOKENS"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "busiest processes before:"
    ps -eo pid,pcpu,comm --sort=-pcpu | head -n 6 | sed 's/^/  /'
} | tee "$OUT/host.txt"
[ "$(awk '{ print ($1 > 0.5) }' /proc/loadavg)" = 0 ] ||
    echo "compare-serve: warning: load average $(cut -d' ' -f1 /proc/loadavg) before starting: something else is running, and both servers' numbers will carry it" >&2

for r in $(seq 1 "$ROUNDS"); do
    start_draftwise "$r"
    start_llama_server "$r"
    idle_check "$r"
    for i in "${!LEVELS[@]}"; do
        c=${LEVELS[$i]}
        if [ $(((r + i) % 2)) -eq 1 ]; then
            run_load draftwise "$DW_URL" "$c" "$r"
            run_load llama-server "$LL_URL" "$c" "$r"
        else
            run_load llama-server "$LL_URL" "$c" "$r"
            run_load draftwise "$DW_URL" "$c" "$r"
        fi
    done
    stop_servers
    echo "compare-serve: round $r/$ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/host.txt"

# --- summary --------------------------------------------------------------------------
python3 - "$OUT" "$DW_PARALLEL_NOTE" "$PARALLEL" "$LLAMA_CTX" <<'PY'
import json, statistics, sys

out, dw_parallel, parallel, llama_ctx = sys.argv[1:5]
runs = [json.loads(line) for line in open(f"{out}/runs.jsonl")]
sides = ("draftwise", "llama-server")
levels = sorted({r["clients"] for r in runs})
rounds = sorted({r["round"] for r in runs})
by = {(r["side"], r["clients"], r["round"]): r for r in runs}


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs), "samples": xs}


def paired(num, den):
    return [num[k] / den[k] for k in num if k in den and den[k]]


summary = {"schema": 1, "draftwise_parallel": dw_parallel, "llama_server_np": int(parallel),
           "llama_server_ctx": int(llama_ctx),
           "unit_of_replication": "run: one run of C clients against one server is one sample; rounds restart both servers",
           "levels": {}}
for c in levels:
    entry = {}
    agg = {}
    for side in sides:
        rs = [by[(side, c, k)] for k in rounds if (side, c, k) in by]
        agg[side] = {r["round"]: r["aggregate_tok_per_s"] for r in rs}
        entry[side] = {
            "aggregate_tok_per_s": stats(list(agg[side].values())),
            "ttft_p50_ms": stats([r["ttft_ms"]["p50"] for r in rs]),
            "ttft_p95_ms": stats([r["ttft_ms"]["p95"] for r in rs]),
            "per_request_tok_per_s_p50": stats([r["per_request_tok_per_s"]["p50"] for r in rs]),
            "token_count_source": sorted({str(r["token_count_source"]) for r in rs}),
            "prompt_tokens_mean": stats([(r.get("prompt_tokens") or {}).get("mean") for r in rs]),
        }
        base = {r["round"]: r["aggregate_tok_per_s"] for r in runs if r["side"] == side and r["clients"] == 1}
        entry[side]["vs_own_c1"] = stats(paired(agg[side], base)) if 1 in levels else None
    entry["draftwise_over_llama_server"] = stats(paired(agg["draftwise"], agg["llama-server"]))
    summary["levels"][str(c)] = entry
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)


def fmt(s, digits=1, suffix=""):
    if not s:
        return "n/a"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}{suffix}"
    return f"{s['median']:.{digits}f}{suffix} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


host = open(f"{out}/host.txt").read().rstrip()
lines = [
    "```", host, "```", "",
    f"Unit: one run of C clients against one server is one sample (n = rounds = {len(rounds)}); "
    "cells give the median over rounds with [min, max] when n > 1. Ratios are paired within a round. "
    "TTFT p50/p95 are each run's percentiles over its requests, then the median over rounds.",
    "",
    "| clients | draftwise tok/s | llama-server tok/s | draftwise / llama-server | draftwise vs own 1-client | "
    "llama-server vs own 1-client | draftwise TTFT p50 / p95 ms | llama-server TTFT p50 / p95 ms | "
    "per-request tok/s (dw / ll) |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for c in levels:
    e = summary["levels"][str(c)]
    dw, ll = e["draftwise"], e["llama-server"]
    lines.append(
        f"| {c} | {fmt(dw['aggregate_tok_per_s'])} | {fmt(ll['aggregate_tok_per_s'])} | "
        f"{fmt(e['draftwise_over_llama_server'], 2, 'x')} | {fmt(dw['vs_own_c1'], 2, 'x')} | {fmt(ll['vs_own_c1'], 2, 'x')} | "
        f"{fmt(dw['ttft_p50_ms'], 0)} / {fmt(dw['ttft_p95_ms'], 0)} | {fmt(ll['ttft_p50_ms'], 0)} / {fmt(ll['ttft_p95_ms'], 0)} | "
        f"{fmt(dw['per_request_tok_per_s_p50'])} / {fmt(ll['per_request_tok_per_s_p50'])} |")
lines.append("")
lines.append("Host CPU besides the measured server during each run (the load client included), % of one core: "
             + ", ".join(f"{r['side']} c={r['clients']} r={r['round']}: {r.get('others_pct_during')}" for r in runs) + ".")
contended = [r for r in runs if r.get("contended")]
summary["contended_runs"] = [{"side": r["side"], "clients": r["clients"], "round": r["round"],
                              "host_busy_pct_before": r["host_busy_pct_before"]} for r in contended]
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
if contended:
    lines.append("")
    lines.append(f"**Contended host: {len(contended)} of {len(runs)} runs started with other processes using CPU "
                 f"(up to {max(r['host_busy_pct_before'] for r in contended)}% of a core; --allow-contended). "
                 "These numbers are not a measurement of either server.**")
sources = {s for c in levels for side in sides for s in summary["levels"][str(c)][side]["token_count_source"]}
if sources != {"usage"}:
    lines.append("")
    lines.append(f"Token counts came from {sorted(sources)}: where not `usage`, counted stream events (exact only at one event per token).")
md = "\n".join(lines) + "\n"
open(f"{out}/summary.md", "w").write(md)
print(md)
print(f"runs, raw per-request records, logs, summary.json and summary.md in {out}")
PY

#!/usr/bin/env bash
# Side-by-side decode and prefill throughput: draftwise `runtime bench`
# against llama.cpp (llama-cpp-python, built from source for this CPU), on
# the same GGUF, prompt ids, generated length and thread count.
#
# Usage:
#   scripts/bench/compare-llamacpp.sh [--model PATH] [--threads N]
#       [--prompt-tokens N] [--gen-tokens N] [--reps N] [--out DIR]
#       [--llamacpp-batch default|prompt] [--llamacpp-flash-attn on|off]
#
# llama.cpp runs as its users get it: its own context defaults (n_batch
# 2048, n_ubatch 512) and flash attention on (llama.cpp's default is
# "auto", which its CPU backend resolves to on). --llamacpp-batch prompt
# gives it the whole prompt as one batch instead; --llamacpp-flash-attn off
# turns flash attention off. Report llama.cpp's best setting when they differ.
#
# Each repetition is one fresh process per engine (model load not timed;
# one warm-up pass inside the process is run and discarded), and the two
# engines alternate, the one that goes first swapping every repetition, so
# that drift of a shared host spreads over both sides. At least 5
# repetitions per side. Prints every sample, each side's median (with
# min/max) and the ratio runtime / llama.cpp; writes the raw JSON lines and
# a summary to --out (default: a new temporary directory).
#
# The llama-cpp-python venv is built once per CPU and cached in
# ${DRAFTWISE_BENCH_VENV:-$XDG_CACHE_HOME/draftwise/bench-venv}, from the
# PyPI source distribution with every ggml x86 feature this CPU's flags list
# switched on (AVX, AVX2, FMA, F16C, BMI2, AVX-512 F/VBMI/VNNI/BF16,
# AVX-VNNI) except AMX: GGML_NATIVE=ON enables AMX wherever CPUID lists it,
# and in virtual machines that list AMX without running it (this project's
# Sapphire Rapids hosts) llama.cpp then dies with "Illegal instruction" at
# its first `tilezero`. A different CPU, Python or version rebuilds it.
# Setting DRAFTWISE_BENCH_VENV to an existing venv uses it as it is (it is
# never rebuilt or deleted).
# DRAFTWISE_RUNTIME=/path/to/runtime skips `cargo build`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MODEL=""
THREADS=1
PROMPT_TOKENS=64
GEN_TOKENS=64
REPS=5
OUT=""
LLAMACPP_BATCH=default
LLAMACPP_FA=on

die() {
    echo "compare-llamacpp: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --prompt-tokens) PROMPT_TOKENS=$2; shift 2 ;;
    --gen-tokens) GEN_TOKENS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --llamacpp-batch) LLAMACPP_BATCH=$2; shift 2 ;;
    --llamacpp-flash-attn) LLAMACPP_FA=$2; shift 2 ;;
    -h | --help) sed -n '2,34p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ "$REPS" -ge 5 ] 2>/dev/null || die "--reps $REPS: at least 5 alternating repetitions per side are needed for a comparison"
[ "$THREADS" -ge 1 ] 2>/dev/null || die "--threads must be a positive integer"
[ "$PROMPT_TOKENS" -ge 1 ] 2>/dev/null || die "--prompt-tokens must be a positive integer"
[ "$GEN_TOKENS" -ge 1 ] 2>/dev/null || die "--gen-tokens must be a positive integer"
case "$LLAMACPP_BATCH" in default | prompt) ;; *) die "--llamacpp-batch $LLAMACPP_BATCH: default or prompt" ;; esac
case "$LLAMACPP_FA" in on | off) ;; *) die "--llamacpp-flash-attn $LLAMACPP_FA: on or off" ;; esac

# --- the runtime binary -----------------------------------------------------
if [ -n "${DRAFTWISE_RUNTIME:-}" ]; then
    RUNTIME=$DRAFTWISE_RUNTIME
else
    (cd "$ROOT" && cargo build --release -p runtime --quiet)
    TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
    RUNTIME=$TARGET_DIR/release/runtime
fi
[ -x "$RUNTIME" ] || die "no runtime binary at $RUNTIME"
[ -n "$MODEL" ] || MODEL=$("$RUNTIME" fetch-model)
[ -f "$MODEL" ] || die "--model $MODEL: not a file (llama.cpp needs a GGUF file)"

# --- the llama-cpp-python venv, built for this CPU --------------------------
VENV=$("$ROOT/scripts/bench/llamacpp-venv.sh")
"$VENV/bin/python" -c 'import llama_cpp, numpy' ||
    die "llama_cpp does not import in $VENV (an 'Illegal instruction' means it was built for another CPU: delete $VENV)"
echo "llama.cpp: $("$VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode().strip())')" >&2

# --- runs -------------------------------------------------------------------
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/draftwise-compare.XXXXXX")
mkdir -p "$OUT"
: >"$OUT/runtime.jsonl"
: >"$OUT/llamacpp.jsonl"
HELPER=$ROOT/scripts/bench/llamacpp_bench.py
IDS=$("$RUNTIME" bench --model "$MODEL" --threads 1 --prompt-tokens "$PROMPT_TOKENS" --gen-tokens 0 \
    --reps 1 --warmup 0 --json | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["prompt_ids"]))')

run_runtime() {
    "$RUNTIME" bench --model "$MODEL" --threads "$THREADS" --prompt-tokens "$PROMPT_TOKENS" \
        --gen-tokens "$GEN_TOKENS" --reps 1 --warmup 1 --json >>"$OUT/runtime.jsonl"
}
run_llamacpp() {
    "$VENV/bin/python" "$HELPER" --model "$MODEL" --threads "$THREADS" --prompt-ids "$IDS" \
        --gen-tokens "$GEN_TOKENS" --reps 1 --warmup 1 --batch "$LLAMACPP_BATCH" \
        --flash-attn "$LLAMACPP_FA" >>"$OUT/llamacpp.jsonl"
}

{
    echo "host: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs available"
    echo "llama.cpp: batch $LLAMACPP_BATCH, flash attention $LLAMACPP_FA"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/host.txt"
for i in $(seq 1 "$REPS"); do
    if [ $((i % 2)) -eq 1 ]; then
        run_llamacpp
        run_runtime
    else
        run_runtime
        run_llamacpp
    fi
    echo "repetition $i/$REPS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/host.txt"

# --- summary ----------------------------------------------------------------
python3 - "$OUT" "$MODEL" "$THREADS" "$PROMPT_TOKENS" "$GEN_TOKENS" <<'PY'
import json, statistics, sys
out, model, threads, prompt, gen = sys.argv[1:6]
def reps(path):
    rows = []
    for line in open(path):
        rows.extend(json.loads(line)["reps"])
    return rows
sides = {"runtime": reps(f"{out}/runtime.jsonl"), "llama.cpp": reps(f"{out}/llamacpp.jsonl")}
summary = {"model": model, "threads": int(threads), "prompt_tokens": int(prompt), "gen_tokens": int(gen), "sides": {}}
print(f"\nmodel {model} | threads {threads} | prompt {prompt} tok | gen {gen} tok")
for metric in ("prefill_tok_per_s", "decode_tok_per_s"):
    meds = {}
    for side, rows in sides.items():
        v = [r[metric] for r in rows]
        meds[side] = statistics.median(v)
        summary["sides"].setdefault(side, {})[metric] = {"n": len(v), "median": meds[side], "min": min(v), "max": max(v), "samples": v}
        print(f"{metric:>18} {side:>9}: median {meds[side]:8.1f}  min {min(v):8.1f}  max {max(v):8.1f}  n {len(v)}  samples {[round(x, 1) for x in v]}")
    ratio = meds["runtime"] / meds["llama.cpp"]
    summary[f"{metric}_ratio_runtime_over_llamacpp"] = ratio
    print(f"{metric:>18} ratio runtime / llama.cpp: {ratio:.2f}x")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(f"raw samples and summary.json in {out}")
PY

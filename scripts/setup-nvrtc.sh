#!/usr/bin/env bash
# Installs NVIDIA's NVRTC (the CUDA run-time compiler, no GPU needed) from
# PyPI into a virtual environment, so the CUDA kernels can be compiled to
# PTX/CUBIN on any Linux x86_64 host: kernels/tests/cuda_nvrtc.rs uses it.
#
#   scripts/setup-nvrtc.sh [VENV_DIR]     (default: target/nvrtc-venv)
#
# Prints the path of libnvrtc.so.12; export it as DRAFTWISE_NVRTC_LIB to point
# the runtime at it (the test also finds it in the default venv by itself).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-target/nvrtc-venv}"
pin="nvidia-cuda-nvrtc-cu12==12.9.86"
if ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" > /dev/null; then
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pin" >&2
fi
lib=$(compgen -G "$venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" | head -n1)
[ -n "$lib" ] || { echo "setup-nvrtc: $pin installed but libnvrtc.so.12 not found under $venv" >&2; exit 1; }
realpath "$lib"

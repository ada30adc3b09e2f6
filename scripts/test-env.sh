#!/usr/bin/env bash
# Creates (or updates) the Python environment of the tests: a virtual
# environment with the packages of scripts/test-requirements.txt (the
# official `openai` client, which tests/tests/serve_openai.rs drives
# `runtime serve` with). .ci/run calls this before the tests.
#
#   scripts/test-env.sh            # creates ./.venv-test
#   DRAFTWISE_TEST_VENV=/some/dir scripts/test-env.sh
#
# The interpreter is $DRAFTWISE_PYTHON, else python3 (it needs the venv module).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DRAFTWISE_TEST_VENV:-.venv-test}"
python="${DRAFTWISE_PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    if ! "$python" -m venv "$venv"; then
        rm -rf "$venv"
        echo "error: '$python -m venv' failed; install Python's venv module (Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r scripts/test-requirements.txt
"$venv/bin/python" -c 'import openai; print("test environment ready:", openai.__name__, openai.__version__)'

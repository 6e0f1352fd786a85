#!/usr/bin/env bash
# Prepares the Python side of the benchmark in the repository's .venv: the pinned comparison
# libraries (requirements.txt) and a release build of the redmutex Python binding, so that its
# row measures optimized code. Idempotent; quick when the pins are already there.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

scripts/venv.sh

# pip is slow even when it has nothing to do; ask it only when a pin is missing.
have=$(.venv/bin/python -m pip freeze --disable-pip-version-check 2>/dev/null || true)
missing=()
while read -r req; do
  [[ -z "$req" || "$req" == \#* ]] && continue
  grep -qix -- "$req" <<<"$have" || missing+=("$req")
done <bench/python/requirements.txt
if ((${#missing[@]})); then
  .venv/bin/python -m pip install --disable-pip-version-check --quiet "${missing[@]}"
fi

# `maturin develop` (as scripts/test-py.sh runs it) installs a debug build; the benchmark wants
# the optimized one, built as the wheel is (the dist profile). scripts/test-py.sh puts its
# debug build back.
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
if ! maturin develop --profile dist --quiet --manifest-path py/Cargo.toml >/dev/null; then
  echo "bench setup: could not build the redmutex Python binding; its row will be skipped" >&2
fi

#!/usr/bin/env bash
# Creates .venv at the repository root (if missing) with the pinned Python build and test
# tools. Idempotent and quick when everything is already there.
set -euo pipefail

MATURIN_VERSION=1.16.0
PYTEST_VERSION=9.2.0

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ! -x .venv/bin/python ]]; then
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    echo "venv: python3 cannot make virtual environments; run make deps (python3-venv)" >&2
    exit 1
  fi
  rm -rf .venv
  python3 -m venv .venv
fi

want=("maturin==$MATURIN_VERSION" "pytest==$PYTEST_VERSION")
# pip is slow even when it has nothing to do; ask it only when a pin is missing.
have=$(.venv/bin/python -m pip freeze --disable-pip-version-check 2>/dev/null || true)
missing=()
for req in "${want[@]}"; do
  grep -qix -- "$req" <<<"$have" || missing+=("$req")
done
if ((${#missing[@]})); then
  .venv/bin/python -m pip install --disable-pip-version-check --quiet "${missing[@]}"
fi

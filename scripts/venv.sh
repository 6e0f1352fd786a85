#!/usr/bin/env bash
# Creates .venv at the repository root (if missing) with the pinned Python build and test
# tools. Idempotent and quick when everything is already there.
set -euo pipefail

MATURIN_VERSION=1.16.0
PYTEST_VERSION=9.2.0
# mypy for `mypy.stubtest` (the stubs against the built module); ziglang is the linker with
# which maturin builds a manylinux2014 wheel without a container (make dist); cmake builds
# the C example against the dist tarball's CMake package (scripts/test-dist.sh).
MYPY_VERSION=1.19.1
ZIGLANG_VERSION=0.15.2
CMAKE_VERSION=3.31.10
# uvloop: redmutex.asyncio's tests run on it as well as on asyncio's own loop.
UVLOOP_VERSION=0.21.0

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ! -x .venv/bin/python ]]; then
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    echo "venv: python3 cannot make virtual environments; run make deps (python3-venv)" >&2
    exit 1
  fi
  rm -rf .venv
  python3 -m venv .venv
fi

want=("maturin==$MATURIN_VERSION" "pytest==$PYTEST_VERSION" "mypy==$MYPY_VERSION"
  "ziglang==$ZIGLANG_VERSION" "cmake==$CMAKE_VERSION" "uvloop==$UVLOOP_VERSION")
# pip is slow even when it has nothing to do; ask it only when a pin is missing.
have=$(.venv/bin/python -m pip freeze --disable-pip-version-check 2>/dev/null || true)
missing=()
for req in "${want[@]}"; do
  grep -qix -- "$req" <<<"$have" || missing+=("$req")
done
if ((${#missing[@]})); then
  .venv/bin/python -m pip install --disable-pip-version-check --quiet "${missing[@]}"
fi

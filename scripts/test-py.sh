#!/usr/bin/env bash
# Builds the Python package into .venv (maturin develop: a debug build, installed in
# place) and runs its pytest suite. Extra arguments go to pytest.
# The tests start their own redis-servers; redis-server must be on PATH (make deps).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v redis-server >/dev/null || { echo "test-py: redis-server not found; run make deps" >&2; exit 1; }

scripts/venv.sh
# maturin installs into the environment named here, and pytest must import from it.
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"

maturin develop --manifest-path py/Cargo.toml
# The TLS cluster and Sentinel group of test_tls_topologies.py.
cargo build -p redmutex-tests --bin tls_fixture
# The stubs must agree with the built module (names, signatures, defaults, positional-only
# parameters), and accept what users write (only when no pytest arguments narrow the run).
if (($# == 0)); then
  python -m mypy.stubtest redmutex --allowlist py/tests/stubtest-allowlist.txt
  python -m mypy --strict py/tests/typing_usage.py
fi
python -m pytest py/tests "$@"

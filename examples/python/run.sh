#!/usr/bin/env bash
# Runs examples/python/nightly_invoice.py against a throwaway redis-server on a free loopback
# port, with the repository's .venv (building the package into it when it is missing).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if ! .venv/bin/python -c 'import redmutex' 2>/dev/null; then
  scripts/venv.sh
  VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" \
    maturin develop --manifest-path py/Cargo.toml
fi

# shellcheck source=scripts/lib/redis.sh
source scripts/lib/redis.sh
redis_start_servers 1

.venv/bin/python examples/python/nightly_invoice.py "${REDIS_URLS[0]}"
.venv/bin/python examples/python/async_service.py "${REDIS_URLS[0]}"

#!/usr/bin/env bash
# The demo (README): the nightly-invoice run on a redis-server the demo starts itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap-make.sh
exec make demo

#!/usr/bin/env bash
# The one test command (README, CI): installs what is missing, then runs every test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap-make.sh
exec make test

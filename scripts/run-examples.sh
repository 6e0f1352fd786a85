#!/usr/bin/env bash
# Builds and runs every example in examples/ (Rust, C and Python) as part of `make test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "run-examples: Rust nightly_invoice"
cargo run -q -p redmutex-examples --bin nightly_invoice

for lang in c python; do
  if [[ -x "examples/$lang/run.sh" ]]; then
    echo "run-examples: $lang nightly_invoice"
    "examples/$lang/run.sh"
  fi
done

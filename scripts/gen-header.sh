#!/usr/bin/env bash
# Regenerates include/redmutex.h from ffi-c/ with a pinned cbindgen.
#   scripts/gen-header.sh           rewrite the header
#   scripts/gen-header.sh --check   fail, showing the diff, if the checked-in header is stale
#   scripts/gen-header.sh --install-only   just make sure the pinned cbindgen is there
# cbindgen output changes between releases, so everyone (and CI) uses the same version,
# installed under .tools/ rather than over whatever cbindgen a machine may already have.
set -euo pipefail

CBINDGEN_VERSION=0.29.4

cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=0
install_only=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  --install-only) install_only=1 ;;
  *) echo "usage: $0 [--check | --install-only]" >&2; exit 2 ;;
esac

cbindgen=.tools/bin/cbindgen
if [[ "$("$cbindgen" --version 2>/dev/null || true)" != "cbindgen $CBINDGEN_VERSION" ]]; then
  echo "gen-header: installing cbindgen $CBINDGEN_VERSION into .tools/" >&2
  cargo install cbindgen --version "$CBINDGEN_VERSION" --locked --root .tools --force
fi
if ((install_only)); then exit 0; fi

header=include/redmutex.h
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$cbindgen" --quiet --config ffi-c/cbindgen.toml --crate redmutex-ffi --output "$tmp" ffi-c

if (( check )); then
  if ! diff -u "$header" "$tmp"; then
    echo "gen-header: $header is out of date; run scripts/gen-header.sh and commit it" >&2
    exit 1
  fi
  echo "gen-header: $header is up to date"
else
  mkdir -p include
  # Through a redirect so the header keeps ordinary permissions, not mktemp's 0600.
  cat "$tmp" >"$header"
  echo "gen-header: wrote $header"
fi

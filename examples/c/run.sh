#!/usr/bin/env bash
# Builds examples/c/nightly_invoice.c the way the README tells C users to: `make install-c`
# (here into a throwaway prefix) and `cc ... $(pkg-config --cflags --libs redmutex)`, then
# runs it against a throwaway redis-server on a free loopback port.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# shellcheck source=scripts/lib/redis.sh
source scripts/lib/redis.sh
prefix=$(mktemp -d "${TMPDIR:-/tmp}/redmutex-c-example.XXXXXX")
redis_on_exit "rm -rf '$prefix'"

make --no-print-directory install-c PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config's output is meant to be split into arguments
cc -std=c11 -Wall -Wextra -Werror examples/c/nightly_invoice.c \
  $(pkg-config --cflags --libs redmutex) -o "$prefix/nightly_invoice"

redis_start_servers 1
# The library was installed into a prefix the dynamic loader does not search.
LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$prefix/nightly_invoice" "${REDIS_URLS[0]}"

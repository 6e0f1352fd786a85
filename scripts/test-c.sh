#!/usr/bin/env bash
# Builds libredmutex and runs the C and C++ tests in tests/c/: first with AddressSanitizer
# and UBSan, then without sanitizers under valgrind (each finds bugs the other misses).
#
#   scripts/test-c.sh [test_name ...]    e.g. scripts/test-c.sh test_basic
#
# Tests read REDMUTEX_TEST_URL (one server), REDMUTEX_TEST_URLS5 (five, comma-separated),
# REDMUTEX_TEST_CLUSTER_URL (a redis+cluster:// URL of a three-master Redis Cluster with the
# usual slot ranges) and REDMUTEX_TEST_TLS_URL with REDMUTEX_TEST_TLS_CA and
# REDMUTEX_TEST_TLS_OTHER_CA (a TLS-only server, the CA that signed its certificate, and one
# that signed nothing; empty when openssl or redis-server's TLS is missing). When unset, this
# script starts throwaway redis-servers on free loopback ports for them.
# Needs cc, c++, redis-server and valgrind (`make deps` installs what is missing).
# valgrind reads tests/c/valgrind.supp: glibc's and Rust std's per-thread bookkeeping, and ring's
# assembly AES-GCM, which memcheck cannot follow.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

for tool in cc c++ redis-server redis-cli valgrind; do
  command -v "$tool" >/dev/null || { echo "test-c: $tool not found; run make deps" >&2; exit 1; }
done

version=$(scripts/version.sh)

sources=()
if (($#)); then
  for name in "$@"; do
    for src in tests/c/"$name".c tests/c/"$name".cpp; do
      if [[ -f "$src" ]]; then sources+=("$src"); fi
    done
  done
else
  shopt -s nullglob
  sources=(tests/c/test_*.c tests/c/test_*.cpp)
  shopt -u nullglob
fi
((${#sources[@]})) || { echo "test-c: no tests match: $*" >&2; exit 1; }

# Debug: these tests check the ABI, not speed, and a debug build is much faster to make.
cargo build -p redmutex-ffi -p redmutex-tests --bin tls_fixture
target_dir=${CARGO_TARGET_DIR:-target}
lib="$target_dir/debug/libredmutex.a"
out="$target_dir/c-tests"
mkdir -p "$out"

# shellcheck source=scripts/lib/redis.sh
source scripts/lib/redis.sh
if [[ -z "${REDMUTEX_TEST_URL:-}" ]]; then
  redis_start_servers 1
  export REDMUTEX_TEST_URL=${REDIS_URLS[-1]}
fi
if [[ -z "${REDMUTEX_TEST_URLS5:-}" ]]; then
  redis_start_servers 5
  REDMUTEX_TEST_URLS5=$(IFS=,; echo "${REDIS_URLS[*]: -5}")
  export REDMUTEX_TEST_URLS5
fi
if [[ -z "${REDMUTEX_TEST_CLUSTER_URL:-}" ]]; then
  redis_start_cluster 3
  export REDMUTEX_TEST_CLUSTER_URL=$REDIS_CLUSTER_URL
fi
if [[ -z "${REDMUTEX_TEST_TLS_URL:-}" ]]; then
  redis_start_tls_server
  export REDMUTEX_TEST_TLS_URL=$REDIS_TLS_URL REDMUTEX_TEST_TLS_CA=$REDIS_TLS_CA
  export REDMUTEX_TEST_TLS_OTHER_CA=$REDIS_TLS_OTHER_CA
fi
if [[ -z "${REDMUTEX_TEST_TLS_CLUSTER_URL:-}" && -n "${REDMUTEX_TEST_TLS_URL:-}" ]]; then
  redis_start_tls_topologies
fi
echo "test-c: REDMUTEX_TEST_URL=$REDMUTEX_TEST_URL"
echo "test-c: REDMUTEX_TEST_URLS5=$REDMUTEX_TEST_URLS5"
echo "test-c: REDMUTEX_TEST_CLUSTER_URL=$REDMUTEX_TEST_CLUSTER_URL"
echo "test-c: REDMUTEX_TEST_TLS_URL=${REDMUTEX_TEST_TLS_URL:-(none: no openssl or no TLS in redis-server)}"
echo "test-c: REDMUTEX_TEST_TLS_CLUSTER_URL=${REDMUTEX_TEST_TLS_CLUSTER_URL:-(none)}"
echo "test-c: REDMUTEX_TEST_TLS_SENTINEL_URL=${REDMUTEX_TEST_TLS_SENTINEL_URL:-(none)}"

common=(-g -Iinclude -Itests/c -Wall -Wextra -Wpedantic -Werror "-DEXPECTED_VERSION=\"$version\"")
# A Rust staticlib leaves its system libraries to the final link.
rust_libs=("$lib" -lpthread -ldl -lm)
sanitize=("-fsanitize=address,undefined" -fno-sanitize-recover=all -fno-omit-frame-pointer)

compile() { # compile SOURCE BINARY EXTRA_FLAGS...
  local src=$1 bin=$2
  shift 2
  case "$src" in
    *.c) cc -std=c11 "${common[@]}" "$@" "$src" -o "$bin" "${rust_libs[@]}" ;;
    *.cpp) c++ -std=c++17 "${common[@]}" "$@" "$src" -o "$bin" "${rust_libs[@]}" ;;
  esac
}

failed=()
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

for src in "${sources[@]}"; do
  name=$(basename "${src%.*}")
  echo "== $name (asan, ubsan)"
  compile "$src" "$out/$name-san" "${sanitize[@]}"
  "$out/$name-san" || failed+=("$name (sanitizers)")
done

for src in "${sources[@]}"; do
  name=$(basename "${src%.*}")
  echo "== $name (valgrind)"
  compile "$src" "$out/$name"
  valgrind --quiet --error-exitcode=1 --leak-check=full \
    --suppressions=tests/c/valgrind.supp "$out/$name" ||
    failed+=("$name (valgrind)")
done

if ((${#failed[@]})); then
  printf 'test-c: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test-c: all ${#sources[@]} C/C++ test programs passed, with sanitizers and under valgrind"

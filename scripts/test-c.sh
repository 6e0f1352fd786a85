#!/usr/bin/env bash
# Builds libredmutex and runs the C and C++ tests in tests/c/: first with AddressSanitizer
# and UBSan, then without sanitizers under valgrind (each finds bugs the other misses), and
# the tests of threads sharing one guard also under ThreadSanitizer (tests/c/tsan.supp).
# Before them, the headers' compile-time promises: redmutex.h alone as strict C99 and as
# C++11, and redmutex.hpp's [[nodiscard]]. Tests named *_c99.c build as C99 and as C++11.
#
#   scripts/test-c.sh [test_name ...]    e.g. scripts/test-c.sh test_basic
#
# Tests read REDMUTEX_TEST_URL (one server), REDMUTEX_TEST_URLS5 (five, comma-separated),
# REDMUTEX_TEST_EVICTING_URL (a server whose maxmemory-policy is allkeys-lru),
# REDMUTEX_TEST_CLUSTER_URL (a redis+cluster:// URL of a three-master Redis Cluster with the
# usual slot ranges) and REDMUTEX_TEST_TLS_URL with REDMUTEX_TEST_TLS_CA and
# REDMUTEX_TEST_TLS_OTHER_CA (a TLS-only server, the CA that signed its certificate, and one
# that signed nothing; empty when openssl or redis-server's TLS is missing), and
# REDMUTEX_TEST_FREEZABLE_URL with REDMUTEX_TEST_FREEZABLE_PID (a server of its own, which a
# test freezes with SIGSTOP and thaws by its pid), and REDMUTEX_TEST_OLD_URL (Redis 6.0, too
# old for the scripts: scripts/servers.sh fetches it). When unset, this script starts throwaway
# redis-servers on free loopback ports for them.
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
cargo build -p redmutex-ffi
# Separately: with --bin, cargo would build only that binary of every package named.
cargo build -p redmutex-tests --bin tls_fixture
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
if [[ -z "${REDMUTEX_TEST_EVICTING_URL:-}" ]]; then
  redis_start_servers 1
  REDMUTEX_TEST_EVICTING_URL=${REDIS_URLS[-1]}
  redis-cli -u "$REDMUTEX_TEST_EVICTING_URL" config set maxmemory-policy allkeys-lru >/dev/null
  export REDMUTEX_TEST_EVICTING_URL
fi
if [[ -z "${REDMUTEX_TEST_FREEZABLE_URL:-}" ]]; then
  redis_start_servers 1
  export REDMUTEX_TEST_FREEZABLE_URL=${REDIS_URLS[-1]} REDMUTEX_TEST_FREEZABLE_PID=${REDIS_PIDS[-1]}
fi
if [[ -z "${REDMUTEX_TEST_OLD_URL:-}" ]]; then
  scripts/servers.sh install
  REDIS_SERVER_BIN=$(scripts/servers.sh path redis-6.0) redis_start_servers 1
  export REDMUTEX_TEST_OLD_URL=${REDIS_URLS[-1]}
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
    # The header promises C99: these tests hold it to that, and build once more as C++11.
    *_c99.c)
      cc -std=c99 "${common[@]}" "$@" "$src" -o "$bin" "${rust_libs[@]}"
      c++ -std=c++11 -x c++ "${common[@]}" "$@" "$src" -x none -o "$bin-cxx" "${rust_libs[@]}"
      ;;
    *.c) cc -std=c11 "${common[@]}" "$@" "$src" -o "$bin" "${rust_libs[@]}" ;;
    *.cpp) c++ -std=c++17 "${common[@]}" "$@" "$src" -o "$bin" "${rust_libs[@]}" ;;
  esac
}

run() { # run BINARY [RUNNER...]: the binary, and its C++ build when there is one
  local bin=$1
  shift
  "$@" "$bin" || return 1
  if [[ -x "$bin-cxx" ]]; then "$@" "$bin-cxx" || return 1; fi
}

# Compile-time promises of the headers: redmutex.h alone in strict C99 and in C++11, and
# redmutex.hpp's [[nodiscard]] lock calls (discarding a guard would unlock at once).
echo "== headers (C99, C++11, [[nodiscard]])"
header_check() { # header_check LANG STD SNIPPET: compiles SNIPPET with -Werror
  printf '%s\n' "$3" | "$1" "-std=$2" -Iinclude -Wall -Wextra -Wpedantic -Werror -fsyntax-only \
    -x "$( [[ $1 == cc ]] && echo c || echo c++ )" -
}
header_check cc c99 '#include "redmutex.h"'
header_check c++ c++11 '#include "redmutex.h"'
use_guard='#include "redmutex.hpp"
void f(const redmutex::Client& c) { auto g = c.lock("job"); auto t = c.try_lock("job");
  auto u = c.try_lock_for("job", std::chrono::seconds(1)); (void)g; (void)t; (void)u; }'
header_check c++ c++17 "$use_guard"
for call in 'c.lock("job")' 'c.try_lock("job")' 'c.try_lock_for("job", std::chrono::seconds(1))' \
  'c.semaphore("job", 2)' 'c.try_semaphore("job", 2)' 'c.read_lock("job")' \
  'c.try_read_lock("job")' 'c.write_lock("job")' 'c.try_write_lock_for("job", std::chrono::seconds(1))'; do
  if header_check c++ c++17 "#include \"redmutex.hpp\"
void f(const redmutex::Client& c) { $call; }" 2>/dev/null; then
    echo "test-c: discarding the result of $call compiles without a warning" >&2
    exit 1
  fi
done

failed=()
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

for src in "${sources[@]}"; do
  name=$(basename "${src%.*}")
  echo "== $name (asan, ubsan)"
  compile "$src" "$out/$name-san" "${sanitize[@]}"
  run "$out/$name-san" || failed+=("$name (sanitizers)")
done

# ThreadSanitizer for the programs whose point is threads sharing one guard. The Rust library
# is not instrumented, so this checks the C side's use of the API (TSan cannot be combined
# with ASan, hence a build of its own).
for src in "${sources[@]}"; do
  case "$src" in */test_release.c | */test_cpp_release.cpp) ;; *) continue ;; esac
  name=$(basename "${src%.*}")
  echo "== $name (tsan)"
  compile "$src" "$out/$name-tsan" -fsanitize=thread
  TSAN_OPTIONS="halt_on_error=1 suppressions=tests/c/tsan.supp ${TSAN_OPTIONS:-}" \
    run "$out/$name-tsan" ||
    failed+=("$name (tsan)")
done

for src in "${sources[@]}"; do
  name=$(basename "${src%.*}")
  echo "== $name (valgrind)"
  compile "$src" "$out/$name"
  run "$out/$name" valgrind --quiet --error-exitcode=1 --leak-check=full \
    --suppressions=tests/c/valgrind.supp ||
    failed+=("$name (valgrind)")
done

if ((${#failed[@]})); then
  printf 'test-c: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test-c: all ${#sources[@]} C/C++ test programs passed, with sanitizers and under valgrind"

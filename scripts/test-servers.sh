#!/usr/bin/env bash
# The server matrix: the core's real-server suites that matter for compatibility, run against
# each server of scripts/servers.sh's matrix (Redis 6.2, Redis 8.2, Valkey 8.1). `cargo test`
# runs them, with everything else, against the distribution's redis-server (7.0 on Debian 12).
#
#   scripts/test-servers.sh [SERVER ...]    e.g. scripts/test-servers.sh valkey-8.1
#
# The suites: the lock, renewal and loss (core), fences (fences), waiting and hand-off (handoff),
# Redlock (redlock), semaphores, read-write locks, the eviction-policy check and other
# hardening (hardening), the least-privilege ACL rule (security), a Sentinel failover
# (sentinel), a 3-master Cluster with a slot migration and a failover (cluster), and the
# servers' own suite (servers: the managed-service profile, what `Client::servers` reports).
# Each suite × server runs in a process of its own, SERVERS_JOBS of them at a time (default 1:
# on two cores, Redlock tests that bound how long a round takes starved with three at once). Fails,
# listing each failed suite × server, if any fails; a failed suite's output is printed whole.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Longest first, so that the last ones to finish are short.
SUITES=(cluster redlock core sentinel semaphore rwlock hardening handoff servers security fences operate)
JOBS=${SERVERS_JOBS:-1}

scripts/servers.sh install
if (($#)); then servers=("$@"); else mapfile -t servers < <(scripts/servers.sh matrix); fi

# The test executables, built once (cargo prints where each went).
declare -A exe=()
while IFS=' ' read -r name path; do
  exe[$name]=$path
done < <(cargo test -p redmutex-tests --no-run --message-format=json "${SUITES[@]/#/--test=}" |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])
')
for suite in "${SUITES[@]}"; do
  [[ -n "${exe[$suite]:-}" ]] || { echo "test-servers: no test executable for $suite" >&2; exit 1; }
done

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run_suite() { # run_suite NAME SUITE: SUITE against NAME; writes $logs/NAME.SUITE.{log,rc}
  local name=$1 suite=$2 bin start rc=0
  bin=$(scripts/servers.sh path "$name")
  start=$SECONDS
  REDMUTEX_REDIS_SERVER=$PWD/$bin "${exe[$suite]}" >"$logs/$name.$suite.log" 2>&1 || rc=$?
  echo "test-servers: $name $suite: $(grep -E '^test result' "$logs/$name.$suite.log" |
    tail -n 1 | sed -E 's/^test result: //; s/; 0 ignored.*//') ($((SECONDS - start)) s)"
  echo "$rc" >"$logs/$name.$suite.rc"
}

for name in "${servers[@]}"; do scripts/servers.sh path "$name" >/dev/null; done
started=$SECONDS
# Suite by suite, each against every server, JOBS at a time.
for suite in "${SUITES[@]}"; do
  for name in "${servers[@]}"; do
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
    run_suite "$name" "$suite" &
  done
done
wait

failures=()
for name in "${servers[@]}"; do
  for suite in "${SUITES[@]}"; do
    if [[ "$(cat "$logs/$name.$suite.rc" 2>/dev/null)" != 0 ]]; then
      echo "=== $suite against $name" >&2
      cat "$logs/$name.$suite.log" >&2 || true
      failures+=("$suite × $name")
    fi
  done
done
if ((${#failures[@]})); then
  printf 'test-servers: FAILED: %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "test-servers: ${#SUITES[@]} suites × ${#servers[@]} servers (${servers[*]}) passed in $((SECONDS - started)) s"

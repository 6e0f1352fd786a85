# shellcheck shell=bash
# Throwaway redis-server processes for test scripts; source it, don't run it.
#
#   source scripts/lib/redis.sh
#   redis_start_servers 5          # sets REDIS_URLS=(redis://127.0.0.1:PORT ...)
#
# Each server listens on a free loopback port (never 6379, so a developer's own Redis is
# never touched), keeps nothing on disk, and is stopped by pid when the sourcing shell
# exits. This file owns the EXIT trap; register more cleanup with redis_on_exit.

REDIS_PIDS=()
REDIS_URLS=()
REDIS_EXIT_HOOKS=()
REDIS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/redmutex-redis.XXXXXX")

redis_on_exit() { REDIS_EXIT_HOOKS+=("$1"); }

redis__cleanup() {
  local pid hook
  for pid in "${REDIS_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${REDIS_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$REDIS_DIR"
  for hook in "${REDIS_EXIT_HOOKS[@]}"; do eval "$hook" || true; done
}
trap redis__cleanup EXIT
# Without these, a Ctrl-C or kill would skip the EXIT trap and leave servers behind.
trap 'exit 130' INT
trap 'exit 143' TERM

# Ports are drawn below Linux's ephemeral range (32768+) so that outgoing connections
# don't take them between the check and the server's bind; a bind that still loses a
# race is retried on another port.
redis__start_one() {
  local attempt port pid log i
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    port=$((20000 + RANDOM % 12000))
    # A successful connect means someone already listens there.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    log="$REDIS_DIR/redis-$port.log"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize no --dir "$REDIS_DIR" >"$log" 2>&1 &
    pid=$!
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
        REDIS_PIDS+=("$pid")
        REDIS_URLS+=("redis://127.0.0.1:$port")
        return 0
      fi
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "redis.sh: redis-server on port $port did not come up (attempt $attempt):" >&2
    tail -n 5 "$log" >&2 || true
  done
  echo "redis.sh: could not start redis-server" >&2
  return 1
}

# Appends N urls to REDIS_URLS. Called directly, never in $(...), so that the pids
# reach the EXIT trap of this shell.
redis_start_servers() {
  local n=$1 i
  for ((i = 0; i < n; i++)); do redis__start_one; done
}

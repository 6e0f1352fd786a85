# shellcheck shell=bash
# Throwaway redis-server processes for test scripts; source it, don't run it.
#
#   source scripts/lib/redis.sh
#   redis_start_servers 5          # sets REDIS_URLS=(redis://127.0.0.1:PORT ...)
#   REDIS_SERVER_BIN=path redis_start_servers 1   # the same, of another redis-server
#   redis_start_cluster 3          # sets REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:P1,...
#   redis_start_tls_server         # sets REDIS_TLS_URL=rediss://127.0.0.1:PORT, REDIS_TLS_CA, ...
#   redis_start_tls_topologies     # exports REDMUTEX_TEST_TLS_CLUSTER_URL, ..._SENTINEL_URL, ...
#
# Each server listens on a free loopback port (never 6379, so a developer's own Redis is
# never touched), keeps nothing on disk, and is stopped by pid when the sourcing shell
# exits. This file owns the EXIT trap; register more cleanup with redis_on_exit.

REDIS_PIDS=()
REDIS_URLS=()
# Set by redis_start_cluster, for the sourcing script.
# shellcheck disable=SC2034
REDIS_CLUSTER_URL='' REDIS_CLUSTER_PORTS=()
# Set by redis_start_tls_server, for the sourcing script.
# shellcheck disable=SC2034
REDIS_TLS_URL='' REDIS_TLS_CA='' REDIS_TLS_OTHER_CA=''
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
redis__free_port() { # sets REDIS__PORT to a port nobody listens on, other than $1
  local i
  for i in $(seq 1 100); do
    REDIS__PORT=$((20000 + RANDOM % 12000))
    [[ "$REDIS__PORT" != "${1:-}" ]] || continue
    # A successful connect means someone already listens there.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$REDIS__PORT") 2>/dev/null; then return 0; fi
  done
  echo "redis.sh: no free port found" >&2
  return 1
}

# Starts one server; with "cluster", a cluster-enabled one whose cluster bus listens on a
# second free port (not Redis' default of port + 10000, which may be out of range or taken).
# Sets REDIS__PORT to its port; only a plain server's URL goes into REDIS_URLS.
redis__start_one() {
  local mode=${1:-} attempt port pid log i extra
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    redis__free_port || return 1
    port=$REDIS__PORT
    extra=()
    if [[ "$mode" == cluster ]]; then
      redis__free_port "$port" || return 1
      extra=(--cluster-enabled yes --cluster-config-file "nodes-$port.conf"
        --cluster-node-timeout 2000 --cluster-port "$REDIS__PORT")
    fi
    log="$REDIS_DIR/redis-$port.log"
    "${REDIS_SERVER_BIN:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize no --dir "$REDIS_DIR" "${extra[@]}" >"$log" 2>&1 &
    pid=$!
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
        REDIS_PIDS+=("$pid")
        [[ "$mode" == cluster ]] || REDIS_URLS+=("redis://127.0.0.1:$port")
        REDIS__PORT=$port
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
# REDIS_SERVER_BIN names another binary for them (REDIS_SERVER_BIN=... redis_start_servers 1).
redis_start_servers() {
  local n=$1 i
  for ((i = 0; i < n; i++)); do redis__start_one; done
}

# Starts a Redis Cluster of N masters (no replicas; N >= 3, as redis-cli requires), waits
# until every node reports cluster_state:ok, and sets REDIS_CLUSTER_URL and
# REDIS_CLUSTER_PORTS. The servers are stopped on exit like the others; their URLs are not
# added to REDIS_URLS. Called directly, never in $(...).
redis_start_cluster() {
  local n=$1 i port state deadline
  local ports=() addrs=()
  for ((i = 0; i < n; i++)); do
    redis__start_one cluster || return 1
    ports+=("$REDIS__PORT")
    addrs+=("127.0.0.1:$REDIS__PORT")
  done
  # redis-cli waits for the nodes to agree on the configuration with no limit of its own.
  if ! timeout 30 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 \
    --cluster-yes >"$REDIS_DIR/cluster-create.log" 2>&1; then
    echo "redis.sh: redis-cli --cluster create failed:" >&2
    tail -n 20 "$REDIS_DIR/cluster-create.log" >&2 || true
    return 1
  fi
  deadline=$((SECONDS + 10))
  for port in "${ports[@]}"; do
    while :; do
      state=$(redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | tr -d '\r' |
        sed -n 's/^cluster_state://p')
      [[ "$state" == ok ]] && break
      if ((SECONDS >= deadline)); then
        echo "redis.sh: cluster node on port $port reports cluster_state:${state:-?} after 10 s" >&2
        return 1
      fi
      sleep 0.05
    done
  done
  # shellcheck disable=SC2034 # for the sourcing script
  REDIS_CLUSTER_PORTS=("${ports[@]}")
  # shellcheck disable=SC2034
  REDIS_CLUSTER_URL="redis+cluster://$(IFS=,; echo "${addrs[*]}")"
}

# Makes a throwaway PKI with openssl (a CA, a second CA that signed nothing, and a server
# certificate for 127.0.0.1 and localhost signed by the first) and starts a TLS-only server
# with it. Sets REDIS_TLS_URL (rediss://127.0.0.1:PORT), REDIS_TLS_CA and REDIS_TLS_OTHER_CA
# (PEM file paths). Leaves them empty, with a note, when openssl is missing or redis-server
# was built without TLS. Called directly, never in $(...).
redis_start_tls_server() {
  local dir="$REDIS_DIR/tls" ca attempt port pid log i
  if ! command -v openssl >/dev/null; then
    echo "redis.sh: openssl not found; no TLS server" >&2
    return 0
  fi
  mkdir -p "$dir"
  for ca in ca other-ca; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj "/CN=redmutex test $ca" -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign \
      -keyout "$dir/$ca.key" -out "$dir/$ca.crt" 2>/dev/null || return 1
  done
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null || return 1
  printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature \
    extendedKeyUsage=serverAuth subjectAltName=IP:127.0.0.1,DNS:localhost >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.crt" \
    2>/dev/null || return 1
  for attempt in 1 2 3 4 5; do
    redis__free_port || return 1
    port=$REDIS__PORT
    log="$REDIS_DIR/redis-tls-$port.log"
    redis-server --port 0 --tls-port "$port" --bind 127.0.0.1 \
      --tls-cert-file "$dir/server.crt" --tls-key-file "$dir/server.key" \
      --tls-ca-cert-file "$dir/ca.crt" --tls-auth-clients no \
      --save '' --appendonly no --daemonize no --dir "$REDIS_DIR" >"$log" 2>&1 &
    pid=$!
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      if grep -q "Ready to accept connections" "$log"; then
        REDIS_PIDS+=("$pid")
        # shellcheck disable=SC2034 # for the sourcing script
        REDIS_TLS_URL="rediss://127.0.0.1:$port" REDIS_TLS_CA="$dir/ca.crt" \
          REDIS_TLS_OTHER_CA="$dir/other-ca.crt"
        return 0
      fi
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # Up to 7.0 a build without TLS rejects the directive; from 7.2 the TLS module is missing.
    if grep -qE "Bad directive|Missing implement" "$log"; then
      echo "redis.sh: redis-server was built without TLS; no TLS server" >&2
      return 0
    fi
    echo "redis.sh: the TLS redis-server on port $port did not come up (attempt $attempt):" >&2
    tail -n 5 "$log" >&2 || true
  done
  echo "redis.sh: could not start a TLS redis-server" >&2
  return 1
}

# Closes the TLS fixture's input, which makes it stop its servers and exit; kills it if it
# has not within 10 s.
redis__stop_fixture() {
  local i
  exec {REDIS__FIXTURE_FD}>&-
  for i in $(seq 1 200); do
    kill -0 "$REDIS__FIXTURE_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$REDIS__FIXTURE_PID" 2>/dev/null || true
  wait "$REDIS__FIXTURE_PID" 2>/dev/null || true
}

# Starts a TLS-only Redis Cluster and Sentinel group with the test support crate's
# tls_fixture (built by the caller: cargo build -p redmutex-tests --bin tls_fixture) and
# exports the variables it prints (REDMUTEX_TEST_TLS_CLUSTER_URL, REDMUTEX_TEST_TLS_SENTINEL_URL,
# REDMUTEX_TEST_TLS_TOPOLOGY_CA, REDMUTEX_TEST_TLS_TOPOLOGY_OTHER_CA); none when redis-server
# has no TLS. The fixture runs until its standard input, a pipe this shell holds, closes at
# exit. Called directly, never in $(...).
redis_start_tls_topologies() {
  local fixture=${CARGO_TARGET_DIR:-target}/debug/tls_fixture line i
  local out="$REDIS_DIR/tls-fixture.out"
  mkfifo "$REDIS_DIR/tls-fixture.in"
  "$fixture" <"$REDIS_DIR/tls-fixture.in" >"$out" 2>"$REDIS_DIR/tls-fixture.err" &
  REDIS__FIXTURE_PID=$!
  exec {REDIS__FIXTURE_FD}>"$REDIS_DIR/tls-fixture.in"
  redis_on_exit redis__stop_fixture
  for i in $(seq 1 1200); do
    grep -qx READY "$out" 2>/dev/null && break
    if ! kill -0 "$REDIS__FIXTURE_PID" 2>/dev/null; then
      echo "redis.sh: the TLS fixture exited:" >&2
      cat "$REDIS_DIR/tls-fixture.err" >&2 || true
      return 1
    fi
    sleep 0.05
  done
  grep -qx READY "$out" || { echo "redis.sh: the TLS fixture is not ready after 60 s" >&2; return 1; }
  while IFS= read -r line; do
    case "$line" in
      REDMUTEX_TEST_TLS_*=*) export "${line?}" ;;
      SKIPPED:*) echo "redis.sh: $line" >&2 ;;
    esac
  done <"$out"
}

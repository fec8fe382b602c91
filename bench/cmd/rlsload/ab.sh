#!/usr/bin/env bash
# Compares builds of sluice serve on Redis, the exact floor and the
# INCRBY + PEXPIRE pair (rlsload floor-grpc and pair-grpc) in turn
# under one load on one redis-server of the script's own, for a few rounds:
# quicker than run.sh when what changed is the store. Each row: Redis's
# command time per request and per script run (INFO commandstats: FCALL,
# EVALSHA, EVAL; INCRBY and PEXPIRE for the pair, whose "run" is one
# INCRBY), the requests a run carried, and redis-server's and the
# server's CPU per request (utime + stime from /proc over the load).
# Compare rows of one round: the machine's speed moves between rounds.
#
#	bench/cmd/rlsload/ab.sh main=/tmp/sluice-main new=/tmp/sluice-new
#	LOAD=json R=4 D=5s bench/cmd/rlsload/ab.sh a=/tmp/sluice-a b=/tmp/sluice-b
#	CONFIG=/tmp/gcra.yaml bench/cmd/rlsload/ab.sh a=/tmp/sluice-a b=/tmp/sluice-b
#	bench/cmd/rlsload/ab.sh new=/tmp/sluice-new floor   # beside rlsload floor-grpc
#	LOAD=json bench/cmd/rlsload/ab.sh new=/tmp/sluice-new floor pair   # and the INCRBY + PEXPIRE pair
#	bench/cmd/rlsload/ab.sh new=/tmp/sluice-new envoy=$(go env GOPATH)/bin/service_cmd   # and envoyproxy/ratelimit
#	REDIS_CPU=1 taskset -c 0 bench/cmd/rlsload/ab.sh ...  # Redis on a core of its own
#	SERVERS_GOMAXPROCS=1 bench/cmd/rlsload/ab.sh ...  # every contender with GOMAXPROCS=1
#
# LOAD is grpc (rlsload grpc -c 32, the default) or json (wrk -t2 -c32,
# POST /json); D each load's length (5s); R the rounds (3); CONFIG sluice's
# policy (bench.yaml); WARM a load of that length, not counted, just before
# each row (none by default): leases idle between rows expire, so that
# without it each row measures their start, with it their steady state.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh # scratch, wait_port, ticks, cmdstat, servers_env
export PATH="$PATH:/usr/local/go/bin"
load=${LOAD:-grpc} d=${D:-5s} rounds=${R:-3} config=${CONFIG:-bench.yaml} base=${PORT_BASE:-18180} warm=${WARM:-}
[ $# -gt 0 ] || { echo "usage: ab.sh NAME=SLUICE_BINARY... [envoy=SERVICE_CMD] [floor] [pair]" >&2; exit 2; }
case $load in grpc | json) ;; *) echo "LOAD: grpc or json" >&2; exit 2 ;; esac
[ $load = grpc ] || command -v wrk >/dev/null || { echo "wrk is missing (Debian: apt-get install wrk)" >&2; exit 1; }

servers_env # srv_env: SERVERS_GOMAXPROCS for every contender
scratch
go build -o "$tmp/rlsload" .

rport=$base
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.out" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
redis_url=redis://127.0.0.1:$rport/0
wait_port "127.0.0.1:$rport"
[ -z "${REDIS_CPU:-}" ] || taskset -a -p -c "$REDIS_CPU" "$redis_pid" >/dev/null

# Each contender serves gRPC on port+1 and HTTP on port.
names=() port=$((base + 1))
declare -A pid addr kind
for a in "$@"; do
  name=${a%%=*}
  [ -z "${kind[$name]:-}" ] || { echo "$name: named twice" >&2; exit 2; }
  kind[$name]=sluice
  if [ "$a" = floor ] || [ "$a" = pair ]; then
    kind[$name]=$a
    "${srv_env[@]}" "$tmp/rlsload" "$a-grpc" -addr "127.0.0.1:$((port + 1))" -http "127.0.0.1:$port" -redis "$redis_url" &
  elif [ "$name" = envoy ]; then
    # envoyproxy/ratelimit itself, on the same policy (its format, without
    # sluice's forward_auth, nor a limit's lease: line, which it refuses)
    # and the same redis-server.
    kind[$name]=envoy
    bin=${a#*=}
    [ -x "$bin" ] || { echo "$a: want envoy=BINARY, envoyproxy/ratelimit's service_cmd" >&2; exit 2; }
    mkdir -p "$tmp/runtime/ratelimit/config"
    sed -e '/^forward_auth:/,$d' -e '/^[[:space:]]*lease:[[:space:]]*{.*}[[:space:]]*$/d' "$config" >"$tmp/runtime/ratelimit/config/config.yaml"
    "${srv_env[@]}" USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
      RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
      HOST=127.0.0.1 PORT="$port" GRPC_HOST=127.0.0.1 GRPC_PORT="$((port + 1))" \
      DEBUG_HOST=127.0.0.1 DEBUG_PORT="$((port + 1000))" "$bin" >"$tmp/$name.out" 2>&1 &
  else
    bin=${a#*=}
    [ "$name" != "$a" ] && [ -x "$bin" ] || { echo "$a: want NAME=BINARY, an executable sluice" >&2; exit 2; }
    "${srv_env[@]}" "$bin" serve --config "$config" --http "127.0.0.1:$port" --grpc "127.0.0.1:$((port + 1))" --admin '' --poll 0 --redis "$redis_url" >"$tmp/$name.out" 2>&1 &
  fi
  pids+=($!)
  names+=("$name") pid[$name]=$! addr[$name]=127.0.0.1:$port
  wait_port "127.0.0.1:$port"
  wait_port "127.0.0.1:$((port + 1))"
  port=$((port + 2))
done

# send_load sends the load to the contender at $1 for $2, and prints the
# load tool's report.
send_load() {
  if [ $load = grpc ]; then
    "$tmp/rlsload" grpc -addr "${1%:*}:$((${1#*:} + 1))" -c 32 -d "$2"
  else
    wrk -t2 -c32 -d"$2" -s json.lua "http://$1/json"
  fi
}

hz=$(getconf CLK_TCK)
echo "load: $load, $d a row${warm:+ after $warm of warm-up}, $rounds rounds; config $config; GOMAXPROCS ${SERVERS_GOMAXPROCS:-default}; redis-server pid $redis_pid"
for r in $(seq "$rounds"); do
  for name in "${names[@]}"; do
    a=${addr[$name]}
    cmds="fcall evalsha eval" runs="fcall evalsha eval"
    [ "${kind[$name]}" = pair ] && cmds="incrby pexpire" runs=incrby
    [ "${kind[$name]}" = envoy ] && cmds="incrby expire" runs=incrby
    [ -z "$warm" ] || send_load "$a" "$warm" >/dev/null
    u0=$(cmdstat usec $cmds) f0=$(cmdstat calls $runs)
    c0=$(ticks "${pid[$name]}") q0=$(ticks "$redis_pid")
    out=$(send_load "$a" "$d")
    if [ $load = grpc ]; then
      n=$(awk '/calls in/ {c = $2} /warm-up calls before/ {w = $4} END {print c + w}' <<<"$out")
    else
      n=$(awk '/requests in/ {print $1}' <<<"$out")
    fi
    u1=$(cmdstat usec $cmds) f1=$(cmdstat calls $runs)
    c1=$(ticks "${pid[$name]}") q1=$(ticks "$redis_pid")
    awk -v r="$r" -v name="$name" -v n="$n" -v u=$((u1 - u0)) -v f=$((f1 - f0)) -v c=$((c1 - c0)) -v q=$((q1 - q0)) -v hz="$hz" 'BEGIN {
      if (n == 0 || f == 0) { printf "round %d %-10s no requests\n", r, name; exit }
      printf "round %d %-10s requests %7d  cmd µs/request %.3f  requests/run %.1f  cmd µs/run %.1f  redis-server CPU µs/request %.2f  server CPU µs/request %.1f\n",
        r, name, n, u / n, n / f, u / f, q * 1e6 / hz / n, c * 1e6 / hz / n }'
  done
done

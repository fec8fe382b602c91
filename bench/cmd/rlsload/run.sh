#!/usr/bin/env bash
# Measures the rate-limit service in one run, beside bare servers that
# decide nothing, all on loopback:
#
#   wrk      GET /v1/auth and POST /json, on a bare Go HTTP handler and on
#            sluice (users.lua, json.lua)
#   rlsload  ShouldRateLimit, on a bare gRPC RLS server and on sluice
#   rlsload  ShouldRateLimit on `rlsload pair-grpc`, which decides as the
#            inexact peers do (envoyproxy/ratelimit): INCRBY + PEXPIRE,
#            pipelined, per request, on the same redis-server
#   rlsload  ShouldRateLimit on `rlsload floor-grpc`, which decides by the
#            least exact script (bench.FloorLibrary's fixed window: Redis
#            TIME and the clock once a run, an INCR a request), batched as
#            the store batches (one run out; its leader hands the queue to
#            the oldest waiter), so its runs are as long as sluice's
#   wrk      POST /json on the pair and on the floor (their -http), so that
#            sluice's POST /json is set beside them under the same load
#
# sluice runs twice, on the memory store and on the Redis store: a
# redis-server of the script's own on a free port, or REDIS_URL's. Each
# server is a process of its own, and each load its CPU: utime + stime
# from /proc/PID/stat, read before and after the load, divided by the
# requests it answered (for rlsload, with its 1000 warm-up calls). For
# sluice on Redis, redis-server's CPU per request is reported too (when
# REDIS_URL is given, only if it names a server on this host), and the
# time Redis spent in the commands the server sent per request (INFO
# commandstats: FCALL, EVALSHA and EVAL for sluice, whose script's own calls
# they include; INCRBY and PEXPIRE for the pair), which the summary sets
# beside the pair's, and how many requests a script run carried (the
# store's Calls ÷ Runs from sluice's /v1/stats, read with curl and jq; the
# floor's requests ÷ its FCALLs),
# and for each sluice row its garbage collections a second (Go's
# go_gc_duration_seconds_count on its /metrics, over the load's wall
# time). SLUICE_FLAGS are added to both sluice serve commands (for
# instance -gc-floor 0).
#
# The loads are wrk -t$T -c$C (1000 users in turn) and rlsload -c $C
# (32 ShouldRateLimit calls in flight over 2 connections, 1000 keys), one
# after the other, each for $D: 13 × D in all. The load generators share
# the machine with the servers; compare each row with the bare row of the
# same run. The summary's last column is sluice's CPU per request minus
# the bare server's of the same protocol.
#
#	bench/cmd/rlsload/run.sh                # D=10s C=32 T=2
#	D=5s C=64 bench/cmd/rlsload/run.sh
#	REDIS_URL=redis://127.0.0.1:6379/0 bench/cmd/rlsload/run.sh
#	PPROF=1 bench/cmd/rlsload/run.sh        # sluice serves /debug/pprof/ on its admin ports
#	SLUICE=/tmp/sluice-old bench/cmd/rlsload/run.sh   # that binary, not one built here
#	BARE_GOGC=1500 bench/cmd/rlsload/run.sh  # the bare servers with GOGC=1500
#	SLUICE_FLAGS='-gc-floor 0' bench/cmd/rlsload/run.sh  # sluice without its GC floor
#	REDIS_NICE=-10 bench/cmd/rlsload/run.sh  # its redis-server reniced (root)
#	REDIS_CPU=1 taskset -c 0 bench/cmd/rlsload/run.sh  # its redis-server alone on CPU 1
#	SERVERS_GOMAXPROCS=1 bench/cmd/rlsload/run.sh  # every server (not the loads) with GOMAXPROCS=1
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh # scratch, wait_port, ticks, cmdstat, servers_env
export PATH="$PATH:/usr/local/go/bin"
d=${D:-10s}
c=${C:-32}
t=${T:-2}
base=${PORT_BASE:-18080}
command -v wrk >/dev/null || { echo "wrk is missing (Debian: apt-get install wrk)" >&2; exit 1; }
servers_env # srv_env: SERVERS_GOMAXPROCS for every server (sluice, bare, pair, floor)
for tool in curl jq; do command -v $tool >/dev/null || { echo "$tool is missing (Debian: apt-get install $tool)" >&2; exit 1; }; done

scratch

if [ -n "${SLUICE:-}" ]; then
  cp "$SLUICE" "$tmp/sluice"
else
  (cd ../../.. && go build -o "$tmp/sluice" ./cmd/sluice) # in the main module
fi
go build -o "$tmp/rlsload" .

redis_pid=
redis_url=${REDIS_URL:-}
if [ -z "$redis_url" ]; then
  command -v redis-server >/dev/null || { echo "redis-server is missing (Debian: apt-get install redis-server), or give REDIS_URL" >&2; exit 1; }
  rport=$((base + 9))
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.out" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  redis_url=redis://127.0.0.1:$rport/0
else
  # Its process, if it runs on this host.
  if p=$(redis-cli -u "$redis_url" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p') && [ -n "$p" ] && [ -r "/proc/$p/stat" ]; then
    redis_pid=$p
  fi
fi

# Ports: sluice on memory (HTTP, gRPC, admin), sluice on Redis (same),
# the bare HTTP and gRPC servers.
mem_http=127.0.0.1:$base mem_grpc=127.0.0.1:$((base + 1)) mem_admin=127.0.0.1:$((base + 2))
red_http=127.0.0.1:$((base + 3)) red_grpc=127.0.0.1:$((base + 4)) red_admin=127.0.0.1:$((base + 5))
bare_http=127.0.0.1:$((base + 6)) bare_grpc=127.0.0.1:$((base + 7)) pair_grpc=127.0.0.1:$((base + 8))
floor_grpc=127.0.0.1:$((base + 10)) # base + 9 is the script's redis-server
pair_http=127.0.0.1:$((base + 11)) floor_http=127.0.0.1:$((base + 12))
sflags=() # what both sluice serve commands add
[ -n "${PPROF:-}" ] && sflags=(-pprof)
read -ra extra <<<"${SLUICE_FLAGS:-}"
sflags+=(${extra[@]+"${extra[@]}"})
"${srv_env[@]}" "$tmp/sluice" serve --config bench.yaml --http "$mem_http" --grpc "$mem_grpc" --admin "$mem_admin" --poll 0 "${sflags[@]}" >"$tmp/mem.out" 2>&1 &
mem_pid=$!
pids+=("$mem_pid")
# BARE_GOGC, if set, is the bare servers' GOGC: 1500 is what sluice
# serve's -gc-floor sets for a live heap under 4 MiB, for a comparison on
# the same footing.
bare_env=("${srv_env[@]}")
[ -n "${BARE_GOGC:-}" ] && bare_env+=(GOGC="$BARE_GOGC")
"${bare_env[@]}" "$tmp/rlsload" bare-http -addr "$bare_http" &
bare_http_pid=$!
pids+=("$bare_http_pid")
"${bare_env[@]}" "$tmp/rlsload" bare-grpc -addr "$bare_grpc" &
bare_grpc_pid=$!
pids+=("$bare_grpc_pid")
[ -n "${REDIS_URL:-}" ] || wait_port "127.0.0.1:$rport"
# REDIS_NICE=-10 renices the script's redis-server (root only): commandstats
# counts a command's wall time, and on cores shared with the servers and
# the loads a long script run is preempted more often than an INCRBY.
if [ -n "${REDIS_NICE:-}" ] && [ -n "$redis_pid" ]; then renice -n "$REDIS_NICE" -p "$redis_pid" >/dev/null; fi
# REDIS_CPU pins the script's redis-server (all its threads) to that CPU;
# with the script itself under taskset on the others, Redis has a core of
# its own, as BenchmarkRedis's pinned figures do, and its commands' time
# is not inflated by sharing one.
if [ -n "${REDIS_CPU:-}" ] && [ -n "$redis_pid" ]; then taskset -a -p -c "$REDIS_CPU" "$redis_pid" >/dev/null; fi
"${srv_env[@]}" "$tmp/sluice" serve --config bench.yaml --http "$red_http" --grpc "$red_grpc" --admin "$red_admin" --poll 0 --redis "$redis_url" "${sflags[@]}" >"$tmp/redis-sluice.out" 2>&1 &
red_pid=$!
pids+=("$red_pid")
"${srv_env[@]}" "$tmp/rlsload" pair-grpc -addr "$pair_grpc" -http "$pair_http" -redis "$redis_url" &
pair_pid=$!
pids+=("$pair_pid")
"${srv_env[@]}" "$tmp/rlsload" floor-grpc -addr "$floor_grpc" -http "$floor_http" -redis "$redis_url" &
floor_pid=$!
pids+=("$floor_pid")
for a in "$mem_http" "$mem_grpc" "$red_http" "$red_grpc" "$bare_http" "$bare_grpc" "$pair_grpc" "$floor_grpc" "$pair_http" "$floor_http"; do wait_port "$a"; done

hz=$(getconf CLK_TCK)

# runstats: sluice on Redis's requests sent and script runs, from its
# admin /v1/stats.
runstats() {
  curl -fsS "http://$red_admin/v1/stats" | jq -r '.store.redis | "\(.Calls) \(.Runs)"' || true
}

# gcs ADDR: the collections of the sluice serving HTTP on ADDR so far.
gcs() {
  curl -fsS "http://$1/metrics" | awk '$1 == "go_gc_duration_seconds_count" {print $2}' || true
}

rows=()
# measure NAME PID KIND CMD...: runs the load, prints its output, and adds
# a summary row: requests/s, p50, p99, the CPU per request of PID (and of
# redis-server, Redis's command time, and the requests per script run,
# for the loads on Redis).
measure() {
  local name=$1 pid=$2 kind=$3
  shift 3
  local rp= cmds=
  [[ $name == *Redis* ]] && rp=$redis_pid cmds="fcall function evalsha eval"
  [[ $name == *pair* ]] && cmds="incrby pexpire"
  [[ $name == *floor* ]] && cmds="fcall"
  echo
  echo "== $name: $*"
  local c0 r0=0 u0=0 c1 r1=0 u1=0 s0= s1= g0= g1= w0 w1 out haddr=
  [[ $name == "sluice memory"* ]] && haddr=$mem_http
  [[ $name == "sluice Redis"* ]] && haddr=$red_http
  [ -n "$haddr" ] && g0=$(gcs "$haddr")
  w0=$(date +%s.%N)
  c0=$(ticks "$pid")
  [ -n "$rp" ] && r0=$(ticks "$rp")
  [ -n "$cmds" ] && u0=$(cmdstat usec $cmds)
  [[ $name == "sluice Redis"* ]] && s0=$(runstats)
  local f0= f1=
  [[ $name == *floor* ]] && f0=$(cmdstat calls fcall)
  out=$("$@")
  [ -n "$f0" ] && f1=$(cmdstat calls fcall)
  c1=$(ticks "$pid")
  [ -n "$rp" ] && r1=$(ticks "$rp")
  [ -n "$cmds" ] && u1=$(cmdstat usec $cmds)
  [ -n "$s0" ] && s1=$(runstats)
  w1=$(date +%s.%N)
  [ -n "$g0" ] && g1=$(gcs "$haddr")
  echo "$out"
  local n rps p50 p99
  if [ "$kind" = wrk ]; then
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    rps=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    if grep -q 'Non-2xx' <<<"$out"; then echo "!! $name: some answers were not 2xx" >&2; fi
  else
    n=$(awk '/calls in/ {c = $2} /warm-up calls before/ {w = $4} END {print c + w}' <<<"$out")
    rps=$(awk '/requests\/s/ {print $2}' <<<"$out")
    p50=$(awk '/latency p50/ {print $3}' <<<"$out")
    p99=$(awk '/latency p50/ {print $7}' <<<"$out")
  fi
  local cpu rcpu=- cmd=-
  cpu=$(awk -v a="$c0" -v b="$c1" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.1f", (b - a) * 1e6 / hz / n}')
  [ -n "$rp" ] && rcpu=$(awk -v a="$r0" -v b="$r1" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.1f", (b - a) * 1e6 / hz / n}')
  [ -n "$cmds" ] && cmd=$(awk -v a="$u0" -v b="$u1" -v n="$n" 'BEGIN {printf "%.2f", (b - a) / n}')
  local per=-
  [ -n "$f1" ] && per=$(awk -v a="$f0" -v b="$f1" -v n="$n" 'BEGIN {if (b > a) printf "%.1f", n / (b - a); else printf "-"}')
  [ -n "$s1" ] && per=$(awk -v a="$s0" -v b="$s1" 'BEGIN {split(a, x, " "); split(b, y, " "); if (y[2] > x[2]) printf "%.1f", (y[1] - x[1]) / (y[2] - x[2]); else printf "-"}')
  local gps=-
  [ -n "$g1" ] && gps=$(awk -v a="$g0" -v b="$g1" -v t0="$w0" -v t1="$w1" 'BEGIN {printf "%.0f", (b - a) / (t1 - t0)}')
  rows+=("$name|$rps|$p50|$p99|$cpu|$rcpu|$cmd|$per|$gps")
}

echo "machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(go version | cut -d' ' -f3-), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
echo "redis: $redis_url${redis_pid:+ (pid $redis_pid)}"
echo "GOMAXPROCS of the servers: ${SERVERS_GOMAXPROCS:-default}"
echo "start: $(uptime)"
wrkargs=(-t"$t" -c"$c" -d"$d" --latency)
measure "bare HTTP, GET" "$bare_http_pid" wrk wrk "${wrkargs[@]}" -s users.lua "http://$bare_http/v1/auth"
measure "bare HTTP, POST" "$bare_http_pid" wrk wrk "${wrkargs[@]}" -s json.lua "http://$bare_http/json"
measure "bare gRPC" "$bare_grpc_pid" rlsload "$tmp/rlsload" grpc -addr "$bare_grpc" -c "$c" -d "$d"
for store in memory Redis; do
  if [ $store = memory ]; then pid=$mem_pid h=$mem_http g=$mem_grpc; else pid=$red_pid h=$red_http g=$red_grpc; fi
  measure "sluice $store, GET /v1/auth" "$pid" wrk wrk "${wrkargs[@]}" -s users.lua "http://$h/v1/auth"
  measure "sluice $store, POST /json" "$pid" wrk wrk "${wrkargs[@]}" -s json.lua "http://$h/json"
  measure "sluice $store, gRPC" "$pid" rlsload "$tmp/rlsload" grpc -addr "$g" -c "$c" -d "$d"
done
measure "INCRBY + PEXPIRE pair on Redis, gRPC" "$pair_pid" rlsload "$tmp/rlsload" grpc -addr "$pair_grpc" -c "$c" -d "$d"
measure "exact floor on Redis, gRPC" "$floor_pid" rlsload "$tmp/rlsload" grpc -addr "$floor_grpc" -c "$c" -d "$d"
measure "INCRBY + PEXPIRE pair on Redis, POST /json" "$pair_pid" wrk wrk "${wrkargs[@]}" -s json.lua "http://$pair_http/json"
measure "exact floor on Redis, POST /json" "$floor_pid" wrk wrk "${wrkargs[@]}" -s json.lua "http://$floor_http/json"
echo
echo "end: $(uptime)"

# The summary: sluice's CPU per request beside the bare server's of its
# protocol (GET, POST or gRPC) from this run.
echo
echo "| target | requests/s | p50 | p99 | server CPU µs/request | redis-server CPU µs/request | Redis command µs/request | requests per run | GCs/s | sluice − bare, µs/request |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
declare -A bare cmds rcpus
for r in "${rows[@]}"; do
  IFS='|' read -r name rps p50 p99 cpu rcpu cmd per gps <<<"$r"
  cmds[$name]=$cmd rcpus[$name]=$rcpu
  diff=-
  case $name in
  "bare HTTP, GET") bare[auth]=$cpu ;;
  "bare HTTP, POST") bare[json]=$cpu ;;
  "bare gRPC") bare[grpc]=$cpu ;;
  *pair* | *floor*) ;; # not sluice
  *auth*) diff=$(awk -v a="$cpu" -v b="${bare[auth]}" 'BEGIN {printf "%+.1f", a - b}') ;;
  *json*) diff=$(awk -v a="$cpu" -v b="${bare[json]}" 'BEGIN {printf "%+.1f", a - b}') ;;
  *gRPC*) diff=$(awk -v a="$cpu" -v b="${bare[grpc]}" 'BEGIN {printf "%+.1f", a - b}') ;;
  esac
  echo "| $name | $rps | $p50 | $p99 | $cpu | $rcpu | $cmd | $per | $gps | $diff |"
done
# Redis's command time per request under sluice and under the exact
# floor, as a multiple of the pair's in this run (the issue's target for
# sluice: at most 2×): the pair's under the same load (wrk's POST /json for
# the HTTP rows), and under the gRPC load. Then redis-server's whole CPU
# per request beside the pair's under the same load, when it is known:
# commandstats counts only the time inside commands, where a long script
# on shared cores is inflated more than an INCRBY.
pgrpc=${cmds["INCRBY + PEXPIRE pair on Redis, gRPC"]}
pjson=${cmds["INCRBY + PEXPIRE pair on Redis, POST /json"]}
echo
for name in "sluice Redis, GET /v1/auth" "sluice Redis, POST /json" "exact floor on Redis, POST /json" "sluice Redis, gRPC" "exact floor on Redis, gRPC"; do
  same=$pjson pair="INCRBY + PEXPIRE pair on Redis, POST /json"
  [[ $name == *gRPC ]] && same=$pgrpc pair="INCRBY + PEXPIRE pair on Redis, gRPC"
  awk -v n="$name" -v a="${cmds[$name]}" -v b="$same" -v g="$pgrpc" -v r="${rcpus[$name]}" -v rp="${rcpus[$pair]}" 'BEGIN {
    printf "%s: Redis command time %.2f µs/request, %.2f× the pair'"'"'s %.2f under the same load (%.2f× its %.2f under gRPC)", n, a, a / b, b, a / g, g
    if (r != "-" && rp != "-" && rp > 0) printf "; redis-server CPU %.1f µs/request, %.2f× the pair'"'"'s %.1f", r, r / rp, rp
    printf "\n"
  }'
done

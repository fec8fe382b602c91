#!/usr/bin/env bash
# Counts what a gRPC request costs sluice serve in system calls and
# context switches, on the memory store and then on the Redis store (a
# redis-server of this script's own), under run.sh's gRPC load: CPU,
# read and write system calls (/proc/PID/io), voluntary and involuntary
# context switches summed over the threads (/proc/PID/task/*/status), per
# request, and the Redis store's script runs per request (INFO
# commandstats). The Redis rows less the memory rows are the Redis client
# path's.
#
#	bench/cmd/rlsload/wakeups.sh          # D=8s C=32
#	SLUICE=/tmp/sluice-main bench/cmd/rlsload/wakeups.sh
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh # scratch
export PATH="$PATH:/usr/local/go/bin"
d=${D:-8s}
c=${C:-32}
base=${PORT_BASE:-18180}
command -v redis-server >/dev/null || { echo "redis-server is missing (Debian: apt-get install redis-server)" >&2; exit 1; }

scratch

if [ -n "${SLUICE:-}" ]; then
  cp "$SLUICE" "$tmp/sluice"
else
  (cd ../../.. && go build -o "$tmp/sluice" ./cmd/sluice)
fi
go build -o "$tmp/rlsload" .

rport=$((base + 9))
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
io() { awk '/^syscr/ {r = $2} /^syscw/ {w = $2} END {print r, w}' "/proc/$1/io"; }
csw() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {v += $2} /^nonvoluntary_ctxt_switches/ {n += $2} END {print v, n}'; }
hz=$(getconf CLK_TCK)

echo "start: $(uptime)"
for store in memory redis; do
  extra=()
  [ $store = redis ] && extra=(--redis "redis://127.0.0.1:$rport/0")
  grpc=127.0.0.1:$((base + 1))
  "$tmp/sluice" serve --config bench.yaml --http "127.0.0.1:$base" --grpc "$grpc" --admin '' --poll 0 "${extra[@]}" >"$tmp/$store.out" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/${grpc%:*}/${grpc#*:}") 2>/dev/null && break; sleep 0.1; done
  redis-cli -p "$rport" config resetstat >/dev/null
  t0=$(ticks "$pid"); read -r r0 w0 < <(io "$pid"); read -r v0 n0 < <(csw "$pid")
  out=$("$tmp/rlsload" grpc -addr "$grpc" -c "$c" -d "$d")
  t1=$(ticks "$pid"); read -r r1 w1 < <(io "$pid"); read -r v1 n1 < <(csw "$pid")
  n=$(awk '/calls in/ {c = $2} /warm-up calls before/ {w = $4} END {print c + w}' <<<"$out")
  runs=$(redis-cli -p "$rport" info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_(fcall|evalsha):/ {n += $3} END {print n + 0}')
  awk -v s=$store -v n="$n" -v t=$((t1 - t0)) -v hz="$hz" -v r=$((r1 - r0)) -v w=$((w1 - w0)) -v v=$((v1 - v0)) -v nv=$((n1 - n0)) -v runs="${runs:-0}" \
    'BEGIN {printf "%-6s %d requests: CPU %.1f µs, reads %.2f, writes %.2f, context switches %.2f voluntary + %.2f involuntary, per request; script runs %.3f per request\n", s, n, t * 1e6 / hz / n, r / n, w / n, v / n, nv / n, runs / n}'
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
echo "end: $(uptime)"

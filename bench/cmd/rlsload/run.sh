#!/usr/bin/env bash
# Measures the rate-limit service in one run, beside bare servers that do
# nothing, all on loopback with the memory store:
#
#   wrk      on a bare Go HTTP handler, then on sluice's GET /v1/auth
#   rlsload  on a bare gRPC RLS server, then on sluice's ShouldRateLimit
#
# Each gets the same concurrency and duration. The bare servers show what
# net/http, gRPC and the machine cost on their own; the difference is
# sluice's. About 4 × D.
#
#	bench/cmd/rlsload/run.sh               # D=10s C=32 T=2
#	D=5s C=64 bench/cmd/rlsload/run.sh
#	REDIS_URL=redis://127.0.0.1:6379/0 bench/cmd/rlsload/run.sh   # sluice on the Redis store
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
d=${D:-10s}
c=${C:-32}
t=${T:-2}
base=${PORT_BASE:-18080}
command -v wrk >/dev/null || { echo "wrk is missing (Debian: apt-get install wrk)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

(cd ../../.. && go build -o "$tmp/sluice" ./cmd/sluice) # in the main module
go build -o "$tmp/rlsload" .

sl_http=127.0.0.1:$base sl_grpc=127.0.0.1:$((base + 1))
bare_http=127.0.0.1:$((base + 2)) bare_grpc=127.0.0.1:$((base + 3))
"$tmp/sluice" serve --config bench.yaml --http "$sl_http" --grpc "$sl_grpc" --poll 0 ${REDIS_URL:+--redis "$REDIS_URL"} >"$tmp/sluice.out" 2>"$tmp/sluice.err" &
pids+=($!)
"$tmp/rlsload" bare-http -addr "$bare_http" &
pids+=($!)
"$tmp/rlsload" bare-grpc -addr "$bare_grpc" &
pids+=($!)
for a in "$sl_http" "$sl_grpc" "$bare_http" "$bare_grpc"; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/${a%:*}/${a#*:}") 2>/dev/null && break
    sleep 0.1
  done
done

echo "machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(go version | cut -d' ' -f3-), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
echo
echo "== wrk -t$t -c$c -d$d --latency -s users.lua http://$bare_http/   (bare Go HTTP handler)"
wrk -t"$t" -c"$c" -d"$d" --latency -s users.lua "http://$bare_http/"
echo
echo "== wrk -t$t -c$c -d$d --latency -s users.lua http://$sl_http/v1/auth   (sluice forward auth)"
wrk -t"$t" -c"$c" -d"$d" --latency -s users.lua "http://$sl_http/v1/auth"
echo
echo "== rlsload grpc -addr $bare_grpc -c $c -d $d   (bare gRPC RLS)"
"$tmp/rlsload" grpc -addr "$bare_grpc" -c "$c" -d "$d"
echo
echo "== rlsload grpc -addr $sl_grpc -c $c -d $d   (sluice ShouldRateLimit)"
"$tmp/rlsload" grpc -addr "$sl_grpc" -c "$c" -d "$d"

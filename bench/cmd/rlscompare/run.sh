#!/usr/bin/env bash
# run.sh: envoyproxy/ratelimit and sluice side by side, asked the same
# sequence of requests (rlscompare), their answers compared.
#
# It builds envoyproxy/ratelimit from the Go module proxy into a temporary
# GOBIN (or takes RATELIMIT, a service_cmd binary already built), sluice
# from this repository, and starts, each on a redis-server of its own:
#
#   envoyproxy/ratelimit   with llm.yaml in its runtime directory
#   sluice (envoy mode)    under envoyproxy/ratelimit's very environment
#   sluice (memory)        sluice serve -config llm.yaml, its memory store,
#                          with -charge-per-descriptor as envoy mode sets it
#
# then prints each answer's overall_code and per-descriptor codes side by
# side, and exits 1 if any differs. STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
# if set, is given to envoyproxy/ratelimit and to sluice's envoy mode (and
# true drops -charge-per-descriptor from the memory one). Not part of CI:
# it needs redis-server and the module proxy.
#
#	bench/cmd/rlscompare/run.sh
#	ROUNDS=5 TOKENS=60 bench/cmd/rlscompare/run.sh
#	STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true bench/cmd/rlscompare/run.sh
#	PORT_BASE=29080 bench/cmd/rlscompare/run.sh   # ports PORT_BASE..PORT_BASE+10
set -euo pipefail
cd "$(dirname "$0")"
. ../rlsload/lib.sh

version=v1.4.1-0.20260122083618-3fb702589d36 # github.com/envoyproxy/ratelimit
base=${PORT_BASE:-19080}
stop=${STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT:-}
command -v redis-server >/dev/null || { echo "redis-server is missing (Debian: apt-get install redis-server)" >&2; exit 1; }

scratch

if [ -n "${RATELIMIT:-}" ]; then
  cp "$RATELIMIT" "$tmp/ratelimit"
else
  echo "building envoyproxy/ratelimit $version" >&2
  (cd "$tmp" && GOBIN="$tmp/bin" GOFLAGS=-mod=mod GOWORK=off go install "github.com/envoyproxy/ratelimit/src/service_cmd@$version")
  mv "$tmp/bin/service_cmd" "$tmp/ratelimit"
fi
(cd ../../.. && go build -o "$tmp/sluice" ./cmd/sluice)
go build -o "$tmp/rlscompare" .

# Ports: envoyproxy/ratelimit (HTTP, gRPC, debug), sluice in envoy mode
# (same), sluice on memory (same), and the two redis-servers.
rl_http=$base rl_grpc=$((base + 1)) rl_debug=$((base + 2))
se_http=$((base + 3)) se_grpc=$((base + 4)) se_debug=$((base + 5))
sm_http=$((base + 6)) sm_grpc=$((base + 7)) sm_admin=$((base + 8))
redis_rl=$((base + 9)) redis_se=$((base + 10))
for p in $redis_rl $redis_se; do
  redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis-$p.out" 2>&1 &
  pids+=($!)
done
wait_port "127.0.0.1:$redis_rl"
wait_port "127.0.0.1:$redis_se"

# envoyproxy/ratelimit's runtime directory: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
mkdir -p "$tmp/runtime/ratelimit/config"
cp llm.yaml "$tmp/runtime/ratelimit/config/llm.yaml"

# envoy_env NAME REDIS_PORT HTTP GRPC DEBUG: the environment envoyproxy/ratelimit
# is deployed with, and nothing else.
envoy_env() {
  env_list=(env -i PATH="$PATH" HOME="$tmp"
    RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false
    USE_STATSD=false LOG_LEVEL=warn BACKEND_TYPE=redis
    REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$1"
    HOST=127.0.0.1 PORT="$2" GRPC_HOST=127.0.0.1 GRPC_PORT="$3" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$4")
  if [ -n "$stop" ]; then env_list+=(STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="$stop"); fi
}
envoy_env "$redis_rl" "$rl_http" "$rl_grpc" "$rl_debug"
"${env_list[@]}" "$tmp/ratelimit" >"$tmp/ratelimit.out" 2>&1 &
pids+=($!)
envoy_env "$redis_se" "$se_http" "$se_grpc" "$se_debug"
"${env_list[@]}" "$tmp/sluice" serve >"$tmp/sluice-envoy.out" 2>&1 &
pids+=($!)
perdesc=(-charge-per-descriptor)
case "$stop" in true | True | TRUE | 1 | t | T) perdesc=() ;; esac
# Its environment holds no variable of envoyproxy/ratelimit's, which would
# put it in envoy mode.
env -i PATH="$PATH" HOME="$tmp" "$tmp/sluice" serve -config llm.yaml -http "127.0.0.1:$sm_http" -grpc "127.0.0.1:$sm_grpc" -admin "127.0.0.1:$sm_admin" -poll 0 "${perdesc[@]}" >"$tmp/sluice-memory.out" 2>&1 &
pids+=($!)
for a in $rl_grpc $se_grpc $sm_grpc; do
  wait_port "127.0.0.1:$a" || { tail -n 20 "$tmp"/*.out >&2; exit 2; }
done

# The limits are per hour, in windows aligned to the hour: a sequence that
# straddles the hour's end would be counted in two.
s=$(($(date +%s) % 3600))
if [ "$s" -gt 3590 ]; then sleep $((3600 - s + 1)); fi

echo "envoyproxy/ratelimit $version, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=${stop:-(unset)}; sluice $(cd ../../.. && git describe --always --dirty 2>/dev/null || echo '?')"
status=0
"$tmp/rlscompare" -rounds "${ROUNDS:-20}" -tokens "${TOKENS:-150}" \
  envoyproxy/ratelimit="127.0.0.1:$rl_grpc" sluice-envoy-mode="127.0.0.1:$se_grpc" sluice-memory="127.0.0.1:$sm_grpc" || status=$?
if [ "$status" -eq 2 ]; then tail -n 20 "$tmp"/*.out >&2; fi
exit "$status"

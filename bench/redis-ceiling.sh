#!/usr/bin/env bash
# The ceiling of one request per script run on this machine, for
# BENCHMARKS.md's Redis section: redis-benchmark's EVALSHA throughput at 1,
# 32 and 256 clients, for a trivial script and for go-redis/redis_rate v10's
# allowN script with its own arguments over 10,000 keys, against a
# redis-server of its own on a free port. (sluice's script takes its
# requests as one packed binary string, which redis-benchmark cannot send.)
#
#	bench/redis-ceiling.sh
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"

# redis_rate's script, as the module the benchmarks use holds it.
dir=$(go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10)
script=$(sed -n '/^var allowN = redis.NewScript(`/,/^`)/p' "$dir/lua.go" | sed '1d;$d')
[ -n "$script" ] || { echo "redis-ceiling: allowN script not found in $dir/lua.go" >&2; exit 1; }

tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
# A port nobody listens on: a redis-server that cannot bind exits.
for _ in $(seq 20); do
  port=$((20000 + RANDOM % 20000))
  redis-cli -p "$port" ping >/dev/null 2>&1 && continue
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break 2; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  pid=
done
[ -n "$pid" ] || { echo "redis-ceiling: could not start redis-server" >&2; cat "$tmp/log" >&2; exit 1; }

trivial=$(redis-cli -p "$port" SCRIPT LOAD "return 1")
allown=$(redis-cli -p "$port" SCRIPT LOAD "$script")
echo "clients,return 1 (requests/s),redis_rate allowN (requests/s)"
for c in 1 32 256; do
  t=$(redis-benchmark -p "$port" -c "$c" -n 100000 --csv EVALSHA "$trivial" 0 | tail -1 | cut -d, -f2 | tr -d '"')
  r=$(redis-benchmark -p "$port" -c "$c" -n 100000 -r 10000 --csv EVALSHA "$allown" 1 'rate:user__rand_int__' 1000 1000 1 1 | tail -1 | cut -d, -f2 | tr -d '"')
  echo "$c,$t,$r"
done

#!/usr/bin/env bash
# BENCHMARKS.md's Redis figures: BenchmarkRedis, ROUNDS rounds (default 3)
# of -count 1, with the redis-server the benchmark starts pinned to CPU
# REDIS_CPU (default 1) and the benchmark itself to DRIVER_CPU (default 0),
# so that Redis has a core of its own, as far as the rest of the machine
# lets it. Keeps the raw output in redis-results.txt (git-ignored; OUT= to
# rename) and prints the load average before each round and benchstat's
# medians.
#
#	bench/redis.sh
#	REDIS_NICE=-10 bench/redis.sh                                 # its redis-server reniced (root)
#	BENCH_REDIS_ALGS=fixed_window,gcra ROUNDS=1 bench/redis.sh   # a quick look
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
rounds=${ROUNDS:-3}
out=${OUT:-redis-results.txt}
benchtime=${BENCHTIME:-2s}
export BENCH_REDIS_CPU=${REDIS_CPU:-1}
# REDIS_NICE=-10 renices redis-server too, on a machine shared with other
# work (root only): see BenchmarkRedis.
[ -n "${REDIS_NICE:-}" ] && export BENCH_REDIS_NICE=$REDIS_NICE
driver=${DRIVER_CPU:-0}

go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
benchstat="$(go env GOPATH)/bin/benchstat"
[ -n "$(go env GOBIN)" ] && benchstat="$(go env GOBIN)/benchstat"

echo "machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(go version | cut -d' ' -f3-), $(redis-server --version | cut -d' ' -f3)"
echo "command: $rounds × taskset -c $driver bench.test -test.bench '^BenchmarkRedis\$' -test.benchtime $benchtime, redis-server on CPU $BENCH_REDIS_CPU${REDIS_NICE:+, nice $REDIS_NICE}"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/bench.test" .
: >"$out"
for i in $(seq "$rounds"); do
  echo "round $i of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  taskset -c "$driver" "$bin/bench.test" -test.run '^$' -test.bench '^BenchmarkRedis$' \
    -test.benchtime "$benchtime" -test.count 1 -test.timeout 0 2>/dev/null | grep -v '^redis: ' >>"$out"
done
echo "after, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
"$benchstat" "$out"

#!/usr/bin/env bash
# Regenerates the tables of BENCHMARKS.md: runs every benchmark of this
# module, keeps the raw output in results.txt (git-ignored), and prints the
# machine, the benchstat table and the ratio tables. About 15 minutes.
#
# Ten samples of each benchmark, taken as ten rounds of -count 1 rather than
# one -count 10: a round runs every contender once, so a burst of load from
# elsewhere on the machine lands on all of them alike instead of on the ten
# samples of one. ROUNDS=1 COUNT=10 gives the plain -count 10.
#
#	bench/run.sh                                          # all of it
#	BENCH='AllowN(ow)?$' bench/run.sh                    # BENCHMARKS.md's single-key tables
#	ROUNDS=3 BENCH='AllowN$/traffic=allowed' bench/run.sh # a quicker look
set -euo pipefail
cd "$(dirname "$0")"

export PATH="$PATH:/usr/local/go/bin"
rounds=${ROUNDS:-10}
count=${COUNT:-1}
bench=${BENCH:-.}
out=${OUT:-results.txt}

# benchstat at a fixed version, so the table's format does not drift.
go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
benchstat="$(go env GOPATH)/bin/benchstat"
[ -n "$(go env GOBIN)" ] && benchstat="$(go env GOBIN)/benchstat"

echo "machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(go version | cut -d' ' -f3-)"
echo "command: $rounds × go test -run '^\$' -bench '$bench' -count $count ."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/bench.test" .
: >"$out"
for i in $(seq "$rounds"); do
  echo "round $i of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bin/bench.test" -test.run '^$' -test.bench "$bench" -test.count "$count" -test.timeout 0 >>"$out"
done
echo
"$benchstat" "$out"
echo
"$benchstat" -format csv "$out" 2>/dev/null | go run ./ratios

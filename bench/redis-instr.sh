#!/bin/bash
# redis-instr.sh counts the instructions redis-server executes per decision
# of the Redis store (BenchmarkRedis's sluice rows), under valgrind's
# callgrind: Ir(3N decisions) - Ir(N), divided by 2N, so that start-up and
# the benchmark's set-up cancel out. A count does not slow down with the
# machine's other work as a time does: the way to compare two versions of
# take.lua on a busy machine.
#
#   (cd bench && go test -c -o /tmp/new.test .), likewise /tmp/old.test in a worktree of the other commit
#   bench/redis-instr.sh /tmp/old.test /tmp/new.test
#
# It prints a row per algorithm and run size and, per binary in the order
# given, the median over ROUNDS interleaved rounds of the instructions per
# decision in the script's commands (FCALL or EVALSHA, with the Redis
# commands they call: cmd), then in all of redis-server (all). Both still
# move from run to run: a key's state expires by the wall clock, and
# valgrind's pace decides how many are found, so compare medians.
# ALGS (default: all six), BATCHES (16 64), N (10000) and ROUNDS (3) choose
# the rows; KEEP=dir keeps the callgrind files for callgrind_annotate.
# Needs valgrind (Debian: apt-get install valgrind) and redis-server.
set -eu
if [ $# -eq 0 ]; then
	echo "usage: $0 X.test [Y.test ...]  (built with: go test -c -o X.test ./bench)" >&2
	exit 2
fi
command -v valgrind >/dev/null || { echo "$0: valgrind is missing (Debian: apt-get install valgrind)" >&2; exit 1; }
server=$(command -v redis-server) || { echo "$0: redis-server is missing" >&2; exit 1; }
ALGS=${ALGS:-token_bucket leaky_bucket gcra fixed_window sliding_log sliding_counter}
BATCHES=${BATCHES:-16 64}
N=${N:-10000}
ROUNDS=${ROUNDS:-3}

dir=$(mktemp -d)
trap 'if [ -f "$dir/pid" ]; then kill -TERM "$(cat "$dir/pid")" 2>/dev/null; fi; rm -rf "$dir"' EXIT
# The benchmark starts redis-server from PATH and kills it when done; the
# wrapper runs it under callgrind and notes valgrind's pid, which this
# script ends with SIGTERM so that callgrind writes its counts.
cat >"$dir/redis-server" <<EOF
#!/bin/bash
valgrind --tool=callgrind --callgrind-out-file="$dir/out.%p" "$server" "\$@" 2>>"$dir/valgrind.log" &
echo \$! >"$dir/pid"
wait
EOF
chmod +x "$dir/redis-server"

# ir runs binary $1's benchmark for alg $2, batch $3, over $4 decisions,
# and prints the instructions redis-server executed.
ir() {
	local pid try
	# Under valgrind a run may outlast the store's timeout on a busy
	# machine: such a benchmark fails, and is run again.
	for try in 1 2 3 4; do
		rm -f "$dir"/out.* "$dir/pid"
		PATH="$dir:$PATH" "$1" -test.run '^$' -test.bench "^BenchmarkRedis\$/store=sluice/alg=$2/batch=$3\$" \
			-test.benchtime "${4}x" -test.count 1 >"$dir/bench.out" 2>&1 && try=0
		pid=$(cat "$dir/pid")
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		[ "$try" = 0 ] && break
		[ "$try" = 4 ] && { echo "$0: $1 failed:" >&2; cat "$dir/bench.out" >&2; exit 1; }
	done
	if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$dir"/out.* "$KEEP/$(basename "$1").$2.$3.$4"; fi
	callgrind_annotate --inclusive=yes --threshold=100 "$dir"/out.* | awk '
		{ gsub(",", "", $1) }
		/PROGRAM TOTALS/ { all = $1 }
		/:(fcallCommand|evalCommand|evalShaCommand) / { cmd += $1 }
		END { print cmd + 0, all + 0 }'
}

printf 'alg\tbatch'
for bin in "$@"; do printf '\tcmd:%s\tall:%s' "$(basename "$bin")" "$(basename "$bin")"; done
printf '\n'
for alg in $ALGS; do
	for batch in $BATCHES; do
		: >"$dir/rows"
		for round in $(seq "$ROUNDS"); do
			i=0
			for bin in "$@"; do
				i=$((i + 1))
				a=$(ir "$bin" "$alg" "$batch" "$N")
				b=$(ir "$bin" "$alg" "$batch" $((3 * N)))
				echo "$i $a $b" >>"$dir/rows"
			done
		done
		# the median of the rounds, per binary
		sort -n -k1,1 "$dir/rows" | awk -v n="$N" -v alg="$alg" -v batch="$batch" '
			{ k = $1; c[k, ++m[k]] = ($4 - $2) / (2 * n); a[k, m[k]] = ($5 - $3) / (2 * n); if (k > nb) nb = k }
			function med(x, k, cnt,   i, j, t, v) {
				for (i = 1; i <= cnt; i++) v[i] = x[k, i]
				for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
				return cnt % 2 ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2
			}
			END {
				printf "%s\t%s", alg, batch
				for (k = 1; k <= nb; k++) printf "\t%.0f\t%.0f", med(c, k, m[k]), med(a, k, m[k])
				printf "\n"
			}'
	done
done

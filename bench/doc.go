// Package bench measures sluice against its peers in one run: the same
// work, one `go test -bench` invocation, compared with benchstat. It is a
// separate module so that the peers' dependencies never reach the main
// module, which needs only the standard library.
//
// The benchmarks live in the test files; run.sh runs them ten times over,
// prints the benchstat table, and prints the ratio tables quoted in
// BENCHMARKS.md (computed by ./ratios from benchstat's medians).
//
// The single-key families:
//
//   - BenchmarkAllowN: one key, time passed in. Every contender gets the
//     same precomputed sequence of times, so no clock is read in the loop
//     and the limiters make the same decisions (allowed/op shows it).
//   - BenchmarkAllowNow: one key, the clock read inside. For the peers
//     without a time parameter (go.uber.org/ratelimit, sethvargo/go-limiter,
//     throttled), beside sluice and x/time/rate calling time.Now themselves.
//
// keyed_test.go and redis_test.go measure the keyed stores. redis.sh runs
// BenchmarkRedis alone, three rounds, with the redis-server it starts
// pinned to a core of its own and the benchmark to the other, for
// BENCHMARKS.md's Redis figures: Redis's time per decision, from INFO
// commandstats, per algorithm and run size, beside the peers'.
package bench

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testredis"
	sredis "github.com/sluicehq/sluice/redis"
)

// BenchmarkRedis measures what a decision costs Redis: the Redis store,
// per algorithm, at 1, 16 and 64 requests per script run, beside two
// contenders on the same redis-server in the same run: a pipelined
// INCRBY + PEXPIRE pair per decision (store=pair: what the inexact
// fixed-window limiters, envoyproxy/ratelimit among them, pay; it counts
// denied requests too) and go-redis/redis_rate v10 (GCRA); and, for the
// fixed window, GCRA and the sliding log at 16 and 64 a run, the least
// script that keeps the store's guarantees (store=floor, see
// FloorLibrary). Keys are spread
// over 10000 entities at 1000 per second each, so nearly every request is
// allowed.
//
// Besides ns/op it reports decisions/s, cmd-µs (Redis's own time in the
// commands the client sent, from INFO commandstats: the delta of their
// usec over the run divided by the decisions; a script's includes the
// commands it calls), server-cpu-µs (redis-server's user+system CPU per
// decision, from INFO cpu: commands, parsing and network), client-cpu-µs,
// the callers' p50 and p99, and for sluice the requests per script run.
//
// batch=B bounds a run to B requests (sredis.WithMaxBatch); the callers
// are 32, or 4·B when more: a run fills with the requests queued while
// the previous one is out, and two are out at once, so it takes about
// 4·B callers to fill runs of B; reqs/run shows how full they were. The
// contenders run at 32 and 64 callers.
//
// BENCH_REDIS_CPU=N pins the redis-server the benchmark starts to CPU N
// (taskset -a -p), so that it has a core of its own when the benchmark is
// run under taskset on another (bench/redis.sh does both).
// BENCH_REDIS_NICE=N renices it too, so that on a machine shared with
// other work it is less often preempted in the middle of a script, whose
// time commandstats counts on the wall clock. BENCH_REDIS_ALGS=fixed_window,gcra
// limits the algorithms.
//
//	go test -run '^$' -bench '^BenchmarkRedis$' -benchtime 2s
func BenchmarkRedis(b *testing.B) {
	addr := testredis.Start(b)
	pinRedis(b, addr)
	limit := sluice.PerSecond(1000)
	algs := sluice.Algos()
	if v := os.Getenv("BENCH_REDIS_ALGS"); v != "" {
		algs = nil
		for _, a := range strings.Split(v, ",") {
			algs = append(algs, sluice.Algo(a))
		}
	}
	// A run of the store is an FCALL (its library loaded by FUNCTION
	// LOAD), or without functions an EVALSHA (loaded by EVAL).
	script := []string{"fcall", "function", "evalsha", "eval"}
	for _, alg := range algs {
		rule := prepare(b, sluice.Rule{Name: "bench", Algorithm: alg, Limit: limit})
		for _, batch := range []int{1, 16, 64} {
			callers := max(32, 4*batch)
			b.Run(fmt.Sprintf("store=sluice/alg=%s/batch=%d", alg, batch), func(b *testing.B) {
				rc := benchClient(b, addr, callers)
				s, err := sredis.New(rc, sredis.WithPrefix(benchPrefix("b")),
					sredis.WithTimeout(time.Second), sredis.WithMaxBatch(batch))
				if err != nil {
					b.Fatal(err)
				}
				runRedis(b, rc, callers, script, func() func(key string) bool {
					checks := []sluice.Check{{Rule: rule}}
					out := make([]sluice.Decision, 1)
					return func(key string) bool {
						checks[0].Key = key
						if err := s.Take(context.Background(), time.Now(), checks, out); err != nil {
							b.Error(err)
						}
						return out[0].Allowed
					}
				})
				if st := s.Stats(); st.Runs > 0 {
					b.ReportMetric(float64(st.Calls)/float64(st.Runs), "reqs/run")
				}
			})
		}
	}
	for _, callers := range []int{32, 64} {
		contenders(b, addr, callers, limit)
	}
	floors(b, addr, algs)
}

// BenchmarkRedisLog measures what the sliding log costs Redis besides the
// one-unit path's allowed decisions that BenchmarkRedis measures, with
// the same figures, at 32 callers:
//
//   - load=denied: a rate of one a minute over BenchmarkRedis's 10000
//     keys, so that nearly every decision is a denial, with the store's
//     denial cache off (cache=off: every denial is Redis's to decide) and
//     on (cache=on, the default: a denial is answered in the process until
//     its RetryAfter);
//   - load=busy/cache=off: 100 a second over 100 keys, so that most
//     decisions are denials of a log of about 100 entries, which the
//     store's first read of it does not hold whole;
//   - load=caller-time: WithCallerTime at 1000 a second, every decision
//     allowed and on the script's general path.
//
// With redis-server on a core of its own, as bench/redis.sh runs
// BenchmarkRedis:
//
//	BENCH_REDIS_CPU=1 taskset -c 0 go test -run '^$' -bench '^BenchmarkRedisLog$' -benchtime 2s
func BenchmarkRedisLog(b *testing.B) {
	addr := testredis.Start(b)
	pinRedis(b, addr)
	const callers = 32
	script := []string{"fcall", "function", "evalsha", "eval"}
	loads := []struct {
		name  string
		limit sluice.Limit
		opts  []sredis.Option
		now   bool // pass time.Now(), for WithCallerTime
		keys  int  // the keys decided at, of the benchmark's, 0 for all
	}{
		{"load=denied/cache=off", sluice.PerMinute(1), []sredis.Option{sredis.WithDenyCache(0)}, false, 0},
		{"load=denied/cache=on", sluice.PerMinute(1), nil, false, 0},
		{"load=busy/cache=off", sluice.PerSecond(100), []sredis.Option{sredis.WithDenyCache(0)}, false, 100},
		{"load=caller-time", sluice.PerSecond(1000), []sredis.Option{sredis.WithCallerTime()}, true, 0},
	}
	for _, l := range loads {
		b.Run(l.name, func(b *testing.B) {
			rc := benchClient(b, addr, callers)
			opts := append([]sredis.Option{sredis.WithPrefix(benchPrefix("l")), sredis.WithTimeout(time.Second)}, l.opts...)
			s, err := sredis.New(rc, opts...)
			if err != nil {
				b.Fatal(err)
			}
			rule := prepare(b, sluice.Rule{Name: "bench", Algorithm: sluice.AlgoSlidingLog, Limit: l.limit})
			runRedis(b, rc, callers, script, func() func(key string) bool {
				checks := []sluice.Check{{Rule: rule}}
				out := make([]sluice.Decision, 1)
				n := 0
				return func(key string) bool {
					checks[0].Key = key
					if l.keys > 0 { // key n of l.keys, in turn
						checks[0].Key = "user" + strconv.Itoa(n%l.keys)
						n++
					}
					var now time.Time
					if l.now {
						now = time.Now()
					}
					if err := s.Take(context.Background(), now, checks, out); err != nil {
						b.Error(err)
					}
					return out[0].Allowed
				}
			})
		})
	}
}

// floors runs FloorLibrary, store=floor, for the fixed window, GCRA (for
// the buckets: their one-unit path is the same) and the sliding log among
// algs at 16 and 64 decisions a run: an FCALL of that many keys, named as the store
// names them, from 2 callers, as many runs in flight as the store keeps
// out at most. Its cmd-µs beside the store's at the same run size is what
// the store's generality costs Redis; what the floor costs is what the
// guarantees do. Its p50-µs and p99-µs are of a run, not of a decision.
func floors(b *testing.B, addr string, algs []sluice.Algo) {
	const floorCallers = 2 // runs in flight: as many as the store keeps out at most
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rc.Close()
	if err := rc.FunctionLoadReplace(context.Background(), FloorLibrary).Err(); err != nil {
		b.Logf("no floor: FUNCTION LOAD: %v", err) // Redis before 7
		return
	}
	// PerSecond(1000) as the store has it: a window's count and its keys'
	// TTL in ms (its period and a second), and a bucket's debt in µs, a
	// unit costing 1000 of it and the full bucket 1000 units.
	kinds := map[sluice.Algo]struct {
		fn, code string
		argv     []any
	}{
		sluice.AlgoFixedWindow: {"floor_fixed", "w:", []any{"1000", "2000"}},
		sluice.AlgoGCRA:        {"floor_bucket", "b", []any{"1000000", "1000", "2000"}},
		sluice.AlgoSlidingLog:  {"floor_log", "lu", []any{"1000", "1000000", "1000"}},
	}
	for _, alg := range algs {
		k, ok := kinds[alg]
		if !ok {
			continue
		}
		for _, batch := range []int{16, 64} {
			b.Run(fmt.Sprintf("store=floor/alg=%s/batch=%d", alg, batch), func(b *testing.B) {
				rc := benchClient(b, addr, floorCallers)
				prefix := benchPrefix("f")
				runOn(b, []*goredis.Client{rc}, floorCallers, batch, []string{"fcall"}, func() func(users []string) int {
					keys := make([]string, batch+1)
					keys[0] = prefix + "clock"
					return func(users []string) int {
						window := ""
						if k.code == "w:" {
							window = strconv.FormatInt(time.Now().Unix(), 10)
						}
						for i, u := range users {
							keys[i+1] = prefix + "{" + u + "}:bench:" + k.code + window
						}
						reply, err := rc.FCall(context.Background(), k.fn, keys, k.argv...).Int64Slice()
						if err != nil {
							b.Error(err)
							return 0
						}
						allowed := 0
						for _, v := range reply[1:] {
							allowed += int(v & 1)
						}
						return allowed
					}
				})
			})
		}
	}
}

// contenders runs the pair and redis_rate at callers.
func contenders(b *testing.B, addr string, callers int, limit sluice.Limit) {
	script := []string{"evalsha", "eval"}
	b.Run(fmt.Sprintf("store=pair/callers=%d", callers), func(b *testing.B) {
		rc := benchClient(b, addr, callers)
		runRedis(b, rc, callers, []string{"incrby", "pexpire"}, pairDecide(b, rc, limit))
	})
	b.Run(fmt.Sprintf("store=redis_rate/callers=%d", callers), func(b *testing.B) {
		rc := benchClient(b, addr, callers)
		l := redis_rate.NewLimiter(rc)
		rl := redis_rate.PerSecond(int(limit.Rate))
		runRedis(b, rc, callers, script, func() func(key string) bool {
			return func(key string) bool {
				res, err := l.Allow(context.Background(), key, rl)
				if err != nil {
					b.Error(err)
					return false
				}
				return res.Allowed > 0
			}
		})
	})
}

// pinRedis pins the redis-server at addr, every thread of it, to the CPU
// BENCH_REDIS_CPU names, if it names one.
func pinRedis(b *testing.B, addr string) {
	cpu := os.Getenv("BENCH_REDIS_CPU")
	if cpu == "" {
		return
	}
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rc.Close()
	pid := infoField(b, rc, "server", "process_id")
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpu, pid).CombinedOutput(); err != nil {
		b.Fatalf("taskset -a -p -c %s %s: %v\n%s", cpu, pid, err, out)
	}
	if n := os.Getenv("BENCH_REDIS_NICE"); n != "" {
		if out, err := exec.Command("renice", "-n", n, "-p", pid).CombinedOutput(); err != nil {
			b.Fatalf("renice -n %s -p %s: %v\n%s", n, pid, err, out)
		}
	}
}

// runRedis runs b.N decisions over callers goroutines, each with its own
// decide from mk, and reports throughput, latency percentiles, the
// fraction allowed, Redis's time in cmds (the commands the client sends)
// per decision, and the CPU time per decision of the benchmark process
// (client-cpu-µs, the callers and the client library) and of the
// redis-server (server-cpu-µs, from INFO cpu): where the time went, and
// how much of the machine each side used (decisions/s × cpu-µs / 10^6 is
// cores busy).
func runRedis(b *testing.B, rc *goredis.Client, callers int, cmds []string, mk func() func(key string) bool) {
	runOn(b, []*goredis.Client{rc}, callers, 1, cmds, each(mk))
}

// each makes mk's deciders, of one key, deciders of a run of per keys
// (per being 1).
func each(mk func() func(key string) bool) func() func(keys []string) int {
	return func() func(keys []string) int {
		decide := mk()
		return func(keys []string) int {
			if decide(keys[0]) {
				return 1
			}
			return 0
		}
	}
}

// runOn is runRedis with the Redis figures summed over servers (the
// masters of a Cluster), and with per decisions a call of decide, which
// gets their keys and returns how many were allowed. The latencies are
// of the calls.
func runOn(b *testing.B, servers []*goredis.Client, callers, per int, cmds []string, mk func() func(keys []string) int) {
	b.ReportAllocs()
	keys := make([]string, 10000, 10000+per)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	keys = append(keys, keys[:per-1]...) // a run may go round the end
	calls := (b.N + per - 1) / per
	lat := make([][]time.Duration, callers)
	var next, allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range callers {
		decide := mk()
		wg.Go(func() {
			own := make([]time.Duration, 0, calls/callers+1)
			<-start
			for {
				i := next.Add(1) - 1
				if i >= int64(calls) {
					break
				}
				j := i * int64(per) % 10000
				t := time.Now()
				allowed.Add(int64(decide(keys[j : j+int64(per)])))
				own = append(own, time.Since(t))
			}
			lat[g] = own
		})
	}
	server0, cmd0 := sumOver(servers, func(rc *goredis.Client) time.Duration { return serverCPU(b, rc) }), sumOver(servers, func(rc *goredis.Client) int64 { return commandUsec(b, rc, cmds) })
	client0, clientOK := processCPU()
	b.ResetTimer()
	t := time.Now()
	close(start)
	wg.Wait()
	el := time.Since(t)
	b.StopTimer()
	client1, _ := processCPU()
	server1, cmd1 := sumOver(servers, func(rc *goredis.Client) time.Duration { return serverCPU(b, rc) }), sumOver(servers, func(rc *goredis.Client) int64 { return commandUsec(b, rc, cmds) })
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(all[len(all)/2].Seconds()*1e6, "p50-µs")
		b.ReportMetric(all[len(all)*99/100].Seconds()*1e6, "p99-µs")
	}
	n := float64(calls * per) // decisions: b.N, or a few more
	b.ReportMetric(n/el.Seconds(), "decisions/s")
	b.ReportMetric(float64(allowed.Load())/n, "allowed/op")
	b.ReportMetric(float64(cmd1-cmd0)/n, "cmd-µs")
	b.ReportMetric((server1-server0).Seconds()*1e6/n, "server-cpu-µs")
	if clientOK {
		b.ReportMetric((client1-client0).Seconds()*1e6/n, "client-cpu-µs")
	}
}

// sumOver sums f over servers.
func sumOver[T int64 | time.Duration](servers []*goredis.Client, f func(*goredis.Client) T) T {
	var sum T
	for _, rc := range servers {
		sum += f(rc)
	}
	return sum
}

// BenchmarkRedisCluster measures what a decision costs a 3-master Redis
// Cluster, summed over the masters, as BenchmarkRedis does for one
// server: the Redis store with runs batched per master (the default,
// 64 requests per run at most) and without batching (a run per request,
// through the cluster client's autopipeliner), for one check per request
// (runs go by FCALL, to a master and through the cluster client alike)
// and, with checks=2, for a request on two keys (per user and per IP,
// GCRA both), which sits on two masters two times in three and is then
// decided in parts; beside the pipelined INCRBY + PEXPIRE pair. 128
// callers. The masters are not pinned: they share the machine with the
// benchmark.
//
//	go test -run '^$' -bench '^BenchmarkRedisCluster$' -benchtime 2s
func BenchmarkRedisCluster(b *testing.B) {
	addrs := testredis.StartCluster(b)
	const callers = 128
	limit := sluice.PerSecond(1000)
	masters := make([]*goredis.Client, len(addrs))
	for i, a := range addrs {
		masters[i] = goredis.NewClient(&goredis.Options{Addr: a})
		b.Cleanup(func() { masters[i].Close() })
	}
	cluster := func(b *testing.B) *goredis.ClusterClient {
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, PoolSize: callers, ContextTimeoutEnabled: true})
		b.Cleanup(func() { cc.Close() })
		return cc
	}
	script := []string{"fcall", "function", "evalsha", "eval"}
	for _, alg := range []sluice.Algo{sluice.AlgoFixedWindow, sluice.AlgoGCRA} {
		for _, batched := range []bool{true, false} {
			for _, n := range []int{1, 2} {
				if n == 2 && alg != sluice.AlgoGCRA {
					continue
				}
				b.Run(fmt.Sprintf("store=sluice/alg=%s/batched=%v/checks=%d", alg, batched, n), func(b *testing.B) {
					opts := []sredis.Option{sredis.WithPrefix(benchPrefix("b")), sredis.WithTimeout(time.Second)}
					if !batched {
						opts = append(opts, sredis.WithoutBatching())
					}
					s, err := sredis.New(cluster(b), opts...)
					if err != nil {
						b.Fatal(err)
					}
					user := prepare(b, sluice.Rule{Name: "user", Algorithm: alg, Limit: limit})
					ip := prepare(b, sluice.Rule{Name: "ip", Algorithm: alg, Limit: limit})
					runOn(b, masters, callers, 1, script, each(func() func(key string) bool {
						checks := []sluice.Check{{Rule: user}, {Rule: ip}}[:n]
						out := make([]sluice.Decision, n)
						return func(key string) bool {
							checks[0].Key = key
							if n == 2 {
								checks[1].Key = "ip-" + key
							}
							if err := s.Take(context.Background(), time.Now(), checks, out); err != nil {
								b.Error(err)
							}
							return out[0].Allowed
						}
					}))
					st := s.Stats()
					if st.Runs > 0 {
						b.ReportMetric(float64(st.Calls)/float64(st.Runs), "reqs/run")
					}
					b.ReportMetric(float64(st.Splits)/float64(b.N), "split/op")
				})
			}
		}
	}
	b.Run("store=pair", func(b *testing.B) {
		cc := cluster(b)
		runOn(b, masters, callers, 1, []string{"incrby", "pexpire"}, each(pairDecide(b, cc, limit)))
	})
}

// prefixes counts the keys' prefixes of the process: each sub-benchmark
// starts on keys of its own.
var prefixes atomic.Int64

// benchPrefix is a prefix of keys no other sub-benchmark of the process
// uses, of the length of the store's default, "sluice:": c, 5 digits, a
// colon: a key's length shows in what Redis spends on it, so the
// benchmark's keys are as long as the store's.
func benchPrefix(c string) string {
	return fmt.Sprintf("%s%05d:", c, prefixes.Add(1))
}

// pairDecide makes the pair's callers: a pipelined INCRBY + PEXPIRE on
// rc per decision, of a key per window named as envoyproxy/ratelimit
// names it (the window's start in Unix seconds at the end).
func pairDecide(b *testing.B, rc goredis.Cmdable, limit sluice.Limit) func() func(key string) bool {
	prefix := benchPrefix("p")
	return func() func(key string) bool {
		return func(key string) bool {
			k := prefix + key + "_" + strconv.FormatInt(time.Now().Unix(), 10)
			var incr *goredis.IntCmd
			_, err := rc.Pipelined(context.Background(), func(p goredis.Pipeliner) error {
				incr = p.IncrBy(context.Background(), k, 1)
				p.PExpire(context.Background(), k, time.Second)
				return nil
			})
			if err != nil {
				b.Error(err)
				return false
			}
			return incr.Val() <= limit.Rate
		}
	}
}

// infoField is field of INFO section.
func infoField(b *testing.B, rc *goredis.Client, section, field string) string {
	info, err := rc.Info(context.Background(), section).Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	b.Fatalf("INFO %s: no %s", section, field)
	return ""
}

// commandUsec is the µs Redis has spent in cmds, from INFO commandstats.
func commandUsec(b *testing.B, rc *goredis.Client, cmds []string) int64 {
	_, usec := commandCounts(b, rc, cmds)
	return usec
}

// serverCPU is the CPU time redis-server has used, user and system, from
// INFO cpu.
func serverCPU(b *testing.B, rc *goredis.Client) time.Duration {
	var total float64
	for _, field := range []string{"used_cpu_user", "used_cpu_sys"} {
		f, err := strconv.ParseFloat(infoField(b, rc, "cpu", field), 64)
		if err != nil {
			b.Fatalf("INFO cpu: %s: %v", field, err)
		}
		total += f
	}
	return time.Duration(total * float64(time.Second))
}

// benchClient is a go-redis client whose pool can serve every caller.
func benchClient(b *testing.B, addr string, callers int) *goredis.Client {
	rc := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: max(callers, 10), ContextTimeoutEnabled: true})
	b.Cleanup(func() { rc.Close() })
	return rc
}

package bench

import (
	"bufio"
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

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/lease"
	sredis "github.com/sluicehq/sluice/redis"
)

// BenchmarkRedisLease's load: processes, callers in each, and the
// decisions a second they ask for in all, paced.
const leaseProcs, leaseCallers, leaseRate = 8, 4, 16_000

// BenchmarkRedisLease measures what a decision costs Redis with leases
// beside exact decisions, in the same run on one redis-server, at the
// same load: 8 processes (this test binary run again), each with a
// client and a Store of its own, ask for 16,000 decisions a second in
// all, paced (4 callers a process), of a token bucket of 10,000 a second
// per key: keys=1, one key asked for 1.6 times its limit; keys=100, 100
// keys each asked for 160 a second. mode=exact decides through the Redis
// store, mode=lease through a lease.Store on the Redis authority (a
// renewal every 100ms per key and process, the default for a 1s Period).
//
// It reports calls/op (the Redis commands the processes sent per
// decision: script runs, and HDEL for releases, from INFO
// commandstats), cmd-µs (Redis's time in them per decision),
// server-cpu-µs (redis-server's user+system CPU per decision, INFO
// cpu), decisions/s (over the slowest process's loop: below 16,000 when
// the machine could not keep up), allowed/op and errors/op (decisions
// that failed, which a Limiter would give to the rule's failure mode).
// A lease costs Redis per second, not per decision, so its figures per
// decision are at this load. ns/op is the pacing's, b.N split among the
// processes:
//
//	go test -run '^$' -bench '^BenchmarkRedisLease$' -benchtime 32000x
//
// BENCH_REDIS_CPU pins redis-server as for BenchmarkRedis.
func BenchmarkRedisLease(b *testing.B) {
	if addr := os.Getenv("BENCH_LEASE_ADDR"); addr != "" {
		leaseProcess(b, addr)
		return
	}
	addr := testredis.Start(b)
	pinRedis(b, addr)
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	b.Cleanup(func() { rc.Close() })
	cmds := []string{"fcall", "evalsha", "eval", "hdel"}
	for _, keys := range []int{1, 100} {
		for _, mode := range []string{"exact", "lease"} {
			b.Run(fmt.Sprintf("mode=%s/keys=%d", mode, keys), func(b *testing.B) {
				per := (b.N + leaseProcs - 1) / leaseProcs
				calls0, usec0 := commandCounts(b, rc, cmds)
				cpu0 := serverCPU(b, rc)
				b.ResetTimer()
				res := runLeaseProcs(b, addr, mode, keys, per)
				b.StopTimer()
				calls1, usec1 := commandCounts(b, rc, cmds)
				cpu1 := serverCPU(b, rc)
				n := float64(per * leaseProcs)
				b.ReportMetric(float64(calls1-calls0)/n, "calls/op")
				b.ReportMetric(float64(usec1-usec0)/n, "cmd-µs")
				b.ReportMetric((cpu1-cpu0).Seconds()*1e6/n, "server-cpu-µs")
				b.ReportMetric(n/res.slowest.Seconds(), "decisions/s")
				b.ReportMetric(float64(res.allowed)/n, "allowed/op")
				b.ReportMetric(float64(res.errors)/n, "errors/op")
			})
		}
	}
}

// leaseRun is what the processes of one run report.
type leaseRun struct {
	allowed, errors int64
	slowest         time.Duration // the longest loop of a process
}

// runLeaseProcs runs the processes, each deciding per requests, and sums
// what they report.
func runLeaseProcs(b *testing.B, addr, mode string, keys, per int) leaseRun {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	prefix := benchPrefix("lease-" + mode)
	var res leaseRun
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range leaseProcs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkRedisLease$", "-test.benchtime=1x", "-test.count=1")
		cmd.Env = append(os.Environ(), "BENCH_LEASE_ADDR="+addr, "BENCH_LEASE_MODE="+mode, "BENCH_LEASE_PREFIX="+prefix,
			"BENCH_LEASE_HOLDER="+strconv.Itoa(i), "BENCH_LEASE_KEYS="+strconv.Itoa(keys), "BENCH_LEASE_N="+strconv.Itoa(per))
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			var allowed, errs int64
			var took time.Duration
			var log strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				log.WriteString(line + "\n")
				fmt.Sscanf(line, "lease-process allowed=%d errors=%d took=%d", &allowed, &errs, &took)
			}
			if err := cmd.Wait(); err != nil || took == 0 {
				b.Errorf("process %d: %v\n%s%s", i, err, log.String(), stderr.String())
				return
			}
			mu.Lock()
			res.allowed += allowed
			res.errors += errs
			res.slowest = max(res.slowest, took)
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}

// leaseProcess is one process of BenchmarkRedisLease: it decides its
// share of the requests at its share of the rate, and prints what it
// allowed, the errors, and how long its loop took.
func leaseProcess(b *testing.B, addr string) {
	mode := os.Getenv("BENCH_LEASE_MODE")
	keys, _ := strconv.Atoi(os.Getenv("BENCH_LEASE_KEYS"))
	n, _ := strconv.Atoi(os.Getenv("BENCH_LEASE_N"))
	rc := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 2 * leaseCallers, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rc.Close()
	exact, err := sredis.New(rc, sredis.WithPrefix(os.Getenv("BENCH_LEASE_PREFIX")), sredis.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := exact.Load(ctx); err != nil {
		b.Fatal(err)
	}
	rule := sluice.Rule{Name: "bench", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(10_000)}
	var store sluice.Store = exact
	if mode == "lease" {
		rule.Lease = sluice.Lease{Enabled: true}
		ls, err := lease.New(exact, exact.Authority(), lease.WithHolder("p"+os.Getenv("BENCH_LEASE_HOLDER")))
		if err != nil {
			b.Fatal(err)
		}
		defer ls.Close(ctx)
		store = ls
	}
	p := prepare(b, rule)
	names := make([]string, keys)
	for i := range names {
		names[i] = "user" + strconv.Itoa(i)
	}
	// Each caller decides every interval, on a schedule that catches up
	// when it falls behind.
	interval := time.Duration(leaseProcs * leaseCallers * int64(time.Second) / leaseRate)
	var next, allowed, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range leaseCallers {
		wg.Go(func() {
			checks := []sluice.Check{{Rule: p}}
			out := make([]sluice.Decision, 1)
			due := start.Add(time.Duration(c) * interval / leaseCallers)
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				time.Sleep(time.Until(due))
				due = due.Add(interval)
				checks[0].Key = names[i%int64(keys)]
				switch err := store.Take(ctx, time.Now(), checks, out); {
				case err != nil:
					errs.Add(1)
				case out[0].Allowed:
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("lease-process allowed=%d errors=%d took=%d\n", allowed.Load(), errs.Load(), time.Since(start))
}

// commandCounts are the calls of cmds and the µs Redis spent in them,
// from INFO commandstats (cmdstat_NAME:calls=...,usec=...,...).
func commandCounts(b *testing.B, rc *goredis.Client, cmds []string) (calls, usec int64) {
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains(cmds, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("INFO commandstats: %s: %v", line, err)
			}
			if k == "calls" {
				calls += x
			} else {
				usec += x
			}
		}
	}
	return calls, usec
}

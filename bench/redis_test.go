package bench

import (
	"context"
	"fmt"
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

// BenchmarkRedis compares the Redis store with go-redis/redis_rate v10 on
// one local redis-server the benchmark starts: GCRA, one check per
// request, keys spread over 10000 entities so that nearly every request is
// allowed, at 1, 32 and 256 concurrent callers. Besides ns/op it reports
// decisions/s, the callers' p50 and p99 latency, the CPU time per decision
// of each side (see runRedis) and, for sluice, the requests per script run
// (reqs/run). peer=sluice is the
// default store (requests batched into script runs); sluice-nobatch sends
// a script run per request through go-redis's autopipeliner, as the store
// does on a Cluster. Both clients have ContextTimeoutEnabled, so that the
// store's deadline holds without a goroutine per call.
//
//	go test -run '^$' -bench '^BenchmarkRedis$' -benchtime 5s
func BenchmarkRedis(b *testing.B) {
	addr := testredis.Start(b)
	limit := sluice.PerSecond(1000)
	rule := &sluice.Rule{Name: "bench", Algorithm: sluice.AlgoGCRA, Limit: limit}
	for _, callers := range []int{1, 32, 256} {
		// sluice with batching (the default), and with one script run per
		// request.
		for _, v := range []struct {
			peer string
			opts []sredis.Option
		}{
			{"sluice", nil},
			{"sluice-nobatch", []sredis.Option{sredis.WithoutBatching()}},
		} {
			b.Run(fmt.Sprintf("peer=%s/callers=%d", v.peer, callers), func(b *testing.B) {
				rc := benchClient(b, addr, callers)
				opts := append([]sredis.Option{sredis.WithPrefix(fmt.Sprintf("b%d:", time.Now().UnixNano())), sredis.WithTimeout(time.Second)}, v.opts...)
				s, err := sredis.New(rc, opts...)
				if err != nil {
					b.Fatal(err)
				}
				runRedis(b, rc, callers, func() func(key string) bool {
					checks := []sluice.Check{{Rule: rule}}
					out := make([]sluice.Decision, 1)
					return func(key string) bool {
						checks[0].Key = key
						if err := s.Take(context.Background(), time.Now(), 1, checks, out); err != nil {
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
		b.Run(fmt.Sprintf("peer=redis_rate/callers=%d", callers), func(b *testing.B) {
			rc := benchClient(b, addr, callers)
			l := redis_rate.NewLimiter(rc)
			rl := redis_rate.PerSecond(int(limit.Rate))
			runRedis(b, rc, callers, func() func(key string) bool {
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
}

// runRedis runs b.N decisions over callers goroutines, each with its own
// decide from mk, and reports throughput, latency percentiles, the
// fraction allowed, and the CPU time per decision of the benchmark process
// (client-cpu-µs, the callers and the client library) and of the
// redis-server (server-cpu-µs, from INFO cpu): where the time went, and
// how much of the machine each side used (decisions/s × cpu-µs / 10^6 is
// cores busy).
func runRedis(b *testing.B, rc *goredis.Client, callers int, mk func() func(key string) bool) {
	b.ReportAllocs()
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	lat := make([][]time.Duration, callers)
	var next, allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range callers {
		decide := mk()
		wg.Go(func() {
			own := make([]time.Duration, 0, b.N/callers+1)
			<-start
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					break
				}
				t := time.Now()
				if decide(keys[i%int64(len(keys))]) {
					allowed.Add(1)
				}
				own = append(own, time.Since(t))
			}
			lat[g] = own
		})
	}
	server0 := serverCPU(b, rc)
	client0, clientOK := processCPU()
	b.ResetTimer()
	t := time.Now()
	close(start)
	wg.Wait()
	el := time.Since(t)
	b.StopTimer()
	client1, _ := processCPU()
	server1 := serverCPU(b, rc)
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(all[len(all)/2].Seconds()*1e6, "p50-µs")
		b.ReportMetric(all[len(all)*99/100].Seconds()*1e6, "p99-µs")
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
	b.ReportMetric((server1-server0).Seconds()*1e6/float64(b.N), "server-cpu-µs")
	if clientOK {
		b.ReportMetric((client1-client0).Seconds()*1e6/float64(b.N), "client-cpu-µs")
	}
}

// serverCPU is the CPU time redis-server has used, user and system, from
// INFO cpu.
func serverCPU(b *testing.B, rc *goredis.Client) time.Duration {
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// benchClient is a go-redis client whose pool can serve every caller.
func benchClient(b *testing.B, addr string, callers int) *goredis.Client {
	rc := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: max(callers, 10), ContextTimeoutEnabled: true})
	b.Cleanup(func() { rc.Close() })
	return rc
}

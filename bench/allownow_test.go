package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"go.uber.org/ratelimit"
)

// The clock-reading workloads. Real time cannot be replayed, so the two
// regimes are made by the limit instead: a billion per second (burst a
// billion) is never reached by one process, and one per hour (burst 1)
// denies everything after the first call.
var clockTraffics = []struct {
	name  string
	limit sluice.Limit
}{
	{"allowed", sluice.Limit{Rate: 1e9, Period: time.Second}},
	{"denied", sluice.Limit{Rate: 1, Period: time.Hour}},
}

// clockContender makes a fresh limiter for l that reads the clock itself.
// A contender that never denies runs only in traffic=allowed.
type clockContender struct {
	name        string
	mk          func(b *testing.B, l sluice.Limit) (allow func() bool)
	neverDenies bool
}

// sluiceNow adapts a sluice constructor, reading time.Now per call as a
// middleware would.
func sluiceNow[A sluice.Algorithm](name string, newAlg func(sluice.Limit) (A, error)) clockContender {
	return clockContender{name: name, mk: func(b *testing.B, l sluice.Limit) func() bool {
		a, err := newAlg(l)
		if err != nil {
			b.Fatal(err)
		}
		return func() bool { return a.AllowN(time.Now(), 1).Allowed }
	}}
}

// sleeplessClock is go.uber.org/ratelimit's clock with Sleep replaced by a
// count: Take then measures the decision and the clock read, never a sleep.
// At a billion per second Take has nothing to wait for; sleeps/op reports
// whether it asked to anyway.
type sleeplessClock struct{ sleeps atomic.Int64 }

func (*sleeplessClock) Now() time.Time { return time.Now() }

func (c *sleeplessClock) Sleep(time.Duration) { c.sleeps.Add(1) }

var clockContenders = []clockContender{
	sluiceNow("gcra", sluice.NewGCRA),
	sluiceNow("tokenbucket", sluice.NewTokenBucket),
	{name: "xrate", mk: func(b *testing.B, l sluice.Limit) func() bool {
		x := xrateLimiter(l)
		return x.Allow
	}},
	{name: "uber", neverDenies: true, mk: func(b *testing.B, l sluice.Limit) func() bool {
		c := new(sleeplessClock)
		u := ratelimit.New(int(l.Rate), ratelimit.Per(l.Period), ratelimit.WithClock(c))
		b.Cleanup(func() { b.ReportMetric(float64(c.sleeps.Load())/float64(b.N), "sleeps/op") })
		return func() bool { u.Take(); return true }
	}},
	{name: "sethvargo", mk: func(b *testing.B, l sluice.Limit) func() bool {
		// go-limiter adds Interval/Tokens tokens (Interval in ns) per
		// elapsed Interval, up to Tokens: a full refill for ordinary
		// limits, a single token at a billion per second. A 1s interval
		// crossed during a benchmark would leave it dry; an hour's
		// interval at the same rate is never crossed.
		tokens, interval := uint64(l.Capacity()), l.Period
		if l.Rate >= 1e9 {
			tokens, interval = 3600*tokens, 3600*interval
		}
		s, err := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(context.Background()) })
		ctx := context.Background()
		return func() bool {
			_, _, _, ok, _ := s.Take(ctx, "k")
			return ok
		}
	}},
	{name: "throttled", mk: func(b *testing.B, l sluice.Limit) func() bool {
		st, err := memstore.NewCtx(0)
		if err != nil {
			b.Fatal(err)
		}
		// throttled's burst counts the requests beyond the first.
		q := throttled.RateQuota{MaxRate: throttled.PerDuration(int(l.Rate), l.Period), MaxBurst: int(l.Capacity()) - 1}
		g, err := throttled.NewGCRARateLimiterCtx(st, q)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		return func() bool {
			limited, _, err := g.RateLimitCtx(ctx, "k", 1)
			return err == nil && !limited
		}
	}},
}

// BenchmarkAllowNow is one key, one unit per call, each limiter reading the
// clock itself: the only way to run the peers that take no time parameter.
// sethvargo and throttled are keyed stores used with one key, so they also
// pay a map lookup under an RWMutex that a single-key limiter does not.
func BenchmarkAllowNow(b *testing.B) {
	for _, tr := range clockTraffics {
		b.Run("traffic="+tr.name, func(b *testing.B) {
			for _, c := range clockContenders {
				if c.neverDenies && tr.name != "allowed" {
					continue
				}
				b.Run("alg="+c.name, func(b *testing.B) {
					runClock(b, func(b *testing.B) func() bool { return c.mk(b, tr.limit) })
				})
			}
		})
	}
}

package bench

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"golang.org/x/time/rate"
)

// limit is the explicit-time workload's limit: 1000 per second, burst 1000,
// small enough for the sliding log's ring (1000 cells) to be realistic.
var limit = sluice.PerSecond(1000)

// traffics are the explicit-time workloads. At one request every 2ms the
// offered load is half the limit and every algorithm allows everything; at
// one every 10µs it is 100 times the limit and about 1% is allowed.
var traffics = []struct {
	name string
	step time.Duration
}{
	{"allowed", 2 * time.Millisecond},
	{"denied", 10 * time.Microsecond},
}

// contender makes a fresh single-key limiter for l.
type contender struct {
	name string
	mk   func(l sluice.Limit) (allowFunc, error)
}

// sluiceAlg adapts a sluice constructor.
func sluiceAlg[A sluice.Algorithm](name string, newAlg func(sluice.Limit) (A, error)) contender {
	return contender{name, func(l sluice.Limit) (allowFunc, error) {
		a, err := newAlg(l)
		if err != nil {
			return nil, err
		}
		return func(now time.Time) bool { return a.AllowN(now, 1).Allowed }, nil
	}}
}

// xrateLimiter is x/time/rate's limiter for l: Rate/Period tokens per
// second, bucket of l.Capacity().
func xrateLimiter(l sluice.Limit) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(float64(l.Rate)/l.Period.Seconds()), int(l.Capacity()))
}

// explicitContenders take the time as a parameter. baseline decides
// nothing: it is the harness's own cost (closure call and time sequence),
// included in every other figure.
var explicitContenders = []contender{
	{"baseline", func(sluice.Limit) (allowFunc, error) {
		return func(time.Time) bool { return true }, nil
	}},
	sluiceAlg("gcra", sluice.NewGCRA),
	sluiceAlg("tokenbucket", sluice.NewTokenBucket),
	sluiceAlg("leakybucket", sluice.NewLeakyBucket),
	sluiceAlg("fixedwindow", sluice.NewFixedWindow),
	sluiceAlg("slidinglog", sluice.NewSlidingLog),
	sluiceAlg("slidingcounter", sluice.NewSlidingCounter),
	{"xrate", func(l sluice.Limit) (allowFunc, error) {
		x := xrateLimiter(l)
		return func(now time.Time) bool { return x.AllowN(now, 1) }, nil
	}},
}

// BenchmarkAllowN is one key, one unit per call, the time passed in: sluice's
// six algorithms and x/time/rate's Limiter.AllowN on identical times.
func BenchmarkAllowN(b *testing.B) {
	for _, tr := range traffics {
		b.Run("traffic="+tr.name, func(b *testing.B) {
			for _, c := range explicitContenders {
				b.Run("alg="+c.name, func(b *testing.B) {
					run(b, func(b *testing.B) allowFunc {
						allow, err := c.mk(limit)
						if err != nil {
							b.Fatal(err)
						}
						return allow
					}, tr.step)
				})
			}
		})
	}
}

package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// BenchmarkFloor measures, in the same run as BenchmarkKeyed, the two
// costs no keyed store can avoid on this machine, so that its figures can
// be read against them:
//
//   - op=clock: one time.Now, which every contender pays per request.
//
//   - op=miss: one read of a random cache line of a table of the given
//     size, each read's address depending on the last, as one request
//     follows another: the memory latency a lookup pays once its table no
//     longer fits in cache. Read each keyed figure against the table of
//     the store's own size (BenchmarkKeyedMemory's B/key times the keys):
//     for sluice's memory store at 1,000,000 keys, 96 MB before its cells
//     shrank to 32 bytes, 48 MB after; 10 MB was its size at 100,000.
//
//   - op=steady-clock: one read of sluice.SystemClock, the clock the
//     Limiter reads per request.
//
//   - op=sluice-in-cache: sluice's memory store deciding for random keys
//     among 1,000, its table in cache, the clock read per request as in
//     BenchmarkKeyed: what one request costs sluice without the miss. (The
//     limit is high enough that every request is allowed, as there.)
//     op=sluice-in-cache-limiter: the same through sluice.Limiter, as
//     BenchmarkKeyed's store=sluice-limiter: the difference is the
//     Limiter's own cost.
//
// A store that found its key with one such read and did nothing else
// would take op=clock + op=miss per request; sluice's store at best takes
// op=sluice-in-cache + op=miss.
func BenchmarkFloor(b *testing.B) {
	b.Run("op=clock", func(b *testing.B) {
		var last time.Time
		for range b.N {
			last = time.Now()
		}
		sinkTime = last
	})
	b.Run("op=steady-clock", func(b *testing.B) {
		var last time.Time
		for range b.N {
			last = sluice.SystemClock.Now()
		}
		sinkTime = last
	})
	for _, via := range []string{"", "-limiter"} {
		b.Run("op=sluice-in-cache"+via, func(b *testing.B) {
			const keys = 1000
			s, err := memory.New()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rule := prepare(b, sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1e9)})
			reqs := make([]string, keyedSeq)
			rnd := rand.New(rand.NewPCG(keys, 1))
			for i := range reqs {
				reqs[i] = keyedKey(rnd.IntN(keys))
			}
			take := sluiceTaker(s, rule)
			if via != "" {
				l, err := sluice.NewLimiter(s)
				if err != nil {
					b.Fatal(err)
				}
				// Prepared again by the Limiter, as the middleware does.
				lr, err := l.Prepare(rule.Rule())
				if err != nil {
					b.Fatal(err)
				}
				take = limiterTaker(l, lr)
			}
			for i := range keys {
				if !take(keyedKey(i)) {
					b.Fatalf("the first request for key %d was denied", i)
				}
			}
			allowed := 0
			b.ResetTimer()
			for i := range b.N {
				if take(reqs[i&(keyedSeq-1)]) {
					allowed++
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
		})
	}
	for _, mb := range []int{10, 48, 96} {
		b.Run(fmt.Sprintf("op=miss/MB=%d", mb), func(b *testing.B) { missChain(b, mb, false) })
	}
	// The same table in 2 MB pages where the kernel grants them
	// (MADV_HUGEPAGE, Linux): how much of a miss is the page walk's.
	b.Run("op=miss-hugepages/MB=48", func(b *testing.B) { missChain(b, 48, true) })
}

// missChain times one dependent read at a time through a table of mb MB,
// in pages of 2 MB if huge (skipped where they cannot be asked for).
func missChain(b *testing.B, mb int, huge bool) {
	if testing.Short() && mb > 10 {
		b.Skip("-short")
	}
	const line = 8 // uint64s per 64-byte line
	lines := uint64(mb << 20 / 64)
	var tab []uint64
	if huge {
		t, release, ok := hugeTable(int(lines * line))
		if !ok {
			b.Skip("no MADV_HUGEPAGE here")
		}
		defer release()
		tab = t
	} else {
		tab = make([]uint64, lines*line)
	}
	// A random cycle through every line (Sattolo's shuffle), so that
	// each read depends on the last and the prefetcher cannot guess.
	perm := make([]uint64, lines)
	for i := range perm {
		perm[i] = uint64(i)
	}
	x := uint64(0x9E3779B97F4A7C15)
	for i := len(perm) - 1; i > 0; i-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		j := x % uint64(i)
		perm[i], perm[j] = perm[j], perm[i]
	}
	for i, p := range perm {
		tab[uint64(i)*line] = p * line
	}
	perm = nil
	b.ResetTimer()
	at := uint64(0)
	for range b.N {
		at = tab[at]
	}
	sinkUint = at
}

var (
	sinkTime time.Time
	sinkUint uint64
)

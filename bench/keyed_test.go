package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
)

// The keyed workload: one limit per key, 1000 per second with a burst of
// 1000, and requests for keys drawn at random from 100,000 or 1,000,000,
// every key already in the store. A key comes up about once in 100,000
// requests, far below its limit, so every contender allows every request,
// which the allowed/op metric shows: the same work. Each contender reads
// the clock once per request, as the peers do inside. BenchmarkKeyedMemory
// measures what the stores hold per key. -short keeps to 100,000 keys.
//
// Run and compare with:
//
//	go test -run '^$' -bench Keyed -count 6 . > keyed.txt
//	benchstat -col /store keyed.txt
//
// Contenders:
//   - sluice: memory.Store, a GCRA rule, one check per Take, the store
//     called directly.
//   - sluice-limiter: the same store and rule through sluice.Limiter
//     (SystemClock), the path httplimit and the service take: the clock
//     read by the Limiter, one check per Take, the decisions into a
//     reused slice.
//   - sethvargo: github.com/sethvargo/go-limiter memorystore.
//   - throttled: github.com/throttled/throttled/v2, GCRARateLimiterCtx over
//     memstore bounded to the number of keys (an LRU), as sluice's store is
//     bounded.
var keyedSizes = []int{100_000, 1_000_000}

// sizes are the key counts to run: with -short, only the smaller, for a
// quick look or a smoke run.
func sizes() []int {
	if testing.Short() {
		return keyedSizes[:1]
	}
	return keyedSizes
}

const (
	keyedRate = 1000
	keyedSeq  = 1 << 20 // random key indexes, reused round
)

// keyedTaker decides one request for key. A taker is used by one
// goroutine; newTaker makes one per goroutine.
type keyedTaker func(key string) bool

type keyedStore struct {
	newTaker func() keyedTaker
	close    func()
}

type keyedContender struct {
	name string
	mk   func(keys int) (keyedStore, error)
}

var keyedContenders = []keyedContender{
	{"sluice", func(keys int) (keyedStore, error) {
		// Room for every key: the store starts to evict a little before
		// its bound (shards - 1 keys before).
		s, err := memory.New(memory.WithMaxKeys(keys + 1024))
		if err != nil {
			return keyedStore{}, err
		}
		rule, err := sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(keyedRate)}.Prepare()
		if err != nil {
			return keyedStore{}, err
		}
		return keyedStore{
			newTaker: func() keyedTaker { return sluiceTaker(s, rule) },
			close:    func() { s.Close() },
		}, nil
	}},
	{"sluice-limiter", func(keys int) (keyedStore, error) {
		s, err := memory.New(memory.WithMaxKeys(keys + 1024))
		if err != nil {
			return keyedStore{}, err
		}
		l, err := sluice.NewLimiter(s)
		if err != nil {
			return keyedStore{}, err
		}
		// Prepared where loaded, as the middleware does.
		rule, err := l.Prepare(sluice.Rule{Name: "per-key", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(keyedRate)})
		if err != nil {
			return keyedStore{}, err
		}
		return keyedStore{
			newTaker: func() keyedTaker { return limiterTaker(l, rule) },
			close:    func() { s.Close() },
		}, nil
	}},
	{"sethvargo", func(keys int) (keyedStore, error) {
		s, err := memorystore.New(&memorystore.Config{Tokens: keyedRate, Interval: time.Second, InitialAlloc: keys})
		if err != nil {
			return keyedStore{}, err
		}
		return keyedStore{
			newTaker: func() keyedTaker {
				ctx := context.Background()
				return func(key string) bool {
					_, _, _, ok, err := s.Take(ctx, key)
					return err == nil && ok
				}
			},
			close: func() { s.Close(context.Background()) },
		}, nil
	}},
	{"throttled", func(keys int) (keyedStore, error) {
		st, err := memstore.NewCtx(keys)
		if err != nil {
			return keyedStore{}, err
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(keyedRate), MaxBurst: keyedRate - 1})
		if err != nil {
			return keyedStore{}, err
		}
		return keyedStore{
			newTaker: func() keyedTaker {
				ctx := context.Background()
				return func(key string) bool {
					limited, _, err := rl.RateLimitCtx(ctx, key, 1)
					return err == nil && !limited
				}
			},
			close: func() {},
		}, nil
	}},
}

// sluiceTaker decides one request for a key against rule in s, at
// time.Now, as the peers read the clock inside.
func sluiceTaker(s *memory.Store, rule *sluice.PreparedRule) keyedTaker {
	checks := make([]sluice.Check, 1)
	out := make([]sluice.Decision, 1)
	ctx := context.Background()
	return func(key string) bool {
		checks[0] = sluice.Check{Rule: rule, Key: key}
		err := s.Take(ctx, time.Now(), checks, out)
		return err == nil && out[0].Allowed
	}
}

// limiterTaker decides one request for a key against rule through l, as
// httplimit does: one check, the decisions into a slice reused across
// requests.
func limiterTaker(l *sluice.Limiter, rule *sluice.PreparedRule) keyedTaker {
	checks := make([]sluice.Check, 1)
	out := make([]sluice.Decision, 0, 1)
	ctx := context.Background()
	return func(key string) bool {
		checks[0] = sluice.Check{Rule: rule, Key: key}
		res, err := l.Take(ctx, checks, out)
		return err == nil && res.Allowed
	}
}

// prepare prepares r, failing the benchmark if it is invalid.
func prepare(tb testing.TB, r sluice.Rule) *sluice.PreparedRule {
	tb.Helper()
	p, err := r.Prepare()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// keyedKey names key i with 16 bytes, as an API key or an address might.
func keyedKey(i int) string { return fmt.Sprintf("key-%012d", i) }

// keyedData is built once per size and shared by every benchmark: the
// requests' keys and each contender's store with every key in it, so that
// building them is not timed over and over.
//
// The requests' keys are laid out in the order they are asked for, each a
// fresh copy: a request brings its own string, just made and in cache, and
// a store that keeps the caller's string instead of a copy must not be
// spared the memory read of comparing them because they are one and the
// same. Reading them costs every contender the same sequential scan.
type keyedData struct {
	reqs   []string // keyedSeq keys drawn at random, in request order
	stores map[string]keyedStore
}

var (
	keyedMu    sync.Mutex
	keyedCache = map[int]*keyedData{}
)

func keyedFor(b *testing.B, n int, c keyedContender) (*keyedData, keyedStore) {
	b.Helper()
	keyedMu.Lock()
	defer keyedMu.Unlock()
	d := keyedCache[n]
	if d == nil {
		d = &keyedData{reqs: make([]string, keyedSeq), stores: map[string]keyedStore{}}
		rnd := rand.New(rand.NewPCG(uint64(n), 1))
		for i := range d.reqs {
			d.reqs[i] = keyedKey(rnd.IntN(n))
		}
		keyedCache[n] = d
	}
	s, ok := d.stores[c.name]
	if !ok {
		var err error
		if s, err = c.mk(n); err != nil {
			b.Fatal(err)
		}
		take := s.newTaker()
		for i := range n {
			if !take(keyedKey(i)) {
				b.Fatalf("%s: the first request for key %d was denied", c.name, i)
			}
		}
		d.stores[c.name] = s
	}
	return d, s
}

// BenchmarkKeyed decides one request for a random existing key, serially
// and from GOMAXPROCS goroutines at once.
func BenchmarkKeyed(b *testing.B) {
	for _, n := range sizes() {
		for _, c := range keyedContenders {
			b.Run(fmt.Sprintf("keys=%d/store=%s/run=serial", n, c.name), func(b *testing.B) {
				d, s := keyedFor(b, n, c)
				take := s.newTaker()
				b.ReportAllocs()
				allowed := 0
				b.ResetTimer()
				for i := range b.N {
					if take(d.reqs[i&(keyedSeq-1)]) {
						allowed++
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
			})
			b.Run(fmt.Sprintf("keys=%d/store=%s/run=parallel", n, c.name), func(b *testing.B) {
				d, s := keyedFor(b, n, c)
				var start, allowed atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					take := s.newTaker()
					i := int(start.Add(keyedSeq / 16)) // each goroutine its own stretch of the sequence
					n := int64(0)
					for pb.Next() {
						if take(d.reqs[i&(keyedSeq-1)]) {
							n++
						}
						i++
					}
					allowed.Add(n)
				})
				b.StopTimer()
				b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
			})
		}
	}
}

// BenchmarkKeyedMemory fills a fresh store with every key and reports the
// heap it holds per key (B/key, after a GC) and the time per key added
// (ns/key). Keys are made as they are added, so that each store holds the
// only copy of its keys, whether it copies them or not.
func BenchmarkKeyedMemory(b *testing.B) {
	for _, n := range sizes() {
		for _, c := range keyedContenders {
			b.Run(fmt.Sprintf("keys=%d/store=%s", n, c.name), func(b *testing.B) {
				var perKey float64
				var elapsed time.Duration
				for range b.N {
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					s, err := c.mk(n)
					if err != nil {
						b.Fatal(err)
					}
					take := s.newTaker()
					start := time.Now()
					for i := range n {
						if !take(keyedKey(i)) {
							b.Fatalf("%s: the first request for key %d was denied", c.name, i)
						}
					}
					elapsed += time.Since(start)
					runtime.GC()
					runtime.ReadMemStats(&after)
					perKey = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
					runtime.KeepAlive(take)
					s.close()
				}
				b.ReportMetric(perKey, "B/key")
				b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*n), "ns/key")
			})
		}
	}
}

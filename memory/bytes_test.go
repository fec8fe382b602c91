package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// recount adds up what the store should count against its byte bound:
// each shard's first table, each key's cell, key copy and window, and
// each shard's side arrays and rule set. It fails the test if a table
// holds more cells than its keys are counted for.
func (s *Store) recount(t *testing.T) int64 {
	t.Helper()
	b := int64(len(s.shards)) * emptyTableBytes
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j := range sh.tab {
			if sh.tab[j].rid != 0 {
				b += ref{sh, j}.bytes()
			}
		}
		b += sh.sideBytes()
		if held, counted := int64(len(sh.tab))*cellBytes, emptyTableBytes+int64(sh.n)*keyCellBytes; held > counted {
			t.Errorf("shard %d: a table of %d cells (%d bytes) for %d keys, counted %d", i, len(sh.tab), held, sh.n, counted)
		}
		sh.mu.Unlock()
	}
	return b
}

// checkBytes fails the test unless the store's byte count is the recount
// and within the bound.
func (s *Store) checkBytes(t *testing.T, max int64) {
	t.Helper()
	if got, want := s.Bytes(), s.recount(t); got != want {
		t.Fatalf("Bytes() = %d, the entries and tables add up to %d", got, want)
	}
	if got := s.Bytes(); got > max {
		t.Fatalf("Bytes() = %d, over the bound %d", got, max)
	}
}

// longKey writes the key of i, n bytes long, into buf and returns it as a
// string sharing buf: the store copies what it keeps.
func longKey(buf []byte, n, i int) string {
	b := buf[:n]
	for j := range b[:n-16] {
		b[j] = 'a' + byte(j%26)
	}
	key16(b[n-16:], i)
	return unsafe.String(&b[0], n)
}

func TestMaxBytesOptions(t *testing.T) {
	bad := []struct {
		name string
		opts []Option
	}{
		{"zero bytes", []Option{WithMaxBytes(0)}},
		{"negative bytes", []Option{WithMaxBytes(-1)}},
		{"under a shard's room", []Option{WithMaxBytes(minShardRoom - 1)}},
		{"shards without room", []Option{WithShards(8), WithMaxBytes(8 * minShardRoom / 2)}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if s, err := New(c.opts...); err == nil || !errors.Is(err, ErrInvalidOption) {
				s.Close()
				t.Errorf("New(%s) = %v, want an error wrapping ErrInvalidOption", c.name, err)
			}
		})
	}

	good := []struct {
		opts       []Option
		wantShards int
	}{
		{[]Option{WithMaxBytes(minShardRoom)}, 1},
		{[]Option{WithMaxBytes(64 << 10)}, 8}, // 8 KB a shard
		{[]Option{WithShards(8), WithMaxBytes(8 * minShardRoom)}, 8},
		{nil, max(16, 16*runtime.GOMAXPROCS(0))},
	}
	for _, c := range good {
		s := newStore(t, c.opts...)
		if len(s.shards) != c.wantShards {
			t.Errorf("shards for %d options = %d, want %d", len(c.opts), len(s.shards), c.wantShards)
		}
		cfg, _ := newConfig(c.opts)
		if s.bound.MaxBytes != cfg.MaxBytes || s.Bytes() != int64(len(s.shards))*emptyTableBytes {
			t.Errorf("max bytes %d, bytes %d, for a bound of %d and %d empty shards", s.bound.MaxBytes, s.Bytes(), cfg.MaxBytes, len(s.shards))
		}
	}
	if s := newStore(t); s.bound.MaxBytes != DefaultMaxBytes {
		t.Errorf("default max bytes = %d, want %d", s.bound.MaxBytes, DefaultMaxBytes)
	}
}

// TestMaxBytes: 100,000 distinct keys of 490 bytes arriving at a store
// bounded to 16 MiB. The bytes counted never pass the bound, the store
// ends full of the newest keys, and the heap it holds is within the bound
// (5% allowed for the runtime's own).
func TestMaxBytes(t *testing.T) {
	const bound = 16 << 20
	n := 100_000
	if raceEnabled {
		n = 50_000 // still twice what the store holds
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	s := newStore(t, WithMaxBytes(bound), WithSweepInterval(0))
	r := gcra("per-key", sluice.PerHour(10)) // nothing goes idle within the test
	buf := make([]byte, 490)
	checks := make([]sluice.Check, 1)
	out := make([]sluice.Decision, 1)
	for i := range n {
		checks[0] = sluice.Check{Rule: r, Key: longKey(buf, 490, i)}
		if err := s.Take(context.Background(), t0.Add(time.Duration(i)*time.Microsecond), checks, out); err != nil || !out[0].Allowed {
			t.Fatalf("Take on new key %d = %+v, %v, want allowed", i, out[0], err)
		}
		if got := s.Bytes(); got > bound {
			t.Fatalf("after %d keys, Bytes() = %d, over the bound %d", i+1, got, bound)
		}
	}
	s.checkBytes(t, bound)
	perKey := float64(s.Bytes()) / float64(s.Len())
	if s.Len() >= n || float64(s.Bytes()) < bound-4*perKey {
		t.Errorf("after %d keys: %d held in %d bytes, want the bound (%d) nearly full", n, s.Len(), s.Bytes(), bound)
	}

	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d keys held of %d arrived: %d bytes counted (%.1f a key), %d on the heap (%.3f of the bound; 490-byte GCRA keys, %d shards)",
		s.Len(), n, s.Bytes(), perKey, heap, float64(heap)/bound, len(s.shards))
	if heap > bound*105/100 {
		t.Errorf("the store holds %d heap bytes, over 1.05 times its bound %d", heap, bound)
	}

	buf2 := make([]byte, 490)
	newest, oldest := 0, 0
	for i := range 1000 {
		if s.has(r, longKey(buf, 490, n-1-i)) {
			newest++
		}
		if s.has(r, longKey(buf2, 490, i)) {
			oldest++
		}
	}
	if newest != 1000 || oldest != 0 {
		t.Errorf("of the 1,000 newest keys %d are held, of the 1,000 oldest %d; want all and none", newest, oldest)
	}
	runtime.KeepAlive(s)
}

// TestDefaultMaxBytes: a store with the default options, given keys as
// long as the service hands it (490 bytes), holds near DefaultMaxBytes of
// heap and no more, however many arrive: 600,000 such keys would take
// 359 MB (342 MiB) under the key bound alone, as they did before the
// byte bound.
func TestDefaultMaxBytes(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("fills 256 MiB: too slow under the race detector and -short")
	}
	const n = 600_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	s, err := New(WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := gcra("per-key", sluice.PerHour(10))
	buf := make([]byte, 490)
	checks := make([]sluice.Check, 1)
	out := make([]sluice.Decision, 1)
	for i := range n {
		checks[0] = sluice.Check{Rule: r, Key: longKey(buf, 490, i)}
		if err := s.Take(context.Background(), t0.Add(time.Duration(i)*time.Microsecond), checks, out); err != nil || !out[0].Allowed {
			t.Fatalf("Take on new key %d = %+v, %v, want allowed", i, out[0], err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d keys held of %d arrived: %d heap bytes (%.1f MiB, %.1f a key; 490-byte GCRA keys, default options)",
		s.Len(), n, heap, float64(heap)/(1<<20), float64(heap)/float64(s.Len()))
	if heap > DefaultMaxBytes*105/100 || heap < DefaultMaxBytes*85/100 {
		t.Errorf("the store holds %d heap bytes, want 0.85 to 1.05 times DefaultMaxBytes (%d)", heap, DefaultMaxBytes)
	}
	runtime.KeepAlive(s)
}

// TestBytesPerKey measures what a key costs on the heap, for short and
// long keys, against what the store counts for it: never less, and for
// keys of 490 bytes or more at most 10% more; and a bucket key of up to 16
// bytes holds at most 64 bytes. (The store counts 64 bytes a key for its
// cell, what it costs in a table half full; tables are 16/25 to 4/5 full
// but after keys are dropped, which makes 40 to 50 bytes.)
//
//	go test -run 'TestBytesPerKey$' -v ./memory/
func TestBytesPerKey(t *testing.T) {
	n := 200_000
	if raceEnabled {
		n = 50_000
	}
	algos := sluice.Algos()
	for _, a := range algos {
		for _, klen := range []int{16, 100, 490, 512} {
			t.Run(fmt.Sprintf("%s/key=%d", a, klen), func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := newStore(t, WithMaxKeys(n+1<<16), WithMaxBytes(1<<40), WithSweepInterval(0))
				empty := s.Bytes()
				r := prep(sluice.Rule{Name: "per-key", Algorithm: a, Limit: sluice.PerHour(10)})
				buf := make([]byte, klen)
				out := make([]sluice.Decision, 1)
				for i := range n {
					checks := []sluice.Check{{Rule: r, Key: longKey(buf, klen, i)}}
					if err := s.Take(context.Background(), t0, checks, out); err != nil {
						t.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
				counted := float64(s.Bytes()-empty) / float64(n)
				t.Logf("%d keys of %d bytes, %s: %.1f heap bytes a key, %.1f counted", n, klen, a, heap, counted)
				most := 1.10
				if klen < 490 {
					most = 1.60
				}
				if counted < heap || counted > heap*most {
					t.Errorf("%.1f bytes counted a key, %.1f on the heap: want from 1 to %.2f times as many", counted, heap, most)
				}
				if sp := algo.Of(r); sp.Kind == algo.KindBucket && klen <= inlineKey && heap > 64 {
					t.Errorf("%.1f heap bytes a key, want at most 64 for a bucket key of up to 16 bytes", heap)
				}
				runtime.KeepAlive(s)
			})
		}
	}
}

// TestBytesChurn: mixed algorithms (the sliding log's rings growing),
// multi-checks, short and long keys, sweeps, from several goroutines, on
// a store small enough to evict by bytes: the count stays within the
// bound and equal to what the tables hold.
func TestBytesChurn(t *testing.T) {
	const bound = 64 << 10
	s := newStore(t, WithShards(4), WithMaxBytes(bound), WithSweepInterval(0))
	rules := []*sluice.PreparedRule{
		gcra("g", sluice.PerSecond(5)),
		prep(sluice.Rule{Name: "l", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerSecond(200)}),
		prep(sluice.Rule{Name: "c", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerSecond(5)}),
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 10))
			out := make([]sluice.Decision, 3)
			for i := range 3000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				checks := make([]sluice.Check, 1+rnd.IntN(3))
				for j := range checks {
					k := fmt.Sprint(rnd.IntN(200))
					if rnd.IntN(2) == 0 {
						k = strings.Repeat("x", rnd.IntN(3000)) + k
					}
					checks[j] = sluice.Check{Rule: rules[rnd.IntN(len(rules))], Key: k}
				}
				// Keys of 5 a second deny often: a store full of them
				// refuses a new key (ErrFull), which must keep the counts
				// as well as an eviction does.
				if err := s.Take(context.Background(), now, checks, out); err != nil && !errors.Is(err, ErrFull) {
					t.Error(err)
					return
				}
				if i%500 == 0 {
					s.Sweep(now)
				}
			}
		}()
	}
	wg.Wait()
	s.checkBytes(t, bound)
	for i := range s.shards {
		s.shards[i].check(t)
	}
}

// TestBytesOneByOne holds the count to the recount and the bound after
// every request, with one caller: keys of up to 8 KB over 16 shards,
// most of them empty, so that a shard often has nothing to evict and the
// others make the room; and a sliding log whose ring grows on a key
// already held. Each request's keys are held after it.
func TestBytesOneByOne(t *testing.T) {
	const bound = 64 << 10
	s := newStore(t, WithShards(16), WithMaxBytes(bound), WithSweepInterval(0))
	rules := []*sluice.PreparedRule{
		gcra("g", sluice.PerHour(5)),
		prep(sluice.Rule{Name: "l", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerHour(1000)}),
		prep(sluice.Rule{Name: "f", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(5)}),
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		var checks []sluice.Check
		switch rnd.IntN(3) {
		case 0: // a new long key
			checks = []sluice.Check{{Rule: rules[rnd.IntN(len(rules))], Key: strings.Repeat("k", rnd.IntN(8000)) + fmt.Sprint(i)}}
		case 1: // the log's hot key, whose ring grows
			checks = []sluice.Check{{Rule: rules[1], Key: "hot"}}
		default: // a policy of two new keys
			checks = []sluice.Check{
				{Rule: rules[0], Key: strings.Repeat("a", rnd.IntN(4000)) + fmt.Sprint(i)},
				{Rule: rules[2], Key: fmt.Sprint("b", i)},
			}
		}
		d := take(t, s, now, 1, checks...)
		if !d[len(d)-1].Allowed {
			t.Fatalf("request %d = %+v, want allowed", i, d)
		}
		s.checkBytes(t, bound)
		for _, c := range checks {
			if !s.has(c.Rule, c.Key) {
				t.Fatalf("request %d: its key %.20q... is not held", i, c.Key)
			}
		}
	}
}

// TestTooLarge: a key that could never fit in the byte bound is refused,
// with an error wrapping ErrTooLarge and sluice.ErrRefused, and nothing
// is stored; a request that would not store it is decided.
func TestTooLarge(t *testing.T) {
	const bound = 8 << 10
	s := newStore(t, WithShards(1), WithMaxBytes(bound), WithSweepInterval(0))
	r := gcra("g", sluice.PerHour(5))
	huge := strings.Repeat("h", bound)
	out := make([]sluice.Decision, 2)
	err := s.Take(context.Background(), t0, []sluice.Check{{Rule: r, Key: huge}}, out)
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, sluice.ErrRefused) {
		t.Errorf("Take on a key of %d bytes = %v, want an error wrapping ErrTooLarge and sluice.ErrRefused", len(huge), err)
	}
	err = s.Take(context.Background(), t0, []sluice.Check{{Rule: r, Key: "small"}, {Rule: r, Key: huge}}, out)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("Take on a policy with a key of %d bytes = %v, want an error wrapping ErrTooLarge", len(huge), err)
	}
	if s.Len() != 0 {
		t.Errorf("after the refusals, Len() = %d, want 0", s.Len())
	}
	if err := s.Take(context.Background(), t0, costed(0, []sluice.Check{{Rule: r, Key: huge}}), out); err != nil || !out[0].Allowed {
		t.Errorf("a peek on the key = %+v, %v; want decided", out[0], err)
	}
	s.checkBytes(t, bound)

	// A key whose copy could not fit, though its length could: 7,068
	// bytes, allocated as 8,192, in a room of 8,192 less the 1,024 of
	// the first table.
	copyTooLarge := strings.Repeat("c", bound-int(emptyTableBytes)-100)
	if err := s.Take(context.Background(), t0, []sluice.Check{{Rule: r, Key: copyTooLarge}}, out); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Take on a key of %d bytes = %v, want an error wrapping ErrTooLarge", len(copyTooLarge), err)
	}
	s.checkBytes(t, bound)

	// A key that fits only alone is held, alone: 6,145 bytes, allocated
	// as 6,528, with its cell, the table and a key of 1,000 (1,024),
	// would pass the bound.
	fits := strings.Repeat("f", 6145)
	other := strings.Repeat("o", 1000)
	take(t, s, t0, 1, sluice.Check{Rule: r, Key: other})
	if d := take(t, s, t0, 1, sluice.Check{Rule: r, Key: fits})[0]; !d.Allowed || !s.has(r, fits) || s.Len() != 1 {
		t.Errorf("Take on a key of %d bytes = %+v, held %v, Len() = %d; want allowed, held alone", len(fits), d, s.has(r, fits), s.Len())
	}
	s.checkBytes(t, bound)
}

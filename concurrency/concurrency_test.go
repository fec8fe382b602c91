package concurrency

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, opts ...Option) *Limiter {
	t.Helper()
	c, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSteps walks one key through acquires, releases and
// expiries at explicit times.
func TestSteps(t *testing.T) {
	c := newLimiter(t, WithSweepInterval(0))
	const ttl = 10 * time.Second
	leases := map[string]Lease{}
	steps := []struct {
		at      time.Duration
		do      string // "acquire NAME LIMIT" or "release NAME"
		want    sluice.Decision
		release bool // for release: whether it was held
	}{
		{0, "acquire a 2", sluice.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 10 * time.Second}, false},
		{time.Second, "acquire b 2", sluice.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 10 * time.Second}, false},
		{2 * time.Second, "acquire x 2", sluice.Decision{Limit: 2, RetryAfter: 8 * time.Second, ResetAfter: 9 * time.Second}, false},
		{2 * time.Second, "release a", sluice.Decision{}, true},
		{2 * time.Second, "release a", sluice.Decision{}, false},
		{2 * time.Second, "acquire c 2", sluice.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 10 * time.Second}, false},
		// The limit drops to 1: two leases must go before one fits.
		{3 * time.Second, "acquire x 1", sluice.Decision{Limit: 1, RetryAfter: 9 * time.Second, ResetAfter: 9 * time.Second}, false},
		{3 * time.Second, "acquire x 0", sluice.Decision{RetryAfter: sluice.Never, ResetAfter: 9 * time.Second}, false},
		// b's holder died: its lease expires at 11s.
		{11 * time.Second, "acquire d 2", sluice.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 10 * time.Second}, false},
		{11 * time.Second, "release b", sluice.Decision{}, false},
		{30 * time.Second, "acquire e 1", sluice.Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 10 * time.Second}, false},
	}
	for i, st := range steps {
		var name string
		var limit int64
		now := t0.Add(st.at)
		if n, _ := fmt.Sscanf(st.do, "acquire %s %d", &name, &limit); n == 2 {
			l, d, err := c.Acquire(now, "k", limit, ttl)
			if err != nil || d != st.want {
				t.Fatalf("step %d: Acquire(t0+%v, k, %d, %v) = %+v, %v; want %+v", i, st.at, limit, ttl, d, err, st.want)
			}
			if d.Allowed != (l != Lease{}) || (d.Allowed && (l.Key() != "k" || !l.Expires().Equal(now.Add(ttl)))) {
				t.Fatalf("step %d: lease %+v for %+v", i, l, d)
			}
			leases[name] = l
			continue
		}
		fmt.Sscanf(st.do, "release %s", &name)
		if got := c.Release(leases[name]); got != st.release {
			t.Fatalf("step %d: Release(%s) = %v, want %v", i, name, got, st.release)
		}
	}
	if got := c.InFlight(t0.Add(30*time.Second), "k"); got != 1 {
		t.Errorf("InFlight at the end = %d, want 1", got)
	}
	if c.Release(Lease{}) {
		t.Error("Release(Lease{}) = true, want false")
	}
}

func TestBadInput(t *testing.T) {
	c := newLimiter(t, WithSweepInterval(0))
	for _, in := range []struct {
		limit int64
		ttl   time.Duration
	}{{-1, time.Second}, {1, 0}, {1, -time.Second}} {
		if l, d, err := c.Acquire(t0, "k", in.limit, in.ttl); !errors.Is(err, ErrInvalidRequest) || d.Allowed || l != (Lease{}) {
			t.Errorf("Acquire(t0, k, %d, %v) = %+v, %+v, %v; want ErrInvalidRequest", in.limit, in.ttl, l, d, err)
		}
	}
	if c.Len() != 0 {
		t.Errorf("Len() = %d after bad input, want 0", c.Len())
	}
	// A ttl past the end of time saturates.
	l, d, err := c.Acquire(t0, "k", 1, time.Duration(1<<63-1))
	if err != nil || !d.Allowed || l.Expires().Before(t0) {
		t.Errorf("Acquire with the longest ttl = %+v, %+v, %v; want allowed, expiring in the future", l, d, err)
	}
	c.Close()
	if _, _, err := c.Acquire(t0, "k", 1, time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if !c.Release(l) {
		t.Error("Release after Close = false, want true: a held lease can always be given back")
	}
}

// TestExact: goroutines acquiring and releasing one key never
// hold more than the limit, and all of it is used.
func TestExact(t *testing.T) {
	const (
		workers = 16
		limit   = 5
		rounds  = 300
	)
	c := newLimiter(t, WithSweepInterval(0))
	var held, peak, granted atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, d, err := c.Acquire(t0, "k", limit, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					runtime.Gosched()
					continue
				}
				granted.Add(1)
				h := held.Add(1)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				runtime.Gosched()
				held.Add(-1)
				if !c.Release(l) {
					t.Error("Release of a held lease = false")
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("%d leases held at once, limit %d", p, limit)
	}
	if granted.Load() == 0 {
		t.Error("no lease was ever granted")
	}
	if got := c.InFlight(t0, "k"); got != 0 || c.Len() != 0 {
		t.Errorf("after every release: InFlight = %d, Len() = %d; want 0, 0", got, c.Len())
	}
	t.Logf("%d of %d acquires granted, at most %d at once", granted.Load(), workers*rounds, peak.Load())
}

// TestBounded: distinct keys beyond the bound evict the least
// recently used, an idle one first.
func TestBounded(t *testing.T) {
	c := newLimiter(t, WithShards(1), WithMaxKeys(100), WithSweepInterval(0))
	for i := range 10_000 {
		if _, d, _ := c.Acquire(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprint(i), 1, time.Hour); !d.Allowed {
			t.Fatalf("Acquire on new key %d = %+v, want allowed", i, d)
		}
	}
	if got := c.Len(); got != 100 {
		t.Errorf("Len() = %d, want 100", got)
	}
	if got := c.InFlight(t0.Add(time.Minute), "9999"); got != 1 {
		t.Errorf("the newest key has %d in flight, want 1", got)
	}
	if got := c.InFlight(t0.Add(time.Minute), "0"); got != 0 {
		t.Errorf("the oldest key has %d in flight, want 0: evicted", got)
	}

	// With room made by expiry, the LRU key with nothing in flight goes
	// rather than the coldest.
	c = newLimiter(t, WithShards(1), WithMaxKeys(3), WithSweepInterval(0))
	c.Acquire(t0, "cold", 1, time.Hour)
	c.Acquire(t0, "short", 1, time.Second)
	c.Acquire(t0, "warm", 1, time.Hour)
	c.Acquire(t0.Add(2*time.Second), "new", 1, time.Hour)
	for key, want := range map[string]int64{"cold": 1, "short": 0, "warm": 1, "new": 1} {
		if got := c.InFlight(t0.Add(2*time.Second), key); got != want {
			t.Errorf("InFlight(%s) = %d, want %d", key, got, want)
		}
	}
}

// TestSweeper: leases whose holders died are dropped by the
// sweeper as of the latest time seen; Close stops it.
func TestSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(WithShards(1), WithSweepInterval(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		c.Acquire(t0, "dead", 1, time.Second)
		c.Acquire(t0.Add(time.Hour), "alive", 1, time.Hour)
		time.Sleep(time.Minute)
		synctest.Wait()
		if c.Len() != 1 || c.InFlight(t0.Add(time.Hour), "alive") != 1 {
			t.Errorf("after the sweep, Len() = %d, want only the live key", c.Len())
		}
		if got := c.Sweep(t0.Add(3 * time.Hour)); got != 1 || c.Len() != 0 {
			t.Errorf("Sweep after every lease expired dropped %d, Len() = %d; want 1, 0", got, c.Len())
		}
		c.Close()
	})
}

// recount adds up what the limiter should count against its byte bound.
func (c *Limiter) recount() int64 {
	var b int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, h := range sh.keys {
			b += h.bytes()
		}
		sh.mu.Unlock()
	}
	return b
}

// TestBytesPerKey measures what a key with one lease costs on
// the heap, against what the limiter counts for it (holderBytes and the
// key's copy): the count is within 15% of the heap, the map's share
// varying as it grows (115 to 135 bytes a key besides the key, measured
// from 120,000 to 300,000 keys).
//
//	go test -run 'TestBytesPerKey$' -v ./concurrency/
func TestBytesPerKey(t *testing.T) {
	n := 200_000
	if raceEnabled {
		n = 50_000
	}
	for _, klen := range []int{16, 490} {
		t.Run(fmt.Sprintf("key=%d", klen), func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c := newLimiter(t, WithMaxKeys(n+1<<16), WithMaxBytes(1<<40), WithSweepInterval(0))
			for i := range n {
				if _, d, err := c.Acquire(t0, fmt.Sprintf("%0*d", klen, i), 1, time.Hour); err != nil || !d.Allowed {
					t.Fatalf("Acquire on new key %d = %+v, %v", i, d, err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
			counted := float64(c.Bytes()) / float64(n)
			t.Logf("%d keys of %d bytes, one lease each: %.1f heap bytes a key, %.1f counted", n, klen, heap, counted)
			if counted < heap*0.85 || counted > heap*1.15 {
				t.Errorf("%.1f bytes counted a key, %.1f on the heap: want within 15%%", counted, heap)
			}
			runtime.KeepAlive(c)
		})
	}
}

// TestMaxBytes: distinct long keys arriving at a limiter
// bounded in bytes keep its count within the bound and equal to what its
// holders add up to, over many shards, most nearly empty.
func TestMaxBytes(t *testing.T) {
	const bound = 64 << 10
	c := newLimiter(t, WithShards(16), WithMaxBytes(bound), WithSweepInterval(0))
	for i := range 5000 {
		key := strings.Repeat("k", i%3000) + fmt.Sprint(i)
		now := t0.Add(time.Duration(i) * time.Millisecond)
		l, d, err := c.Acquire(now, key, 2, time.Hour)
		if err != nil || !d.Allowed {
			t.Fatalf("Acquire on new key %d = %+v, %v", i, d, err)
		}
		if got, want := c.Bytes(), c.recount(); got != want || got > bound {
			t.Fatalf("after key %d: Bytes() = %d, the holders add up to %d, bound %d", i, got, want, bound)
		}
		if c.InFlight(now, key) != 1 {
			t.Fatalf("the lease of key %d was evicted at once", i)
		}
		if i%7 == 0 {
			c.Release(l)
		}
	}
}

// TestTooLarge: a key that could never fit in the byte bound is refused,
// holding nothing.
func TestTooLarge(t *testing.T) {
	const bound = 8 << 10
	c := newLimiter(t, WithShards(1), WithMaxBytes(bound), WithSweepInterval(0))
	huge := strings.Repeat("h", bound)
	if _, _, err := c.Acquire(t0, huge, 1, time.Second); !errors.Is(err, ErrTooLarge) || !errors.Is(err, sluice.ErrRefused) {
		t.Errorf("Acquire on a key of %d bytes = %v, want an error wrapping ErrTooLarge and sluice.ErrRefused", len(huge), err)
	}
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Errorf("after a refused key: Len() = %d, Bytes() = %d; want 0, 0", c.Len(), c.Bytes())
	}
}

// TestLargestKey: a key that takes the whole byte bound fits and keeps
// its lease, one byte more does not. The key's copy is of an allocator
// size class, so that the bytes counted for it are its length.
func TestLargestKey(t *testing.T) {
	const bound = holderBytes + 4096
	c := newLimiter(t, WithShards(1), WithMaxBytes(bound), WithSweepInterval(0))
	fits := strings.Repeat("f", bound-holderBytes)
	if _, d, err := c.Acquire(t0, fits, 1, time.Second); err != nil || !d.Allowed {
		t.Errorf("Acquire on a key of %d bytes, bound %d = %+v, %v; want allowed", len(fits), bound, d, err)
	}
	if got := c.InFlight(t0, fits); got != 1 || c.Bytes() != bound {
		t.Errorf("after the largest key: InFlight = %d, Bytes() = %d; want 1, %d", got, c.Bytes(), bound)
	}
	if _, _, err := c.Acquire(t0, fits+"f", 1, time.Second); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Acquire on a key of %d bytes, bound %d = %v; want ErrTooLarge", len(fits)+1, bound, err)
	}
}

// TestTooLargeCopy: a key whose length fits the byte bound but whose copy,
// as the allocator sizes it, does not is refused, holding nothing, rather
// than admitted and evicted at once with its lease.
func TestTooLargeCopy(t *testing.T) {
	const bound = 8 << 10
	c := newLimiter(t, WithShards(1), WithMaxBytes(bound), WithSweepInterval(0))
	key := strings.Repeat("k", bound-holderBytes) // copied into 8 KB
	for i := range 2 {
		if _, d, err := c.Acquire(t0, key, 1, time.Second); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Acquire %d on a key of %d bytes, bound %d = %+v, %v; want ErrTooLarge", i, len(key), bound, d, err)
		}
	}
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Errorf("after a refused key: Len() = %d, Bytes() = %d; want 0, 0", c.Len(), c.Bytes())
	}
}

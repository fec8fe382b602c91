package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memory"
)

var start = time.Unix(1_700_000_000, 0)

func prepare(t *testing.T, r sluice.Rule) *sluice.PreparedRule {
	t.Helper()
	p, err := r.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newStore is a lease.Store over a memory store and a, closed at the
// test's end.
func newStore(t *testing.T, a lease.Authority, opts ...lease.Option) *lease.Store {
	t.Helper()
	exact, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exact.Close() })
	s, err := lease.New(exact, a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func take(t *testing.T, s sluice.Store, now time.Time, checks ...sluice.Check) []sluice.Decision {
	t.Helper()
	out := make([]sluice.Decision, len(checks))
	if err := s.Take(t.Context(), now, checks, out); err != nil {
		t.Fatalf("Take at %v: %v", now.Sub(start), err)
	}
	return out
}

// count takes one unit n times at now from many goroutines, and returns
// how many were allowed.
func count(t *testing.T, s sluice.Store, now time.Time, n int, checks ...sluice.Check) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := range 16 {
		wg.Go(func() {
			out := make([]sluice.Decision, len(checks))
			for j := g; j < n; j += 16 {
				if err := s.Take(context.Background(), now, checks, out); err != nil {
					failed.Store(err)
					return
				}
				ok := true
				for _, d := range out {
					ok = ok && d.Allowed
				}
				if ok {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return allowed.Load()
}

// TestStoreExactCounts: many goroutines deciding one key on one lease are
// allowed exactly what the lease holds: a window's allowance, a bucket's
// tokens refilled at its share.
func TestStoreExactCounts(t *testing.T) {
	lz := sluice.Lease{Enabled: true, Renew: time.Second, TTL: 3 * time.Second}
	t.Run("window", func(t *testing.T) {
		s := newStore(t, lease.NewMemoryAuthority())
		p := prepare(t, sluice.Rule{Name: "w", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(1000), Lease: lz})
		// A first holder that reported no demand yet is given half the
		// limit, the rest left for a newcomer.
		if got := count(t, s, start, 2000, sluice.Check{Rule: p, Key: "k"}); got != 500 {
			t.Errorf("allowed %d of 2000 at one instant, want the allowance, 500", got)
		}
	})
	t.Run("bucket", func(t *testing.T) {
		s := newStore(t, lease.NewMemoryAuthority())
		p := prepare(t, sluice.Rule{Name: "b", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1000), Lease: lz})
		// A new lease of a key no one has held starts with its burst,
		// 500 of the key's 1000, as the key's bucket is full.
		if got := count(t, s, start, 2000, sluice.Check{Rule: p, Key: "k"}); got != 500 {
			t.Fatalf("allowed %d of 2000 on a new lease, want its burst, 500", got)
		}
		// 999ms later its share of 500 a second has refilled 499.5.
		if got := count(t, s, start.Add(999*time.Millisecond), 2000, sluice.Check{Rule: p, Key: "k"}); got != 499 {
			t.Errorf("allowed %d of 2000, want 499", got)
		}
	})
}

// TestStoreMixed: a request with leased and exact checks is
// all-or-nothing: a denial by either side charges neither.
func TestStoreMixed(t *testing.T) {
	lz := sluice.Lease{Enabled: true, Renew: time.Second}
	s := newStore(t, lease.NewMemoryAuthority())
	leased := prepare(t, sluice.Rule{Name: "leased", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(1000), Lease: lz})
	exact := prepare(t, sluice.Rule{Name: "exact", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(3)})
	both := []sluice.Check{{Rule: leased, Key: "k"}, {Rule: exact, Key: "k"}}
	if got := count(t, s, start, 10, both...); got != 3 {
		t.Fatalf("allowed %d of 10 with the exact rule at 3, want 3", got)
	}
	// The 7 the exact rule denied took nothing of the lease's 500.
	if got := count(t, s, start, 1000, both[0]); got != 497 {
		t.Errorf("the lease then allowed %d, want 497", got)
	}

	tiny := prepare(t, sluice.Rule{Name: "tiny", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(2), Lease: lz})
	wide := prepare(t, sluice.Rule{Name: "wide", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100)})
	if got := count(t, s, start, 10, sluice.Check{Rule: tiny, Key: "k"}, sluice.Check{Rule: wide, Key: "k"}); got != 1 {
		t.Fatalf("allowed %d of 10 with the lease at 1, want 1", got)
	}
	// The 9 the lease denied took nothing of the exact rule's 100.
	if d := take(t, s, start, sluice.Check{Rule: wide, Key: "k", Peek: true}); d[0].Remaining != 99 {
		t.Errorf("the exact rule has %d left, want 99", d[0].Remaining)
	}
}

// TestStoreBounded: a Store holds leases on at most WithMaxKeys keys; a new
// key past it is refused (ErrFull, so the rule's failure mode applies)
// while the others are in use, and takes the place of one idle for a TTL.
func TestStoreBounded(t *testing.T) {
	a := lease.NewMemoryAuthority()
	s := newStore(t, a, lease.WithMaxKeys(2))
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}})
	take(t, s, start, sluice.Check{Rule: p, Key: "a"})
	take(t, s, start, sluice.Check{Rule: p, Key: "b"})
	out := make([]sluice.Decision, 1)
	err := s.Take(t.Context(), start, []sluice.Check{{Rule: p, Key: "c"}}, out)
	if !errors.Is(err, lease.ErrFull) || !errors.Is(err, sluice.ErrNoRoom) {
		t.Fatalf("a third key: %v, want ErrFull", err)
	}
	take(t, s, start.Add(200*time.Millisecond), sluice.Check{Rule: p, Key: "a"})
	// b has had no request for its TTL (300ms): c takes its place.
	take(t, s, start.Add(400*time.Millisecond), sluice.Check{Rule: p, Key: "c"})
	var keys []string
	for _, h := range s.Leases() {
		keys = append(keys, h.Key)
	}
	if len(keys) != 2 || keys[0] != "a" || keys[1] != "c" {
		t.Errorf("Leases() holds %v, want [a c]", keys)
	}
	// c's renewal at 500ms runs in the background, and its grant comes
	// after c's last request: c is still dropped once idle, when a new key
	// needs its place after the renewal has landed.
	take(t, s, start.Add(500*time.Millisecond), sluice.Check{Rule: p, Key: "c"})
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		at := start.Add(time.Second + time.Duration(i)*time.Second)
		err := s.Take(t.Context(), at, []sluice.Check{{Rule: p, Key: fmt.Sprint("new", i)}}, out)
		if err != nil && !errors.Is(err, lease.ErrFull) {
			t.Fatal(err)
		}
		held := s.Leases()
		if !slices.ContainsFunc(held, func(h lease.Held) bool { return h.Key == "c" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c, idle since 500ms, is still held: %+v", held)
		}
	}
}

// flaky is an authority that fails while fail is set.
type flaky struct {
	lease.Authority
	fail atomic.Bool
}

var errDown = errors.New("authority down")

func (f *flaky) Renew(ctx context.Context, r lease.Request) (lease.Grant, error) {
	if f.fail.Load() {
		return lease.Grant{}, errDown
	}
	return f.Authority.Renew(ctx, r)
}

// TestStoreAuthorityDown: while its renewals fail a key keeps deciding on
// its lease until the lease expires; then the store errs, and a Limiter
// decides by the rule's failure mode.
func TestStoreAuthorityDown(t *testing.T) {
	a := &flaky{Authority: lease.NewMemoryAuthority()}
	s := newStore(t, a)
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100),
		Failure: sluice.FailClosed, Lease: sluice.Lease{Enabled: true, Renew: 100 * time.Millisecond, TTL: 300 * time.Millisecond}})
	c := sluice.Check{Rule: p, Key: "k"}
	take(t, s, start, c) // the first grant, of 50 a second: a new lease starts empty
	a.fail.Store(true)
	for _, at := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 299 * time.Millisecond} {
		if d := take(t, s, start.Add(at), c); !d[0].Allowed {
			t.Fatalf("at %v, on a lease good until 300ms: %+v", at, d[0])
		}
	}
	out := make([]sluice.Decision, 1)
	if err := s.Take(t.Context(), start.Add(300*time.Millisecond), []sluice.Check{c}, out); !errors.Is(err, errDown) {
		t.Fatalf("at 300ms, the lease expired: %v, want the authority's error", err)
	}
	lim, err := sluice.NewLimiter(s, sluice.WithClock(fixedClock(start.Add(400*time.Millisecond))))
	if err != nil {
		t.Fatal(err)
	}
	res, err := lim.Take(t.Context(), []sluice.Check{c}, nil)
	if err != nil || res.Allowed || !errors.Is(res.Err, errDown) {
		t.Fatalf("through a Limiter, failing closed: %+v, %v", res, err)
	}
	a.fail.Store(false)
	take(t, s, start.Add(500*time.Millisecond), c) // a new lease, empty
	if d := take(t, s, start.Add(600*time.Millisecond), c); !d[0].Allowed {
		t.Fatalf("with the authority back: %+v", d[0])
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// blocked is an authority whose renewals say when they start, on
// entered, and wait until release is closed.
type blocked struct {
	lease.Authority
	entered chan struct{}
	release chan struct{}
}

func (b *blocked) Renew(ctx context.Context, r lease.Request) (lease.Grant, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return lease.Grant{}, ctx.Err()
	}
	return b.Authority.Renew(ctx, r)
}

// TestStoreRenewalsBounded: with every renewal slot taken, the first
// request of a new key is shed, neither waited for nor let through; a
// first request waits for its grant at most until its context ends.
func TestStoreRenewalsBounded(t *testing.T) {
	b := &blocked{Authority: lease.NewMemoryAuthority(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := newStore(t, b, lease.WithMaxRenewals(1))
	// A TTL of an hour: a renewal gives up after its TTL, and this one
	// must hold its slot until the test releases it.
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true, TTL: time.Hour}})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		errc <- s.Take(ctx, start, []sluice.Check{{Rule: p, Key: "a"}}, make([]sluice.Decision, 1))
	}()
	select {
	case <-b.entered: // a's first renewal holds the one slot
	case <-time.After(10 * time.Second):
		t.Fatal("a's first renewal did not start")
	}
	err := s.Take(t.Context(), start, []sluice.Check{{Rule: p, Key: "b"}}, make([]sluice.Decision, 1))
	if !errors.Is(err, sluice.ErrShed) {
		t.Fatalf("b's first request with the slot taken: %v, want ErrShed", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a's first request, canceled while it waits: %v", err)
	}
	close(b.release)
	if d := take(t, s, start, sluice.Check{Rule: p, Key: "a"}); !d[0].Allowed {
		t.Fatalf("a once the authority answers: %+v", d[0])
	}
}

// TestStoreClose: Close gives every lease back; the Store then refuses
// requests.
func TestStoreClose(t *testing.T) {
	a := lease.NewMemoryAuthority()
	s := newStore(t, a, lease.WithHolder("me"))
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}})
	for _, k := range []string{"a", "b"} {
		take(t, s, start, sluice.Check{Rule: p, Key: k})
	}
	held := s.Leases()
	if len(held) != 2 || held[0].Rule != "r" || held[0].Key != "a" || held[0].Share != 50 || held[0].Kind != lease.Bucket ||
		!held[0].Expires.Equal(start.Add(300*time.Millisecond)) {
		t.Fatalf("Leases() = %+v", held)
	}
	hs, err := a.Holdings(t.Context(), "r:a")
	if err != nil || len(hs) != 1 || hs[0].Holder != "me" {
		t.Fatalf("the authority holds %+v, %v; want me", hs, err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"r:a", "r:b"} {
		if hs, _ := a.Holdings(t.Context(), k); len(hs) != 0 {
			t.Errorf("after Close the authority holds %+v for %s", hs, k)
		}
	}
	err = s.Take(t.Context(), start, []sluice.Check{{Rule: p, Key: "a"}}, make([]sluice.Decision, 1))
	if !errors.Is(err, lease.ErrClosed) {
		t.Errorf("Take after Close: %v, want ErrClosed", err)
	}
}

// TestStoreOptions: bad options are refused.
func TestStoreOptions(t *testing.T) {
	exact, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	a := lease.NewMemoryAuthority()
	for _, o := range []lease.Option{lease.WithHolder(""), lease.WithMaxKeys(0), lease.WithMaxRenewals(-1), lease.WithTimeout(-time.Second)} {
		if _, err := lease.New(exact, a, o); err == nil {
			t.Errorf("a bad option was taken")
		}
	}
	if _, err := lease.New(nil, a); err == nil {
		t.Errorf("New without an exact store: no error")
	}
}

// TestStoresShareKey: two Stores leasing one key from one authority, with
// their renewals in the background, admit together no more than the
// limit's bound: a window's Rate in each window, a bucket's Burst plus
// Rate per second over any run of windows; and a good part of it while
// their demand is over it. The requests' time waits, at each millisecond,
// for the renewals in flight: it runs far faster than the machine's, and
// a loaded machine would otherwise let a lease expire between two steps.
func TestStoresShareKey(t *testing.T) {
	for _, algo := range []sluice.Algo{sluice.AlgoFixedWindow, sluice.AlgoTokenBucket} {
		t.Run(string(algo), func(t *testing.T) {
			a := lease.NewMemoryAuthority()
			p := prepare(t, sluice.Rule{Name: "r", Algorithm: algo, Limit: sluice.PerSecond(1000), Lease: sluice.Lease{Enabled: true}})
			stores := []*lease.Store{newStore(t, a, lease.WithHolder("a")), newStore(t, a, lease.WithHolder("b"))}
			asks := []int{4, 3} // units a millisecond: 1.4 times the limit together
			const windows = 8
			var admitted [windows]int64
			out := make([]sluice.Decision, 1)
			c := []sluice.Check{{Rule: p, Key: "k"}}
			for ms := range windows * 1000 {
				now := start.Add(time.Duration(ms) * time.Millisecond)
				for i, s := range stores {
					settle(t, s, now, p, "k")
					for range asks[i] {
						if err := s.Take(t.Context(), now, c, out); err != nil {
							t.Fatalf("at %v: %v", now.Sub(start), err)
						}
						if out[0].Allowed {
							admitted[ms/1000]++
						}
					}
				}
			}
			t.Logf("admitted per window: %v", admitted)
			for i := range admitted {
				var sum int64
				for j := i; j < windows; j++ {
					sum += admitted[j]
					bound := int64(j-i+1) * 1000
					if algo != sluice.AlgoFixedWindow {
						bound += 1000 // the burst
					}
					if sum > bound {
						t.Errorf("windows %d to %d admitted %d, above the bound %d", i, j, sum, bound)
					}
				}
			}
			for i := 2; i < windows; i++ {
				if admitted[i] < 500 {
					t.Errorf("window %d admitted %d of a limit of 1000 asked 1400", i, admitted[i])
				}
			}
		})
	}
}

// TestStorePeekNegativeShadow: on a lease as in the exact stores, a peek
// is allowed and takes nothing, a negative cost is refused (Never) and
// takes nothing, and a leased rule in shadow mode reports its decision
// without denying the request.
func TestStorePeekNegativeShadow(t *testing.T) {
	s := newStore(t, lease.NewMemoryAuthority())
	lz := sluice.Lease{Enabled: true, Renew: time.Second}
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(10), Lease: lz})
	c := sluice.Check{Rule: p, Key: "k"}
	if d := take(t, s, start, sluice.Check{Rule: p, Key: "k", Peek: true}); !d[0].Allowed || d[0].Remaining != 5 {
		t.Errorf("a peek: %+v, want allowed with the allowance of 5 left", d[0])
	}
	if d := take(t, s, start, sluice.Check{Rule: p, Key: "k", Cost: -1}); d[0].Allowed || d[0].RetryAfter != sluice.Never {
		t.Errorf("a negative cost: %+v, want denied, Never", d[0])
	}
	if d := take(t, s, start, sluice.Check{Rule: p, Key: "k", Cost: 5}); !d[0].Allowed || d[0].Remaining != 0 {
		t.Errorf("the allowance after a peek and a refusal: %+v, want all 5 taken", d[0])
	}
	if d := take(t, s, start, c); d[0].Allowed {
		t.Errorf("past the allowance: %+v, want denied", d[0])
	}
	shadow := prepare(t, sluice.Rule{Name: "shadow", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(2), Shadow: true, Lease: lz})
	exact := prepare(t, sluice.Rule{Name: "exact", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100)})
	for i := range 3 {
		d := take(t, s, start, sluice.Check{Rule: shadow, Key: "k"}, sluice.Check{Rule: exact, Key: "k"})
		if d[0].Allowed != (i == 0) || !d[1].Allowed {
			t.Errorf("request %d with a shadow lease of 1: %+v, want the shadow check allowed only first, the request always", i, d)
		}
	}
	if d := take(t, s, start, sluice.Check{Rule: exact, Key: "k", Peek: true}); d[0].Remaining != 97 {
		t.Errorf("the exact rule has %d left, want 97: a shadow denial denies nothing", d[0].Remaining)
	}
}

// BenchmarkStoreTake is a leased decision's cost in the process, against
// the memory store's exact one in the same run: one key, every goroutine.
func BenchmarkStoreTake(b *testing.B) {
	exact, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	defer exact.Close()
	s, err := lease.New(exact, lease.NewMemoryAuthority())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, c := range []struct {
		name  string
		store sluice.Store
		lease bool
	}{{"store=memory", exact, false}, {"store=lease", s, true}} {
		b.Run(c.name, func(b *testing.B) {
			r, err := sluice.Rule{Name: c.name, Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1_000_000),
				Lease: sluice.Lease{Enabled: c.lease}}.Prepare()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				checks := []sluice.Check{{Rule: r, Key: "k"}}
				out := make([]sluice.Decision, 1)
				for i := 0; pb.Next(); i++ {
					now := start.Add(time.Duration(i) * time.Microsecond)
					if err := c.store.Take(context.Background(), now, checks, out); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// gated is an authority whose releases wait until gate is closed and say
// when they are done, and whose renewals of the keys in slow wait until
// slowGate is closed; renewed counts the renewals per key.
type gated struct {
	lease.Authority
	gate     chan struct{}
	released chan string
	slow     map[string]bool
	slowGate chan struct{}
	mu       sync.Mutex
	renewed  map[string]int
}

func newGated() *gated {
	return &gated{Authority: lease.NewMemoryAuthority(), gate: make(chan struct{}), released: make(chan string, 16),
		slow: map[string]bool{}, slowGate: make(chan struct{}), renewed: map[string]int{}}
}

func (g *gated) Renew(ctx context.Context, r lease.Request) (lease.Grant, error) {
	g.mu.Lock()
	g.renewed[r.Key]++
	g.mu.Unlock()
	if g.slow[r.Key] {
		select {
		case <-g.slowGate:
		case <-ctx.Done():
			return lease.Grant{}, ctx.Err()
		}
	}
	return g.Authority.Renew(ctx, r)
}

func (g *gated) Release(ctx context.Context, key, holder string) error {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := g.Authority.Release(ctx, key, holder)
	g.released <- key
	return err
}

// openAtEnd opens g's gates when the test ends, before the Store's
// Close, which releases through them, however the test ends; and returns
// the function that opens slowGate before that.
func (g *gated) openAtEnd(t *testing.T) (unslow func()) {
	var once sync.Once
	unslow = func() { once.Do(func() { close(g.slowGate) }) }
	t.Cleanup(func() {
		unslow()
		close(g.gate)
	})
	return unslow
}

func (g *gated) renewals(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renewed[key]
}

// TestStoreLateRelease: a key swept, and back before the release of its
// old lease is done, is not forgotten by that release: its first renewal
// waits for it.
func TestStoreLateRelease(t *testing.T) {
	g := newGated()
	s := newStore(t, g, lease.WithHolder("me"), lease.WithMaxKeys(1))
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true, TTL: time.Minute}})
	take(t, s, start, sluice.Check{Rule: p, Key: "a"})
	// b sweeps a out, c sweeps b out: their releases wait on the gate.
	take(t, s, start.Add(2*time.Minute), sluice.Check{Rule: p, Key: "b"})
	done := make(chan error, 1)
	go func() {
		done <- s.Take(t.Context(), start.Add(4*time.Minute), []sluice.Check{{Rule: p, Key: "a"}}, make([]sluice.Decision, 1))
	}()
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-g.released:
		case <-time.After(10 * time.Second):
			t.Fatal("the releases of a and b did not end")
		}
	}
	hs, err := g.Holdings(t.Context(), "r:a")
	if err != nil || len(hs) != 1 || hs[0].Holder != "me" {
		t.Errorf("after the old release the authority holds %+v, %v for a; want me's new lease", hs, err)
	}
}

// TestStoreQueuedBehindRelease: a first grant queued while a release
// holds the only slot is sent when the release ends, and the key is
// leased: the release frees its slot before it sends the queue.
func TestStoreQueuedBehindRelease(t *testing.T) {
	g := newGated()
	s := newStore(t, g, lease.WithHolder("me"), lease.WithMaxKeys(1), lease.WithMaxRenewals(1))
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true, TTL: time.Minute}})
	take(t, s, start, sluice.Check{Rule: p, Key: "a"})
	// b sweeps a out: a's release takes the slot and waits on the gate,
	// so b's first grant queues, and its request gives up waiting.
	at := start.Add(2 * time.Minute)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	err := s.Take(ctx, at, []sluice.Check{{Rule: p, Key: "b"}}, make([]sluice.Decision, 1))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b's first request behind a's release = %v, want its context's end", err)
	}
	close(g.gate)
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	d := make([]sluice.Decision, 1)
	if err := s.Take(ctx, at, []sluice.Check{{Rule: p, Key: "b"}}, d); err != nil || !d[0].Allowed {
		t.Fatalf("b after a's release ended = %+v, %v; want allowed on its lease", d[0], err)
	}
}

// TestStoreQueuedWhileSlotsBusy: renewals that queue while every slot is
// out are each sent once when one comes back: none is lost, none is sent
// twice (which would close its entry's done twice and crash).
func TestStoreQueuedWhileSlotsBusy(t *testing.T) {
	g := newGated()
	close(g.gate) // releases pass
	s := newStore(t, g, lease.WithMaxRenewals(1))
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true, TTL: time.Hour}})
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		take(t, s, start, sluice.Check{Rule: p, Key: k})
	}
	g.mu.Lock()
	g.slow["r:a"] = true // a's renewal holds the only slot
	g.mu.Unlock()
	at := start.Add(time.Second) // past Renew: each is due
	for _, k := range keys {
		take(t, s, at, sluice.Check{Rule: p, Key: k})
	}
	close(g.slowGate)
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range keys {
		for g.renewals("r:"+k) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%s renewed %d times after its first grant, want once", k, g.renewals("r:"+k)-1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Once every grant is applied (a peek applies it), nothing is in
	// flight: a renewal sent twice would show as a third.
	for renewing := true; renewing; {
		if time.Now().After(deadline) {
			t.Fatalf("renewals still in flight after 10s: %+v", s.Leases())
		}
		renewing = false
		for _, k := range keys {
			take(t, s, at, sluice.Check{Rule: p, Key: k, Peek: true})
		}
		for _, h := range s.Leases() {
			renewing = renewing || h.Renewing
		}
	}
	for _, k := range keys {
		if n := g.renewals("r:" + k); n != 2 {
			t.Errorf("%s: %d renewals, want its first grant and one", k, n)
		}
	}
}

// TestStoreFirstGrantsBounded: grants for new keys take at most half of
// the renewal slots, so that with new keys flooding in, a live lease
// still renews.
func TestStoreFirstGrantsBounded(t *testing.T) {
	g := newGated()
	g.slow["r:n0"], g.slow["r:n1"] = true, true
	s := newStore(t, g, lease.WithMaxRenewals(4))
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true, TTL: time.Hour}})
	take(t, s, start, sluice.Check{Rule: p, Key: "live"})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, k := range []string{"n0", "n1"} {
		wg.Go(func() { _ = s.Take(ctx, start, []sluice.Check{{Rule: p, Key: k}}, make([]sluice.Decision, 1)) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for g.renewals("r:n0") == 0 || g.renewals("r:n1") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first grants of n0 and n1 did not start")
		}
		time.Sleep(time.Millisecond)
	}
	err := s.Take(t.Context(), start, []sluice.Check{{Rule: p, Key: "n2"}}, make([]sluice.Decision, 1))
	if !errors.Is(err, sluice.ErrShed) {
		t.Errorf("a third new key with two first grants in flight: %v, want ErrShed", err)
	}
	// live's renewal is due after 100ms: it starts on a slot still free.
	take(t, s, start.Add(200*time.Millisecond), sluice.Check{Rule: p, Key: "live"})
	for g.renewals("r:live") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the live lease did not renew")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(g.slowGate)
	close(g.gate) // for Close's releases
	wg.Wait()
}

// TestStoreCloseWindow: Close gives a fixed window lease back, and the
// authority still counts what it admitted in its window, so that another
// holder is not given it again there.
func TestStoreCloseWindow(t *testing.T) {
	a := lease.NewMemoryAuthority()
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}})
	s := newStore(t, a, lease.WithHolder("one"))
	n := count(t, s, start, 100, sluice.Check{Rule: p, Key: "k"})
	if n == 0 {
		t.Fatal("nothing admitted")
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if hs, err := a.Holdings(t.Context(), "r:k"); err != nil || len(hs) != 0 {
		t.Errorf("after Close the authority holds %+v, %v; want nothing live", hs, err)
	}
	l := sluice.PerSecond(100)
	g, err := a.Renew(t.Context(), lease.Request{Key: "r:k", Holder: "two", Kind: lease.Window, Limit: l, Demand: 1000,
		Window: start.Unix(), TTL: time.Second, Now: start.Add(10 * time.Millisecond)})
	if err != nil || g.Allowance > 100-n || g.Share != 100 {
		t.Errorf("another holder in the same window: %+v, %v; want an allowance of at most %d, what one left, and all of later windows", g, err, 100-n)
	}
}

// TestStoreSparse: a key asked less often than its lease's TTL is
// allowed each time, on every leased algorithm: its lease has expired
// by the next request, and the new one starts with what the key's bucket
// refilled meanwhile. A key drained and asked again soon after its lease
// ended gets only what refilled since the lease's end.
func TestStoreSparse(t *testing.T) {
	for _, algo := range []sluice.Algo{sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA, sluice.AlgoFixedWindow} {
		t.Run(string(algo), func(t *testing.T) {
			s := newStore(t, lease.NewMemoryAuthority())
			p := prepare(t, sluice.Rule{Name: "r", Algorithm: algo, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}})
			for i := range 10 {
				at := start.Add(time.Duration(i) * 2 * time.Second)
				if d := take(t, s, at, sluice.Check{Rule: p, Key: "k"}); !d[0].Allowed {
					t.Fatalf("request %d, 2s after the one before: %+v, want allowed", i, d[0])
				}
			}
		})
	}
	s := newStore(t, lease.NewMemoryAuthority())
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}})
	// Alone and asking nothing yet, the first lease is half the limit:
	// its burst of 50, full. The lease ends at 300ms.
	if got := count(t, s, start, 1000, sluice.Check{Rule: p, Key: "k"}); got != 50 {
		t.Fatalf("allowed %d of 1000 on a new lease, want its burst, 50", got)
	}
	// At 400ms: 100ms of refill since, 10 units, and none of the time the
	// lease was held, which its holder may have spent.
	if got := count(t, s, start.Add(400*time.Millisecond), 1000, sluice.Check{Rule: p, Key: "k"}); got != 10 {
		t.Errorf("allowed %d of 1000 100ms after the lease ended, want 10", got)
	}
}

// TestStoreEarlyRenewal: a first lease, granted before any demand was
// measured, is half the quota; a holder that denies on it while the
// quota is not all asked for renews at that denial rather than waiting
// out a long Renew, and takes what it needs.
func TestStoreEarlyRenewal(t *testing.T) {
	s := newStore(t, lease.NewMemoryAuthority())
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100),
		Lease: sluice.Lease{Enabled: true, Renew: time.Second}})
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second / 72) } // 72 a second
	allowed := func(i int) bool { return take(t, s, at(i), sluice.Check{Rule: p, Key: "k"})[0].Allowed }
	for i := range 50 {
		if !allowed(i) {
			t.Fatalf("request %d of the first 50: denied, want the first lease's allowance of 50", i)
		}
	}
	// The 51st is denied on the lease, and renews.
	if allowed(50) {
		t.Fatal("request 51 allowed past an allowance of 50")
	}
	if ls := s.Leases(); len(ls) != 1 || !ls[0].Renewing {
		t.Fatalf("no renewal started at the denial: %+v", ls)
	}
	settle(t, s, at(50), p, "k")
	if ls := s.Leases(); len(ls) != 1 || ls[0].Allowance <= 50 {
		t.Fatalf("no early renewal after the denial: %+v", ls)
	}
	for i := 51; i < 72; i++ {
		if !allowed(i) {
			t.Fatalf("request %d at 72 a second of 100, after the early renewal: denied (%+v)", i+1, s.Leases())
		}
	}
}

// counting is an authority that counts its renewals.
type counting struct {
	lease.Authority
	n atomic.Int64
}

func (c *counting) Renew(ctx context.Context, r lease.Request) (lease.Grant, error) {
	c.n.Add(1)
	return c.Authority.Renew(ctx, r)
}

// settle peeks at rule p's key at at until the Store has no renewal of
// it in flight: a peek applies a grant that came.
func settle(t *testing.T, s *lease.Store, at time.Time, p *sluice.PreparedRule, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		take(t, s, at, sluice.Check{Rule: p, Key: key, Peek: true})
		if ls := s.Leases(); len(ls) == 1 && !ls[0].Renewing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a renewal still in flight after 10s: %+v", s.Leases())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStoreStretch: a quiet key (asked far below its limit) renews less
// and less often, up to 32 Renews apart, instead of every Renew; when its
// demand rises past its share, it renews at once and takes more.
func TestStoreStretch(t *testing.T) {
	a := &counting{Authority: lease.NewMemoryAuthority()}
	s := newStore(t, a)
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(1000), Lease: sluice.Lease{Enabled: true}})
	// 10 a second for 60s: 600 Renews of 100ms.
	for i := range 600 {
		at := start.Add(time.Duration(i) * 100 * time.Millisecond)
		if d := take(t, s, at, sluice.Check{Rule: p, Key: "k"}); !d[0].Allowed {
			t.Fatalf("request %d at 10 a second of 1000: denied: %+v, %+v, %d renewals", i, d[0], s.Leases(), a.n.Load())
		}
		settle(t, s, at, p, "k")
	}
	t.Logf("%d renewals over 60s of a quiet key", a.n.Load())
	if n := a.n.Load(); n > 40 {
		t.Errorf("%d renewals over 60s of a quiet key, want at most 40 (600 without stretching)", n)
	}
	// 900 a second for a second: past the quiet share, which it renews
	// for early.
	before, allowed := a.n.Load(), 0
	for i := range 900 {
		at := start.Add(60*time.Second + time.Duration(i)*time.Second/900)
		if take(t, s, at, sluice.Check{Rule: p, Key: "k"})[0].Allowed {
			allowed++
		}
		settle(t, s, at, p, "k")
	}
	t.Logf("at 900 a second: %d of 900 allowed, %d renewals", allowed, a.n.Load()-before)
	if a.n.Load() == before || allowed < 800 {
		t.Errorf("at 900 a second: %d allowed, %d renewals; want 800 or more, and a renewal", allowed, a.n.Load()-before)
	}
}

// TestStoreNearLimit: one process asking a key 50 to 90 a second of its
// 100, 70 on average, renewing every second, is denied nothing once its
// demand is measured: a
// busy key's lone holder is given all the headroom, not its mean demand
// and half of it (which a window of 90 would pass).
func TestStoreNearLimit(t *testing.T) {
	s := newStore(t, lease.NewMemoryAuthority())
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true, Renew: time.Second}})
	counts := []int{50, 90, 55, 85, 50, 90, 55, 85, 50, 90, 55, 85}
	denied := 0
	for w, n := range counts {
		for i := range n {
			at := start.Add(time.Duration(w)*time.Second + time.Duration(i)*time.Second/time.Duration(n))
			if !take(t, s, at, sluice.Check{Rule: p, Key: "k"})[0].Allowed && w >= 2 {
				denied++
			}
			settle(t, s, at, p, "k")
		}
	}
	if denied > 0 {
		t.Errorf("%d denied after the first two windows, at 50 to 90 a second of 100: want none (%+v)", denied, s.Leases())
	}
}

// TestAuthorityKey: two rules' keys never meet at the authority, whatever
// ':' and '%' their names and keys hold.
func TestAuthorityKey(t *testing.T) {
	pairs := [][2][2]string{
		{{"a:b", "K"}, {"a", "b:K"}},
		{{"a%3Ab", "K"}, {"a:b", "K"}},
		{{"a", "%3AK"}, {"a:", "K"}},
	}
	for _, p := range pairs {
		x, y := lease.AuthorityKey(p[0][0], p[0][1]), lease.AuthorityKey(p[1][0], p[1][1])
		if x == y {
			t.Errorf("rule %q key %q and rule %q key %q meet at %q", p[0][0], p[0][1], p[1][0], p[1][1], x)
		}
	}
}

// TestStoreKeyTooLong: a key past what the authorities take is refused as
// bad input (sluice.ErrRefused), so that the Limiter answers it as such
// rather than by the rule's failure mode, and nothing is kept for it.
func TestStoreKeyTooLong(t *testing.T) {
	s := newStore(t, lease.NewMemoryAuthority())
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100), Lease: sluice.Lease{Enabled: true}})
	long := strings.Repeat("k", lease.MaxKeyBytes)
	err := s.Take(t.Context(), start, []sluice.Check{{Rule: p, Key: long}}, make([]sluice.Decision, 1))
	if !errors.Is(err, sluice.ErrRefused) {
		t.Fatalf("Take of a %d-byte key: %v, want sluice.ErrRefused", len(long), err)
	}
	if ls := s.Leases(); len(ls) != 0 {
		t.Errorf("after the refusal the Store holds %+v", ls)
	}
}

// batching is a Batcher over the memory authority that counts its calls
// and holds each RenewBatch until the test lets it go.
type batching struct {
	lease.Authority
	gate  chan struct{}
	mu    sync.Mutex
	sizes []int // each call's renewals, a Renew's as 1
}

func (b *batching) Renew(ctx context.Context, r lease.Request) (lease.Grant, error) {
	b.mu.Lock()
	b.sizes = append(b.sizes, 1)
	b.mu.Unlock()
	return b.Authority.Renew(ctx, r)
}

func (b *batching) RenewBatch(ctx context.Context, rs []lease.Request, gs []lease.Grant, errs []error) {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(rs))
	b.mu.Unlock()
	select {
	case <-b.gate:
	case <-ctx.Done():
	}
	for i, r := range rs {
		gs[i], errs[i] = b.Authority.Renew(ctx, r)
	}
}

func (b *batching) calls() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sizes)
}

// TestStoreBatchedRenewals: with a Batcher for authority, the routine
// renewals of many keys due together go in a few calls, not one each,
// and each key gets its own grant. One call at a time (WithMaxRenewals(1))
// held open by the test makes the count exact whatever the timing: the
// first call takes what queued before its timer fired, and the rest go
// in calls of at most 64 once it ends.
func TestStoreBatchedRenewals(t *testing.T) {
	b := &batching{Authority: lease.NewMemoryAuthority(), gate: make(chan struct{})}
	close(b.gate) // first grants pass
	s := newStore(t, b, lease.WithMaxRenewals(1))
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(1000), Lease: sluice.Lease{Enabled: true}})
	const keys = 100
	for i := range keys {
		take(t, s, start, sluice.Check{Rule: p, Key: fmt.Sprint(i)})
	}
	firsts := len(b.calls())
	if firsts != keys {
		t.Fatalf("%d calls for %d first grants, want one each: a request waits for its own", firsts, keys)
	}
	b.gate = make(chan struct{})
	at := start.Add(150 * time.Millisecond) // past Renew: every key is due
	for i := range keys {
		if d := take(t, s, at, sluice.Check{Rule: p, Key: fmt.Sprint(i)}); !d[0].Allowed {
			t.Fatalf("key %d denied on its lease: %+v", i, d[0])
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(b.calls()) == firsts {
		if time.Now().After(deadline) {
			t.Fatal("no renewal sent 10s after 100 keys fell due")
		}
		time.Sleep(time.Millisecond)
	}
	close(b.gate)
	for {
		renewing := 0
		for _, h := range s.Leases() {
			if h.Renewing {
				renewing++
			}
		}
		if n := 0; renewing == 0 {
			for _, c := range b.calls()[firsts:] {
				n += c
			}
			if n != keys {
				t.Fatalf("the calls renewed %d keys, want %d: %v", n, keys, b.calls()[firsts:])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("renewals still in flight after 10s: %v", b.calls()[firsts:])
		}
		// A request applies the grant the background brought.
		for i := range keys {
			take(t, s, at, sluice.Check{Rule: p, Key: fmt.Sprint(i), Peek: true})
		}
		time.Sleep(time.Millisecond)
	}
	calls := b.calls()[firsts:]
	t.Logf("100 renewals in calls of %v", calls)
	if len(calls) > 3 || slices.Max(calls) > 64 {
		t.Errorf("100 renewals in calls of %v, want at most 3 calls of at most 64", calls)
	}
	for _, h := range s.Leases() {
		if h.Share <= 0 || h.Holders != 1 {
			t.Errorf("key %s after its batched renewal: %+v", h.Key, h)
		}
	}
}

// TestStoreFirstGrantTimeout: a request waiting for its key's first grant
// from an authority that does not answer gives up after WithTimeout, though
// its context has no deadline and the lease's TTL is an hour, and a
// Limiter decides it by the rule's failure mode; the grant is still sought,
// and the key's next request, once it came, is decided on it.
func TestStoreFirstGrantTimeout(t *testing.T) {
	g := newGated()
	g.slow["r:k"] = true
	s := newStore(t, g, lease.WithTimeout(20*time.Millisecond))
	unslow := g.openAtEnd(t)
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100),
		Failure: sluice.FailOpen, Lease: sluice.Lease{Enabled: true, TTL: time.Hour}})
	c := sluice.Check{Rule: p, Key: "k"}
	errc := make(chan error, 1)
	go func() { errc <- s.Take(context.Background(), start, []sluice.Check{c}, make([]sluice.Decision, 1)) }()
	select {
	case err := <-errc:
		if !errors.Is(err, lease.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a first grant the authority holds: %v, want ErrTimeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a request waiting for a first grant the authority holds did not give up in 20s")
	}
	lim, err := sluice.NewLimiter(s, sluice.WithClock(fixedClock(start)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := lim.Take(context.Background(), []sluice.Check{c}, nil)
	if err != nil || !res.Allowed || !errors.Is(res.Err, lease.ErrTimeout) {
		t.Fatalf("through a Limiter, failing open: %+v, %v", res, err)
	}
	if n := g.renewals("r:k"); n != 1 {
		t.Errorf("%d renewals of the key, want the one still in flight", n)
	}
	unslow()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := make([]sluice.Decision, 1)
		// At the grant's own time, when no renewal is due: the count
		// below is of first grants.
		err := s.Take(context.Background(), start, []sluice.Check{c}, out)
		if err == nil {
			if !out[0].Allowed {
				t.Errorf("on the grant: %+v", out[0])
			}
			break
		}
		if !errors.Is(err, lease.ErrTimeout) || time.Now().After(deadline) {
			t.Fatalf("once the authority answered: %v", err)
		}
	}
	if n := g.renewals("r:k"); n != 1 {
		t.Errorf("%d renewals of the key, want the one that timed out its waiter", n)
	}
}

// TestStoreLateAuthority: with the only place for a first grant held by
// one a request gave up waiting for, a new key's request is decided by
// its rule's failure mode (ErrTimeout), not shed as under a flood of new
// keys: the authority is late, not busy. Once the late grant came, first
// grants go on.
func TestStoreLateAuthority(t *testing.T) {
	g := newGated()
	g.slow["r:a"] = true
	s := newStore(t, g, lease.WithMaxRenewals(2), lease.WithTimeout(20*time.Millisecond)) // one first grant at a time
	unslow := g.openAtEnd(t)
	p := prepare(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(100),
		Failure: sluice.FailOpen, Lease: sluice.Lease{Enabled: true, TTL: time.Hour}})
	out := make([]sluice.Decision, 1)
	if err := s.Take(context.Background(), start, []sluice.Check{{Rule: p, Key: "a"}}, out); !errors.Is(err, lease.ErrTimeout) {
		t.Fatalf("a, its grant held: %v, want ErrTimeout", err)
	}
	err := s.Take(context.Background(), start, []sluice.Check{{Rule: p, Key: "b"}}, out)
	if !errors.Is(err, lease.ErrTimeout) || errors.Is(err, sluice.ErrShed) {
		t.Fatalf("b, beside a's late grant: %v, want ErrTimeout", err)
	}
	if n := g.renewals("r:b"); n != 0 {
		t.Errorf("b was sent %d renewals while a's held the place", n)
	}
	lim, err := sluice.NewLimiter(s, sluice.WithClock(fixedClock(start)))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Take(context.Background(), []sluice.Check{{Rule: p, Key: "c"}}, nil); err != nil || !res.Allowed {
		t.Fatalf("c through a Limiter, failing open: %+v, %v", res, err)
	}
	unslow()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := s.Take(context.Background(), start, []sluice.Check{{Rule: p, Key: "b"}}, out)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b, after a's grant came: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

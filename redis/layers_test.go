package redis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/testclock"
)

// fakeSender answers every request with err, having written it to Redis
// unless unwritten, and counts the requests it was given.
type fakeSender struct {
	err       error
	unwritten bool
	n         int
}

func (f *fakeSender) send(_ context.Context, _ flavour, p *pending) ([]int64, error) {
	f.n++
	if !f.unwritten {
		p.wrote.Store(true)
	}
	if f.err != nil {
		return nil, f.err
	}
	return []int64{1, 0, 0, 0, 0, 0}, nil
}

// TestGuard: the breaker layer counts what reached Redis, refuses every
// request while open without passing it on, lets one probe through after
// the cooldown, and learns nothing from a request shed, given up, never
// written, or whose slot moved (an answer).
func TestGuard(t *testing.T) {
	ctx := context.Background()
	clk := testclock.New(time.Unix(1e9, 0))
	next := &fakeSender{}
	var rejected atomic.Int64
	br := &breaker{minCalls: 4, cooldown: time.Second, clock: clk}
	g := &guard{br: br, rejected: &rejected, next: next}
	send := func(err error) error {
		t.Helper()
		next.err = err
		_, got := g.send(ctx, whole{}, &pending{})
		return got
	}
	failure := errors.New("redis: broken pipe")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	for _, err := range []error{
		sluice.ErrShed, fmt.Errorf("%w: %w", ErrTimeout, sluice.ErrShed),
		stopped(cancelled), errMoved,
	} {
		for range 4 {
			send(err)
		}
	}
	next.unwritten = true
	for range 4 {
		send(failure)
	}
	next.unwritten = false
	if st := br.state(); st != "closed" {
		t.Fatalf("after requests shed, given up, moved, answered and never written: %s, want closed", st)
	}
	// 4 answers and 4 failures: half failed, of at least minCalls.
	for range 3 {
		send(failure)
	}
	if st := br.state(); st != "closed" {
		t.Fatalf("after 3 failures of 7: %s, want closed", st)
	}
	if err := send(failure); !errors.Is(err, failure) {
		t.Fatalf("send = %v, want the next's error", err)
	}
	if st := br.state(); st != "open" {
		t.Fatalf("after 4 failures of 8: %s, want open", st)
	}
	n := next.n
	if err := send(nil); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("send while open = %v, want ErrCircuitOpen", err)
	}
	if next.n != n || rejected.Load() != 1 {
		t.Fatalf("while open: %d sent on, %d rejected; want 0 and 1", next.n-n, rejected.Load())
	}
	clk.Advance(time.Second)
	if err := send(failure); !errors.Is(err, failure) {
		t.Fatalf("probe = %v, want the next's error", err)
	}
	if st := br.state(); st != "open" {
		t.Fatalf("after a failed probe: %s, want open", st)
	}
	clk.Advance(time.Second)
	if err := send(nil); err != nil {
		t.Fatalf("probe = %v, want an answer", err)
	}
	if st := br.state(); st != "closed" {
		t.Fatalf("after an answered probe: %s, want closed", st)
	}
}

// fakeTransport decides every request with d for each check, counting
// the requests it was given.
type fakeTransport struct {
	transport
	d sluice.Decision
	n int
}

func (f *fakeTransport) decide(_ context.Context, p *pending, out []sluice.Decision) error {
	f.n++
	for i := range p.args {
		out[i] = f.d
	}
	return nil
}

// TestCacheLayer: a denial is answered by the layer, shifted in time,
// until its RetryAfter (or the cap), and a request of another cost or an
// allowed one goes on to the next transport; an allowed decision drops
// the denial.
func TestCacheLayer(t *testing.T) {
	ctx := context.Background()
	r, err := sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(2)}.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := paramsOf(algo.Of(r))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1e9, 0)
	req := func(at time.Time, cost int64) *pending {
		p := &pending{now: float64(at.UnixMicro())}
		p.args = []checkArgs{{p: pr, cost: cost}}
		p.keys = []string{"k"}
		return p
	}
	denied := sluice.Decision{Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second}
	next := &fakeTransport{d: denied}
	var hits atomic.Int64
	cl := &cacheLayer{transport: next, c: newDenyCache(16), hits: &hits, clock: sluice.SystemClock, callerTime: true}
	out := make([]sluice.Decision, 1)

	steps := []struct {
		at   time.Duration
		cost int64
		want sluice.Decision
		sent bool // to the next transport
	}{
		{0, 1, denied, true},
		{100 * time.Millisecond, 1, sluice.Decision{Limit: 2, RetryAfter: 400 * time.Millisecond, ResetAfter: 900 * time.Millisecond, Cached: true}, false},
		{499 * time.Millisecond, 1, sluice.Decision{Limit: 2, RetryAfter: time.Millisecond, ResetAfter: 501 * time.Millisecond, Cached: true}, false},
		{500 * time.Millisecond, 1, denied, true}, // its RetryAfter ran out
		{600 * time.Millisecond, 2, denied, true}, // another cost
	}
	for i, s := range steps {
		n := next.n
		if err := cl.decide(ctx, req(t0.Add(s.at), s.cost), out); err != nil {
			t.Fatal(err)
		}
		if out[0] != s.want || (next.n > n) != s.sent {
			t.Fatalf("step %d: decide(t0+%v, %d) = %+v, sent on %v; want %+v, %v", i, s.at, s.cost, out[0], next.n > n, s.want, s.sent)
		}
	}
	if hits.Load() != 2 {
		t.Fatalf("%d hits, want 2", hits.Load())
	}

	// An allowed decision drops the denial; the cap bounds a new one.
	next.d = sluice.Decision{Allowed: true, Limit: 2, Remaining: 1}
	cl.decide(ctx, req(t0.Add(700*time.Millisecond), 1), out)
	if cl.c.len() != 0 {
		t.Fatalf("%d denials cached after an allowed decision, want 0", cl.c.len())
	}
	cl.cap.Store(int64(100 * time.Millisecond))
	next.d = denied
	cl.decide(ctx, req(t0.Add(time.Second), 1), out)
	n := next.n
	cl.decide(ctx, req(t0.Add(time.Second+100*time.Millisecond), 1), out)
	if next.n != n+1 {
		t.Fatalf("a denial was answered past the cap")
	}
}

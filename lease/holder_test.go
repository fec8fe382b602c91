package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// step is one decision of a holder at t0 + at.
type step struct {
	at      time.Duration
	n       int64
	allowed bool
	retry   time.Duration // checked when denied
}

func run(t *testing.T, h *holder, steps []step) {
	t.Helper()
	var d sluice.Decision
	for _, s := range steps {
		h.decide(t0.Add(s.at).UnixNano(), s.n, &d)
		if d.Allowed != s.allowed || (!s.allowed && d.RetryAfter != s.retry) {
			t.Errorf("decide(t0+%v, %d) = %+v, want allowed %v, retry %v", s.at, s.n, d, s.allowed, s.retry)
		}
	}
}

// TestHolderBucket: a Bucket holder's lease starts empty and refills at
// its share exactly, with a tight RetryAfter.
func TestHolderBucket(t *testing.T) {
	h := newHolder(Bucket, sluice.PerSecond(10), 10, 100*time.Millisecond, 300*time.Millisecond)
	h.apply(Grant{Share: 3, Burst: 3}, t0.UnixNano(), t0.UnixNano())
	run(t, h, []step{
		{0, 1, false, 333_333_334},
		{333 * time.Millisecond, 1, false, 333_334},
		{333*time.Millisecond + 333_333, 1, false, 1},
		{333*time.Millisecond + 333_334, 1, true, 0},
		{299 * time.Millisecond, 0, true, 0}, // a peek; a time gone back reads as the latest
		{299 * time.Millisecond, 11, false, sluice.Never},
		{299 * time.Millisecond, 4, false, 100 * time.Millisecond}, // above the burst: a renewal may change it
	})
}

// TestHolderBucketShrink: a share that shrank is charged from the
// renewal's send time, and the tokens are capped at the new burst; one
// that grew counts from its arrival.
func TestHolderBucketShrink(t *testing.T) {
	h := newHolder(Bucket, sluice.PerSecond(10), 10, 100*time.Millisecond, 3*time.Second)
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	h.apply(Grant{Share: 4, Burst: 4}, ns(0), ns(0))
	h.apply(Grant{Share: 4, Burst: 4}, ns(200*time.Millisecond), ns(200*time.Millisecond))
	h.fill(ns(time.Second))
	if h.tok != 4 {
		t.Fatalf("after a second at 4 a second: %d tokens, want 4", h.tok)
	}
	// Sent at 1s, back at 1.5s with a share of 2: 2 units a second less
	// for half a second, 1 token, then capped at the new burst of 2.
	h.apply(Grant{Share: 2, Burst: 2}, ns(time.Second), ns(1500*time.Millisecond))
	if h.tok != 2 {
		t.Fatalf("after the shrink: %d tokens, want 2", h.tok)
	}
	h.apply(Grant{Share: 2, Burst: 1}, ns(1600*time.Millisecond), ns(1600*time.Millisecond))
	if h.tok != 1 {
		t.Fatalf("after a burst of 1: %d tokens, want 1", h.tok)
	}
	// Grown to 10 a second at 1.7s, sent at 1.65s: counted from 1.7s.
	h.apply(Grant{Share: 10, Burst: 10}, ns(1650*time.Millisecond), ns(1700*time.Millisecond))
	run(t, h, []step{{1700 * time.Millisecond, 1, true, 0}, {1700 * time.Millisecond, 1, false, 100 * time.Millisecond}})
}

// TestHolderWindow: a Window holder admits its allowance in the window of
// its grant and its share in later ones; while a renewal is in flight, no
// more than it reported as used plus a reserve.
func TestHolderWindow(t *testing.T) {
	h := newHolder(Window, sluice.PerSecond(100), 100, 100*time.Millisecond, 300*time.Millisecond)
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	h.apply(Grant{Share: 40, Allowance: 60}, ns(0), ns(0))
	run(t, h, []step{
		{0, 60, true, 0},
		{500 * time.Millisecond, 1, false, 500 * time.Millisecond},
		{500 * time.Millisecond, 101, false, sluice.Never},
		{time.Second, 40, true, 0},
		{time.Second, 1, false, time.Second},
	})
	// 20 asked over the next 100ms: a demand of 200 a second, whose
	// reserve for a renewal interval is 20 units.
	h.since = ns(time.Second)
	h.asked = 20
	h.apply(Grant{Share: 40, Allowance: 50}, ns(time.Second+50*time.Millisecond), ns(time.Second+50*time.Millisecond))
	r := h.request(ns(time.Second+100*time.Millisecond), "k", "me")
	if r.Used != 50 || r.Window != t0.Unix()+1 || r.Demand != 200 {
		t.Fatalf("request = %+v, want used 40 + a reserve of 20 capped at the allowance of 50, demand 200", r)
	}
	run(t, h, []step{
		{time.Second + 100*time.Millisecond, 10, true, 0},
		{time.Second + 100*time.Millisecond, 1, false, 900 * time.Millisecond},
	})
}

// TestHolderNeverPanics: any limit a rule can lease, any grant and any
// times, forward or back: the holder decides without panicking, never
// holds more tokens than its burst, and never admits past its limit in a
// window.
func TestHolderNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	limits := []sluice.Limit{
		{Rate: 0, Period: time.Second}, {Rate: 1, Period: time.Nanosecond}, {Rate: sluice.MaxLeaseQuota, Period: 24 * time.Hour, Burst: sluice.MaxLeaseQuota},
		{Rate: 7, Period: 3 * time.Millisecond, Burst: 1}, sluice.PerSecond(10_000),
	}
	var d sluice.Decision
	for _, l := range limits {
		for _, kind := range []Kind{Bucket, Window} {
			renew, ttl := sluice.Lease{}.Times(l.Period)
			h := newHolder(kind, l, l.Capacity(), renew, ttl)
			now := t0.UnixNano()
			for range 2000 {
				now += rng.Int64N(int64(2*l.Period)+1) - int64(l.Period)/4
				switch rng.IntN(4) {
				case 0:
					share := rng.Int64N(l.Rate + 1)
					g := Grant{Share: share, Burst: l.Capacity() * share / max(l.Rate, 1), Allowance: rng.Int64N(l.Rate + 1)}
					h.request(now, "k", "me")
					h.apply(g, now-rng.Int64N(int64(ttl)+1), now)
				default:
					before := h.used
					h.decide(now, rng.Int64N(l.Capacity()+2), &d)
					if kind == Bucket && h.tok > h.burst {
						t.Fatalf("%v %v: %d tokens above the burst %d", kind, l, h.tok, h.burst)
					}
					if kind == Window && d.Allowed && h.used > max(h.windowLimit(), before) {
						t.Fatalf("%v %v: used %d past the limit %d", kind, l, h.used, h.windowLimit())
					}
				}
			}
		}
	}
}

// TestHolderRefund: a refund goes back only to what was charged. A
// Window holder's units charged in one window are not given to the next,
// and a Bucket holder's charged on a lease that expired are not given to
// the lease that replaced it: either would admit units the authority
// never granted.
func TestHolderRefund(t *testing.T) {
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	var d sluice.Decision

	w := newHolder(Window, sluice.PerSecond(100), 100, 100*time.Millisecond, 300*time.Millisecond)
	w.apply(Grant{Share: 10, Allowance: 10}, ns(0), ns(0))
	c := w.decide(ns(900*time.Millisecond), 10, &d)
	w.decide(ns(time.Second), 10, &d) // the next window: its share, used
	w.refund(ns(time.Second), 10, c)
	if w.used != 10 {
		t.Errorf("window: used %d after a refund of the window before, want 10", w.used)
	}
	c = w.decide(ns(time.Second), 0, &d)
	w.refund(ns(time.Second), 5, c)
	if w.used != 5 {
		t.Errorf("window: used %d after a refund of 5 in its window, want 5", w.used)
	}

	b := newHolder(Bucket, sluice.PerSecond(10), 10, 100*time.Millisecond, 300*time.Millisecond)
	b.apply(Grant{Share: 10, Burst: 10}, ns(0), ns(0))
	c = b.decide(ns(time.Second), 10, &d) // full after a second; emptied
	if !d.Allowed {
		t.Fatalf("bucket: 10 after a second at 10 a second denied: %+v", d)
	}
	b.apply(Grant{Share: 10, Burst: 10}, ns(2*time.Second), ns(2*time.Second)) // expired: a new lease, empty
	b.refund(ns(2*time.Second), 10, c)
	if b.tok != 0 {
		t.Errorf("bucket: %d tokens on a new lease after a refund of the old one's, want 0", b.tok)
	}
}

// TestHolderWindowInflightAcrossWindows: a Window holder whose renewal
// is in flight when its window ends admits no more than it reported in
// the next window either, until the grant comes: the authority may have
// shrunk its share, and the grant is for the window it reported.
func TestHolderWindowInflightAcrossWindows(t *testing.T) {
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	h := newHolder(Window, sluice.PerSecond(100), 100, 100*time.Millisecond, 300*time.Millisecond)
	h.apply(Grant{Share: 60, Allowance: 60}, ns(0), ns(0))
	run(t, h, []step{{900 * time.Millisecond, 5, true, 0}})
	r := h.request(ns(950*time.Millisecond), "k", "me")
	run(t, h, []step{
		{time.Second, r.Used, true, 0},
		{time.Second, 1, false, time.Second},
	})
	// The grant for the window reported; in the new one, the share.
	h.apply(Grant{Share: 20, Allowance: 30}, ns(950*time.Millisecond), ns(time.Second))
	if h.grantWin != r.Window || h.windowLimit() != 20 {
		t.Errorf("grant window %d, limit %d; want %d (the request's) and the share 20", h.grantWin, h.windowLimit(), r.Window)
	}
}

package sluice

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// fuzzOp is one request of a fuzzed trace: a time step and a cost code,
// resolved against the limiter's capacity by cost.
type fuzzOp struct {
	dt   int64
	cost byte
}

// decodeOps reads 10 bytes per request: a cost code, a shift and a step
// that the shift scales down, so that steps of every magnitude (and sign)
// are one byte away from each other.
func decodeOps(b []byte) []fuzzOp {
	var ops []fuzzOp
	for ; len(b) >= 10 && len(ops) < 64; b = b[10:] {
		dt := int64(binary.LittleEndian.Uint64(b[2:10])) >> (b[1] & 63)
		ops = append(ops, fuzzOp{dt, b[0]})
	}
	return ops
}

// encodeOps is decodeOps' inverse, for the seed corpus.
func encodeOps(ops ...fuzzOp) []byte {
	var b []byte
	for _, o := range ops {
		b = append(b, o.cost, 0)
		b = binary.LittleEndian.AppendUint64(b, uint64(o.dt))
	}
	return b
}

// Cost codes: 0x00-0x3f is that many units; 0x40-0x7f capacity minus the
// low bits; 0x80-0xbf capacity plus them; 0xc0-0xfc a negative cost; then
// MinInt64, MaxInt64 and half the capacity.
const (
	costCapacity = 0x40
	costAbove    = 0x80
	costNegative = 0xc0
	costMin      = 0xfd
	costMax      = 0xfe
	costHalf     = 0xff
)

func cost(code byte, capacity int64) int64 {
	k := int64(code & 0x3f)
	switch {
	case code == costMin:
		return math.MinInt64
	case code == costMax:
		return math.MaxInt64
	case code == costHalf:
		return capacity / 2
	case code < costCapacity:
		return k
	case code < costAbove:
		return max(capacity-k, 0)
	case code < costNegative:
		return min(capacity, math.MaxInt64-k) + k
	default:
		return -k - 1
	}
}

// FuzzAlgorithms throws any limit, start time, time steps (huge, negative,
// zero) and costs at every algorithm: nothing panics; a constructor either
// refuses the limit with the right error or works; every decision is well
// formed; the three buckets and the leaky queue decide alike; while time
// runs forward (within the documented horizon, for the buckets) every
// algorithm agrees with its reference model and is idle after ResetAfter.
func FuzzAlgorithms(f *testing.F) {
	second, year := int64(time.Second), int64(365*24*time.Hour)
	burst := encodeOps(repeatOps(10, fuzzOp{0, 1})...)
	steady := encodeOps(repeatOps(12, fuzzOp{int64(250 * time.Millisecond), 1})...)
	boundary := encodeOps(append(repeatOps(5, fuzzOp{0, 1}), fuzzOp{int64(100 * time.Millisecond), 1}, fuzzOp{0, 1}, fuzzOp{0, 1}, fuzzOp{0, 1}, fuzzOp{0, 1}, fuzzOp{0, 1})...)
	mixed := encodeOps(fuzzOp{0, costCapacity}, fuzzOp{0, 1}, fuzzOp{1, costAbove + 1}, fuzzOp{0, costNegative}, fuzzOp{0, 0},
		fuzzOp{333333333, 1}, fuzzOp{1, 1}, fuzzOp{-second, 1}, fuzzOp{2 * second, costHalf}, fuzzOp{math.MaxInt64, 1},
		fuzzOp{math.MinInt64, costMin}, fuzzOp{0, costMax}, fuzzOp{year, costCapacity + 1})
	for _, s := range []struct {
		rate, period, burst, start int64
		ops                        []byte
	}{
		{5, second, 0, t0.UnixNano(), burst},
		{5, second, 0, t0.UnixNano() + 900*int64(time.Millisecond), boundary},
		{4, second, 5, t0.UnixNano(), steady},
		{3, second, 0, t0.UnixNano(), mixed},
		{7, int64(time.Minute), 0, t0.UnixNano(), mixed},
		{1, year, 0, t0.UnixNano(), mixed},
		{1_000_000_000_000, second, 0, t0.UnixNano(), mixed},
		{999_983, int64(24 * time.Hour), 370, t0.UnixNano(), mixed},
		{0, second, 3, 0, mixed},
		{0, 1, 0, 0, mixed},
		{1, second, 4611686018, 0, mixed}, // the largest burst of 1/s
		{1, second, 4611686019, 0, mixed}, // one more: decided at 1µs
		{1, second, 1<<62 + 1, 0, mixed},  // ErrLimitTooLarge at any resolution
		{1 << 20, second, 0, 0, burst},    // the largest sliding log
		{1<<20 + 1, second, 0, 0, burst},  // ErrLimitTooLarge for the log only
		{-1, second, 0, 0, burst},         // invalid
		{5, 0, 0, 0, burst},               // invalid
		{5, -second, 0, 0, burst},         // invalid
		{5, second, -1, 0, burst},         // invalid
		{math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, mixed},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, mixed},
		{math.MaxInt64, 1, 1, math.MinInt64, mixed},
		// Regressions. A count near MaxInt64 overflowed in the fixed window.
		{math.MaxInt64, second, 0, 0, encodeOps(fuzzOp{0, costCapacity}, fuzzOp{0, 1}, fuzzOp{0, 1})},
		// The sliding counter's two periods overflowed ResetAfter.
		{1, math.MaxInt64, 0, 0, encodeOps(fuzzOp{0, 1})},
		// The sliding log never evicted an entry older than 2^63 ns.
		{1, second, 0, math.MinInt64 + 1000, encodeOps(fuzzOp{0, 1}, fuzzOp{1, 0}, fuzzOp{math.MaxInt64, 1})},
		// A bucket emptied at a whole second before the epoch read as
		// never used, and full again.
		{1, second, 0, -second, encodeOps(fuzzOp{0, 1}, fuzzOp{0, 1})},
	} {
		f.Add(s.rate, s.period, s.burst, s.start, s.ops)
	}
	f.Fuzz(func(t *testing.T, rate, period, burst, start int64, ops []byte) {
		checkLimit(t, Limit{Rate: rate, Period: time.Duration(period), Burst: burst}, start, decodeOps(ops))
	})
}

func repeatOps(n int, o fuzzOp) []fuzzOp {
	ops := make([]fuzzOp, n)
	for i := range ops {
		ops[i] = o
	}
	return ops
}

// checkLimit builds every algorithm for l and runs the trace on each,
// checking everything that must hold whatever the input.
func checkLimit(t *testing.T, l Limit, start int64, ops []fuzzOp) {
	t.Helper()
	invalid := l.Validate()
	if invalid != nil && !errors.Is(invalid, ErrInvalidLimit) {
		t.Fatalf("%+v.Validate() = %v, want an error wrapping ErrInvalidLimit", l, invalid)
	}
	var buckets []Algorithm
	for _, a := range chargedAlgorithms {
		x, err := a.new(l)
		switch {
		case invalid != nil:
			if !errors.Is(err, ErrInvalidLimit) || x != nil {
				t.Fatalf("New%s(%+v) = %v, %v; want nil and an error wrapping ErrInvalidLimit", a.name, l, x, err)
			}
			continue
		case err != nil:
			if !errors.Is(err, ErrLimitTooLarge) || errors.Is(err, ErrInvalidLimit) || x != nil || a.kind == fixedKind || a.kind == counterKind {
				t.Fatalf("New%s(%+v) = %v, %v; the limit is valid", a.name, l, x, err)
			}
			if a.kind == logKind && l.Rate <= 1<<20 {
				t.Fatalf("NewSlidingLog(%+v): %v; want it to work up to 2^20 per window", l, err)
			}
			continue
		}
		if a.kind == logKind && l.Rate > 1<<20 {
			t.Fatalf("NewSlidingLog(%+v) works, want ErrLimitTooLarge above 2^20 per window", l)
		}
		if a.kind == bucketKind && a.charge == ChargeGate {
			buckets = append(buckets, x)
		}
		checkTrace(t, a, l, charged(x, a.charge), start, ops)
	}
	q, err := NewLeakyQueue(l)
	switch {
	case invalid != nil:
		if !errors.Is(err, ErrInvalidLimit) || q != nil {
			t.Fatalf("NewLeakyQueue(%+v) = %v, %v; want nil and an error wrapping ErrInvalidLimit", l, q, err)
		}
		return
	case (err != nil) != (len(buckets) == 0):
		t.Fatalf("NewLeakyQueue(%+v): %v, but the buckets took it: %d", l, err, len(buckets))
	case err != nil:
		return
	}
	// The buckets and the queue side by side, on fresh state.
	tb, _ := NewTokenBucket(l)
	lb, _ := NewLeakyBucket(l)
	g, _ := NewGCRA(l)
	now := start
	for _, o := range ops {
		now += o.dt
		n := cost(o.cost, l.Capacity())
		ts := at(now)
		d := tb.AllowN(ts, n)
		if d2, d3 := lb.AllowN(ts, n), g.AllowN(ts, n); d2 != d || d3 != d {
			t.Fatalf("%v: AllowN(%d, %d): TokenBucket %+v, LeakyBucket %+v, GCRA %+v; want the same", l, now, n, d, d2, d3)
		}
		rel, dq := q.Reserve(ts, n)
		if dq != d {
			t.Fatalf("%v: Reserve(%d, %d) = %+v, TokenBucket.AllowN = %+v; want the same", l, now, n, dq, d)
		}
		if dq.Allowed && rel.Before(ts) {
			t.Fatalf("%v: Reserve(%d, %d) releases at %d, before now", l, now, n, rel.UnixNano())
		}
	}
}

// checkTrace runs ops on x from start.
func checkTrace(t *testing.T, a algorithm, l Limit, x Algorithm, start int64, ops []fuzzOp) {
	t.Helper()
	c := a.capacity(l)
	m := newChargedModel(a.kind, l, a.charge)
	if a.kind == logKind && l.Rate > 4096 {
		m = nil // the slice model is quadratic
	}
	limit := int64(math.MaxInt64)
	if a.kind == bucketKind {
		limit = horizon(l) / 2
	}
	now := start
	forward := true // time has never gone back, nor jumped past the horizon
	var prev Decision
	for i, o := range ops {
		next := now + o.dt
		if o.dt < 0 || next < now || o.dt > limit {
			forward = false
		}
		n := cost(o.cost, c)
		if forward && i > 0 && prev.ResetAfter != Never && o.dt >= int64(prev.ResetAfter) {
			if d := x.AllowN(at(next), 0); d.Remaining != c || d.ResetAfter != 0 {
				t.Fatalf("%s %v: AllowN(%d, 0) = %+v, %v after a decision with ResetAfter %v; want idle", a.name, l, next, d, time.Duration(o.dt), prev.ResetAfter)
			}
		}
		now = next
		d := x.AllowN(at(now), n)
		switch {
		case d.Limit != c:
			t.Fatalf("%s %v: AllowN(%d, %d).Limit = %d, want %d", a.name, l, now, n, d.Limit, c)
		case d.Remaining < 0 || d.Remaining > d.Limit:
			t.Fatalf("%s %v: AllowN(%d, %d).Remaining = %d, want 0..%d", a.name, l, now, n, d.Remaining, d.Limit)
		case d.RetryAfter < 0 || d.ResetAfter < 0:
			t.Fatalf("%s %v: AllowN(%d, %d) = %+v: a negative wait", a.name, l, now, n, d)
		case d.Allowed && (d.RetryAfter != 0 || n < 0 || n > c):
			t.Fatalf("%s %v: AllowN(%d, %d) = %+v, want denied", a.name, l, now, n, d)
		case !d.Allowed && d.RetryAfter == 0:
			t.Fatalf("%s %v: AllowN(%d, %d) = %+v: denied with no wait", a.name, l, now, n, d)
		case (n < 0 || n > c) && d.RetryAfter != Never:
			t.Fatalf("%s %v: AllowN(%d, %d) = %+v, want RetryAfter Never", a.name, l, now, n, d)
		case n == 0 && forward && !d.Allowed && a.charge == ChargeGate:
			t.Fatalf("%s %v: AllowN(%d, 0) = %+v, want a peek allowed", a.name, l, now, d)
		}
		if m != nil && forward {
			if want := m.allowN(now, n); d != want {
				t.Fatalf("%s %v: AllowN(%d, %d) = %+v, the model says %+v", a.name, l, now, n, d, want)
			}
		}
		prev = d
	}
}

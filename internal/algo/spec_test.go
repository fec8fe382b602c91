package algo

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// Specs of equal Keys share an Ident and a Hash; a Key that differs in
// any field has another Ident.
func TestSpecIdent(t *testing.T) {
	k := Key{Name: "api", Algo: "gcra", Rate: 10, Period: time.Second}
	a, err := NewSpec(k, KindBucket, ChargeGate)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSpec(k, KindBucket, ChargeGate)
	if a == b || a.Ident != b.Ident || a.Hash != b.Hash {
		t.Errorf("two Specs of %+v: Ident %v and %v, Hash %x and %x; want one of each", k, a.Ident, b.Ident, a.Hash, b.Hash)
	}
	for _, o := range []Key{
		{Name: "web", Algo: "gcra", Rate: 10, Period: time.Second},
		{Name: "api", Algo: "token_bucket", Rate: 10, Period: time.Second},
		{Name: "api", Algo: "gcra", Rate: 11, Period: time.Second},
		{Name: "api", Algo: "gcra", Rate: 10, Period: time.Minute},
		{Name: "api", Algo: "gcra", Rate: 10, Period: time.Second, Burst: 10},
	} {
		c, _ := NewSpec(o, KindBucket, ChargeGate)
		if c.Ident == a.Ident {
			t.Errorf("%+v has the Ident of %+v", o, k)
		}
	}
}

// NewSpec picks the wide state for a short horizon, and refuses what
// cannot be kept exactly.
func TestNewSpec(t *testing.T) {
	for _, c := range []struct {
		k     Key
		kind  Kind
		want  Kind
		quota int64
		err   error
	}{
		{Key{Rate: 10, Period: time.Second, Burst: 20}, KindBucket, KindBucket, 20, nil},
		{Key{Rate: 49999, Period: 24 * time.Hour}, KindBucket, KindWide, 49999, nil},
		{Key{Rate: 3, Period: time.Second, Burst: 1 << 40}, KindBucket, KindBucket, 1 << 40, nil}, // at 1µs
		{Key{Rate: 3, Period: time.Second, Burst: 1<<62 + 1}, KindBucket, 0, 0, ErrTooLarge},
		{Key{Rate: 7, Period: time.Minute, Burst: 9}, KindFixed, KindFixed, 7, nil},
		{Key{Rate: 7, Period: time.Minute}, KindCounter, KindCounter, 7, nil},
		{Key{Rate: 7, Period: time.Minute}, KindLog, KindLog, 7, nil},
		{Key{Rate: MaxLogRate + 1, Period: time.Minute}, KindLog, 0, 0, ErrTooLarge},
	} {
		s, err := NewSpec(c.k, c.kind, ChargeGate)
		if !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("NewSpec(%+v, %d) = %v, want %v", c.k, c.kind, err, c.err)
			continue
		}
		if err == nil && (s.Kind != c.want || s.Quota() != c.quota) {
			t.Errorf("NewSpec(%+v, %d): Kind %d, Quota %d; want %d, %d", c.k, c.kind, s.Kind, s.Quota(), c.want, c.quota)
		}
	}
}

// Allow makes Step's decisions on an atomic word.
func TestAllowIsStep(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	tt, err := NewTAT(3, time.Second, 5)
	if err != nil {
		t.Fatal(err)
	}
	var x atomic.Uint64
	var y uint64
	now := int64(1e18)
	for i := range 1000 {
		now += r.Int64N(int64(time.Second))
		n := r.Int64N(7) - 1
		ok, rem, retry, reset := tt.Allow(&x, now, n)
		var want Decision
		want, y = tt.Step(y, now, n)
		if got := (Decision{Allowed: ok, Limit: tt.Burst(), Remaining: rem, RetryAfter: retry, ResetAfter: reset}); got != want || x.Load() != y {
			t.Fatalf("step %d: Allow(t+%d, %d) = %+v, state %d; Step says %+v, %d", i, now, n, got, x.Load(), want, y)
		}
	}
}

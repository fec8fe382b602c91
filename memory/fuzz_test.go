package memory

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// FuzzTake decodes bytes into requests (which rules and keys, shadow or
// not, the cost, the time step) on a store small enough to evict, and
// holds every decision to seqModel for as long as no key was evicted;
// after that, only that nothing panics and the bound holds. It then runs
// the same requests with the first rule (and its shadow twin) charging
// usage, which seqModel does not know (storetest's UsagePolicy holds those
// decisions): nothing panics and the bound holds.
func FuzzTake(f *testing.F) {
	f.Add([]byte{0x00, 0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98})
	f.Add([]byte{0xff, 0x01, 0xfe, 0x02, 0xfd, 0x03, 0xfc, 0x04, 0xfb, 0x05, 0xfa})
	f.Add([]byte{0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		fuzzTake(t, data, false)
		fuzzTake(t, data, true)
	})
}

// fuzzTake runs data on a fresh store, its first rule charging usage if
// usage is set.
func fuzzTake(t *testing.T, data []byte, usage bool) {
	limits := []sluice.Limit{sluice.PerSecond(3), {Rate: 5, Period: 250 * time.Millisecond, Burst: 8}, {Rate: 0, Period: time.Second, Burst: 2}}
	var rules []*sluice.PreparedRule
	for i := range 2 {
		a := sluice.Algos()[int(data[0]>>(3*i))%len(sluice.Algos())]
		rules = append(rules, prep(sluice.Rule{Name: string(rune('p' + i)), Algorithm: a, Limit: limits[int(data[0]>>(2+i))%len(limits)]}))
	}
	if usage {
		r := rules[0].Rule()
		r.Charge = sluice.ChargeUsage
		rules[0] = prep(r)
	}
	twin := rules[0].Rule()
	twin.Shadow = true
	rules = append(rules, prep(twin))

	const bound = 4
	s := newStore(t, WithShards(1), WithMaxKeys(bound), WithSweepInterval(0))
	m := &seqModel{hist: map[string][]op{}}
	now := t0
	exact := !usage
	for i := 1; i+1 < len(data) && i < 200; i += 2 {
		a, b := data[i], data[i+1]
		checks := make([]sluice.Check, 1+int(a&3)%3)
		for j := range checks {
			checks[j] = sluice.Check{Rule: rules[int(a>>(2+j))%len(rules)], Key: string(rune('a' + int(b>>(4+j))%3))}
		}
		n := int64(b&7) - 1
		now = now.Add(time.Duration(b>>3) * 37 * time.Millisecond)
		got := take(t, s, now, n, checks...)
		if s.Len() > bound {
			t.Fatalf("Len() = %d, bound %d", s.Len(), bound)
		}
		want := m.take(t, now, n, checks)
		if len(m.hist) > bound {
			exact = false // keys may have been evicted: the model no longer applies
		}
		if !exact {
			continue
		}
		for j := range checks {
			if got[j] != want[j] {
				t.Fatalf("request %d: Take(t0+%v, %d, %v): check %d = %+v, want %+v", i/2, now.Sub(t0), n, names(checks), j, got[j], want[j])
			}
		}
	}
	s.shards[0].check(t)
	s.checkBytes(t, DefaultMaxBytes)
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// peek is the state of one check, read with n = 0.
func peek(t *testing.T, st sluice.Store, now time.Time, c sluice.Check) sluice.Decision {
	t.Helper()
	return take(t, st, now, 0, c)[0]
}

// testAllOrNothing: a denial by one rule charges nothing to the others,
// whichever of them denies.
func (s *suite) testAllOrNothing(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			st := s.cfg.New(t)
			second := sluice.Check{Rule: rule("aon-second", a, sluice.PerSecond(5)), Key: "k"}
			day := sluice.Check{Rule: rule("aon-day", a, sluice.PerDay(3)), Key: "k"}
			t0 := s.t0()
			for i := range 3 {
				now := t0.Add(time.Duration(i) * time.Second)
				if got := take(t, st, now, 1, second, day); !got[0].Allowed || !got[1].Allowed {
					t.Fatalf("Take(%s, 1, second+day) = %+v, want both allowed", rel(t0, now), got)
				}
			}
			now := t0.Add(3 * time.Second)
			before := peek(t, st, now, second)
			got := take(t, st, now, 1, second, day)
			if !got[0].Allowed || got[1].Allowed {
				t.Fatalf("Take(%s, 1, second+day) = %+v, want the second allowing and the day denying", rel(t0, now), got)
			}
			if got[0] != before {
				t.Errorf("Take(%s, 1, second+day): the second's decision = %+v, want its uncharged state %+v", rel(t0, now), got[0], before)
			}
			if after := peek(t, st, now, second); after != before {
				t.Errorf("after a denial by the day, the second = %+v, want %+v: it was charged", after, before)
			}

			// And the other way round: the second denies, the day is not
			// charged.
			st = s.cfg.New(t)
			second.Rule = rule("aon-second2", a, sluice.PerSecond(2))
			day.Rule = rule("aon-day2", a, sluice.PerDay(3))
			take(t, st, t0, 2, second)
			before = peek(t, st, t0, day)
			if got := take(t, st, t0, 1, second, day); got[0].Allowed || !got[1].Allowed {
				t.Fatalf("Take(t0, 1, second+day) = %+v, want the second denying and the day allowing", got)
			}
			if after := peek(t, st, t0, day); after != before {
				t.Errorf("after a denial by the second, the day = %+v, want %+v: it was charged", after, before)
			}
		})
	}
}

// testShadow: a shadow rule that denies blocks nothing and is not charged;
// one that allows is charged when the request is; an enforced denial
// charges it nothing.
func (s *suite) testShadow(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			st := s.cfg.New(t)
			enf := sluice.Check{Rule: rule("shadow-enforced", a, sluice.PerHour(4)), Key: "k"}
			sh := prepare(sluice.Rule{Name: "shadow-shadow", Algorithm: a, Limit: sluice.PerHour(2), Shadow: true})
			shc := sluice.Check{Rule: sh, Key: "k"}
			t0 := s.t0()
			for i, wantShadow := range []bool{true, true, false, false} {
				got := take(t, st, t0, 1, shc, enf)
				if !got[1].Allowed || got[0].Allowed != wantShadow {
					t.Fatalf("request %d: Take(t0, 1, shadow+enforced) = %+v, want the enforced allowing and the shadow %v", i, got, wantShadow)
				}
				if c := sluice.Combine([]sluice.Check{shc, enf}, got); !c.Allowed {
					t.Fatalf("request %d: combined %+v, want allowed: a shadow rule never denies", i, c)
				}
			}
			if got := peek(t, st, t0, enf); got.Remaining != 0 {
				t.Errorf("enforced after 4 requests: %+v, want Remaining 0: each allowed request is charged", got)
			}
			if got := peek(t, st, t0, shc); got.Remaining != 0 {
				t.Errorf("shadow after 4 requests: %+v, want Remaining 0", got)
			}

			st = s.cfg.New(t)
			take(t, st, t0, 4, enf)
			before := peek(t, st, t0, shc)
			got := take(t, st, t0, 1, shc, enf)
			if got[1].Allowed || !got[0].Allowed {
				t.Fatalf("Take(t0, 1, shadow+exhausted enforced) = %+v, want the enforced denying, the shadow allowing", got)
			}
			if after := peek(t, st, t0, shc); after != before {
				t.Errorf("after an enforced denial, the shadow = %+v, want %+v: it was charged", after, before)
			}
		})
	}
}

// testPeek: n = 0 reports the state and changes nothing, for a key never
// seen and for one in use.
func (s *suite) testPeek(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			st := s.cfg.New(t)
			r := rule("peek", a, sluice.Limit{Rate: 3, Period: time.Second, Burst: 3})
			c := sluice.Check{Rule: r, Key: "k"}
			ref := s.reference(t, st, r)
			t0 := s.t0()
			want := s.expect(ref.AllowN(t0, 0))
			for i := range 3 {
				if got := peek(t, st, t0, c); got != want {
					t.Fatalf("peek %d at t0 on a new key = %+v, want %+v", i, got, want)
				}
			}
			take(t, st, t0, 2, c)
			ref.AllowN(t0, 2)
			now := t0.Add(s.floor(100 * time.Millisecond))
			want = s.expect(ref.AllowN(now, 0))
			for i := range 3 {
				if got := peek(t, st, now, c); got != want {
					t.Fatalf("peek %d at %s after 2 taken = %+v, want %+v", i, rel(t0, now), got, want)
				}
			}
			if got, want := take(t, st, now, 1, c)[0], s.expect(ref.AllowN(now, 1)); got != want {
				t.Errorf("Take(%s, 1) after peeks = %+v, want %+v", rel(t0, now), got, want)
			}
		})
	}
}

// testNegative: a negative cost is refused with RetryAfter Never and
// charges nothing.
func (s *suite) testNegative(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			st := s.cfg.New(t)
			c1 := sluice.Check{Rule: rule("neg-1", a, sluice.PerSecond(3)), Key: "k"}
			c2 := sluice.Check{Rule: rule("neg-2", a, sluice.PerMinute(7)), Key: "k"}
			t0 := s.t0()
			take(t, st, t0, 1, c1, c2)
			b1, b2 := peek(t, st, t0, c1), peek(t, st, t0, c2)
			for _, checks := range [][]sluice.Check{{c1}, {c1, c2}} {
				for i, d := range take(t, st, t0, -1, checks...) {
					if d.Allowed || d.RetryAfter != sluice.Never {
						t.Errorf("Take(t0, -1, %s): check %d = %+v, want refused with RetryAfter Never", describe(checks), i, d)
					}
				}
			}
			if a1, a2 := peek(t, st, t0, c1), peek(t, st, t0, c2); a1 != b1 || a2 != b2 {
				t.Errorf("after n = -1: %+v, %+v, want %+v, %+v: something was charged", a1, a2, b1, b2)
			}
		})
	}
}

// testRulesApart: the same key under two rules is two states, even when
// the rules are alike but for their names.
func (s *suite) testRulesApart(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			st := s.cfg.New(t)
			one := sluice.Check{Rule: rule("apart-one", a, sluice.PerHour(3)), Key: "k"}
			two := sluice.Check{Rule: rule("apart-two", a, sluice.PerHour(3)), Key: "k"}
			t0 := s.t0()
			if got := take(t, st, t0, 3, one)[0]; !got.Allowed || got.Remaining != 0 {
				t.Fatalf("Take(t0, 3) on one = %+v, want allowed, Remaining 0", got)
			}
			if got := take(t, st, t0, 3, two)[0]; !got.Allowed || got.Remaining != 0 {
				t.Errorf("Take(t0, 3) on two after one was emptied = %+v, want allowed: the rules share a state", got)
			}
			other := sluice.Check{Rule: one.Rule, Key: "K"}
			if got := take(t, st, t0, 3, other)[0]; !got.Allowed {
				t.Errorf("Take(t0, 3) on one/\"K\" = %+v, want allowed: keys are case-sensitive", got)
			}
		})
	}
}

// testBadInput: what cannot be decided is an error, and charges nothing.
func (s *suite) testBadInput(t *testing.T) {
	a := s.cfg.Algorithms[0]
	t0 := s.t0()
	good := sluice.Check{Rule: rule("bad-good", a, sluice.PerHour(5)), Key: "k"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name   string
		ctx    context.Context
		checks []sluice.Check
		out    int
		is     error // if not nil, errors.Is(err, is) must hold
	}{
		{"short out", context.Background(), []sluice.Check{good, good}, 1, nil},
		{"nil rule", context.Background(), []sluice.Check{good, {Key: "k"}}, 2, nil},
		{"unprepared rule", context.Background(), []sluice.Check{good, {Rule: &sluice.PreparedRule{}, Key: "k"}}, 2, nil},
		{"cancelled", cancelled, []sluice.Check{good}, 1, context.Canceled},
	}
	st := s.cfg.New(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := peek(t, st, t0, good)
			err := st.Take(c.ctx, t0, c.checks, make([]sluice.Decision, c.out))
			if err == nil {
				t.Fatalf("Take(t0, 1, %s) with %d decisions: no error", describe(c.checks), c.out)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("Take(t0, 1, %s): error %q, want one that wraps %q", describe(c.checks), err, c.is)
			}
			if after := peek(t, st, t0, good); after != before {
				t.Errorf("after a failed Take, the good rule = %+v, want %+v: it was charged", after, before)
			}
		})
	}
}

// testIdle: once the ResetAfter of a key's last decisions has passed, the
// key decides exactly as a fresh one.
func (s *suite) testIdle(t *testing.T) {
	for _, a := range s.cfg.Algorithms {
		for _, l := range s.traceLimits() {
			t.Run(fmt.Sprintf("%s/%v", a, l), func(t *testing.T) {
				st := s.cfg.New(t)
				r := rule("idle-"+string(a), a, l)
				c := sluice.Check{Rule: r, Key: "k"}
				g := s.gen(7)
				t0 := s.t0()
				now, reset := t0, t0
				for range 20 {
					now = now.Add(g.step(emission(l), l.Period))
					d := take(t, st, now, g.cost(r.Quota()), c)[0]
					if d.ResetAfter == sluice.Never {
						return // a rate of 0 never resets
					}
					if at := now.Add(d.ResetAfter); at.After(reset) {
						reset = at
					}
				}
				fresh := s.reference(t, st, r)
				for i := range 20 {
					n := g.cost(r.Quota())
					got, want := take(t, st, reset, n, c)[0], s.expect(fresh.AllowN(reset, n))
					if got != want {
						t.Fatalf("step %d after the reset, Take(%s, %d) = %+v, want %+v, as a fresh key", i, rel(t0, reset), n, got, want)
					}
					reset = reset.Add(g.step(emission(l), l.Period))
				}
			})
		}
	}
}

// testLimiter runs a policy through sluice.NewLimiter with a clock the
// test moves, against the model.
func (s *suite) testLimiter(t *testing.T) {
	st := s.cfg.New(t)
	t0 := s.t0()
	now := t0
	lim, err := sluice.NewLimiter(st, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		t.Fatal(err)
	}
	as := s.cfg.Algorithms
	checks := []sluice.Check{
		{Rule: rule("limiter-burst", as[0], sluice.Limit{Rate: 3, Period: time.Second, Burst: 4}), Key: "u"},
		{Rule: rule("limiter-minute", as[len(as)-1], sluice.PerMinute(10)), Key: "u"},
	}
	m := newModel(t, s.arithOf(t, st))
	g := s.gen(42)
	out := make([]sluice.Decision, len(checks))
	for i := range 60 {
		now = now.Add(g.step(300*time.Millisecond, time.Second))
		n := g.rnd.Int64N(3)
		res, err := lim.Take(context.Background(), costed(n, checks), out)
		if err != nil || res.Err != nil {
			t.Fatalf("step %d: Limiter.Take(%d) = %v, %v", i, n, err, res.Err)
		}
		want := m.take(now, costed(n, checks))
		for j := range want {
			want[j] = s.expect(want[j])
			if res.Decisions[j] != want[j] {
				t.Fatalf("step %d: Limiter.Take(%d) at %s: check %d = %+v, want %+v", i, n, rel(t0, now), j, res.Decisions[j], want[j])
			}
		}
		if c := sluice.Combine(checks, want); res.Decision != c {
			t.Fatalf("step %d: Limiter.Take(%d) at %s = %+v, want %+v", i, n, rel(t0, now), res.Decision, c)
		}
	}
}

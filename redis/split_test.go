package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
)

// TestGiveBack holds a give-back, the undoing of a part of a request
// split across slots, to "nothing charged": after a take at t1 given
// back at t2, every decision equals the memory store's, which never saw
// the request, for each algorithm, whether the state's window rolled or
// its bucket drained in between; and where another request touched the
// key in between, it never reports more room than that store (never
// mints).
func TestGiveBack(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ms := func(m int64) time.Time { return t0.Add(time.Duration(m) * time.Millisecond) }
	type step struct {
		at   int64 // ms after t0
		cost int64
	}
	cases := []struct {
		name   string
		before []step // requests both stores see
		t1, t2 int64  // ms after t0
		cost   int64
		// between, if not 0, is the cost of a request at (t1+t2)/2, which
		// both stores see; a bucket's give-back may then keep part of the
		// charge, never more than all of it; the windows' stay exact.
		between int64
	}{
		{name: "same window, no drain", before: []step{{0, 3}}, t1: 200, t2: 300, cost: 2},
		{name: "drained or rolled", before: []step{{0, 1}}, t1: 9500, t2: 11200, cost: 2},
		{name: "fresh key, drained", t1: 1000, t2: 4000, cost: 2},
		{name: "whole burst", t1: 0, t2: 50, cost: 10},
		{name: "touched in between", before: []step{{0, 2}}, t1: 500, t2: 2500, cost: 3, between: 1},
		{name: "drained, then touched", t1: 0, t2: 3000, cost: 2, between: 3},
		{name: "rolled, then touched", before: []step{{0, 1}}, t1: 9500, t2: 11500, cost: 2, between: 3},
	}
	// at the caller's time, and under the store's clock, where a fixed
	// window is a counter per window
	flavours := []struct {
		name string
		opts []redis.Option
	}{{"caller-time", nil}, {"store-clock", []redis.Option{redis.WithStoreClock()}}}
	for _, f := range flavours {
		for _, a := range sluice.Algos() {
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", f.name, a, c.name), func(t *testing.T) {
					rule := prep(sluice.Rule{Name: "r", Algorithm: a, Limit: sluice.Limit{Rate: 10, Period: 10 * time.Second}})
					exact := c.between == 0 || a == sluice.AlgoFixedWindow || a == sluice.AlgoSlidingCounter || a == sluice.AlgoSlidingLog
					chk := []sluice.Check{{Rule: rule, Key: "k"}}
					s := newCallerStore(t, srv, append(f.opts, redis.WithoutBatching())...)
					ref, err := memory.New()
					if err != nil {
						t.Fatal(err)
					}
					both := func(at, n int64) {
						t.Helper()
						got, want := take(t, s, ms(at), n, chk...), make([]sluice.Decision, 1)
						if err := ref.Take(ctx, ms(at), costed(n, chk), want); err != nil {
							t.Fatal(err)
						}
						if got[0] != want[0] {
							t.Fatalf("at %dms cost %d: %+v, memory %+v", at, n, got[0], want[0])
						}
					}
					for _, b := range c.before {
						both(b.at, b.cost)
					}
					var between func()
					if c.between != 0 {
						tb := (c.t1 + c.t2) / 2
						between = func() { take(t, s, ms(tb), c.between, chk...) }
						if err := ref.Take(ctx, ms(tb), costed(c.between, chk), make([]sluice.Decision, 1)); err != nil {
							t.Fatal(err)
						}
					}
					taken, back := make([]sluice.Decision, 1), make([]sluice.Decision, 1)
					// sent twice, as a client that retried after a lost
					// answer would: given back once
					charged, err := redis.TakeThenGiveBack(ctx, s, ms(c.t1), ms(c.t2), costed(c.cost, chk), between, 2, taken, back)
					if err != nil || !charged || !taken[0].Allowed {
						t.Fatalf("take at %dms: %+v, charged %v, %v", c.t1, taken[0], charged, err)
					}
					want := make([]sluice.Decision, 1)
					if err := ref.Take(ctx, ms(c.t2), costed(0, chk), want); err != nil {
						t.Fatal(err)
					}
					if exact && back[0] != want[0] {
						t.Fatalf("given back at %dms: peek %+v, memory %+v", c.t2, back[0], want[0])
					}
					if back[0].Remaining > want[0].Remaining {
						t.Fatalf("given back at %dms: peek %+v has more room than memory's %+v: minted", c.t2, back[0], want[0])
					}
					// and every later decision, to the last unit
					for i := range 12 {
						at := c.t2 + 10*int64(i+1)
						got, w := take(t, s, ms(at), 1, chk...), make([]sluice.Decision, 1)
						if err := ref.Take(ctx, ms(at), chk, w); err != nil {
							t.Fatal(err)
						}
						if exact && got[0] != w[0] || got[0].Allowed && !w[0].Allowed {
							t.Fatalf("after the give-back, take %d at %dms: %+v, memory %+v", i, at, got[0], w[0])
						}
					}
				})
			}
		}
	}
}

// hammer has 16 goroutines take checks from s, at cost 1, until each has
// been denied 10 times, and returns how many requests were allowed.
func hammer(t *testing.T, s sluice.Store, checks []sluice.Check) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			out := make([]sluice.Decision, len(checks))
			for denied := 0; denied < 10; {
				if err := s.Take(context.Background(), time.Time{}, checks, out); err != nil {
					t.Error(err)
					return
				}
				all := true
				for _, d := range out {
					all = all && d.Allowed
				}
				if all {
					allowed.Add(1)
				} else {
					denied++
				}
			}
		})
	}
	wg.Wait()
	return allowed.Load()
}

// keysOn returns two check keys whose state the Cluster keeps in
// different slots: on one master if same, else on two.
func keysOn(t *testing.T, cc *goredis.ClusterClient, same bool) (string, string) {
	t.Helper()
	ctx := context.Background()
	master := func(k string) string {
		c, err := cc.MasterForKey(ctx, "{"+k+"}")
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	slot := func(k string) int64 {
		sl, err := cc.ClusterKeySlot(ctx, "{"+k+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		return sl
	}
	a := "203.0.113.7"
	for i := range 1000 {
		b := fmt.Sprint("user", i)
		if slot(a) != slot(b) && (master(a) == master(b)) == same {
			return a, b
		}
	}
	t.Fatal("no such keys")
	return "", ""
}

// TestClusterSplit: on a 3-master Cluster, a request whose checks sit on
// different masters is decided a part per master: allowed, each charged;
// denied by one part, the others given back, their checks reporting peeks,
// and nothing left charged; a shadow check given back too. Checks in
// different slots of one master are decided in one run. WithoutSplit
// refuses a request across masters instead.
func TestClusterSplit(t *testing.T) {
	cl := startCluster(t)
	cc := cl.client(t)
	ctx := context.Background()
	for _, a := range sluice.Algos() {
		for _, same := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/same-master=%v", a, same), func(t *testing.T) {
				clusterSplit(t, cc, a, same)
			})
		}
	}
	ipKey, userKey := keysOn(t, cc, false)
	strict := newStore(t, cc, redis.WithPrefix(prefix(t)), redis.WithoutSplit())
	ip := prep(sluice.Rule{Name: "ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(5)})
	user := prep(sluice.Rule{Name: "user", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(5)})
	two := []sluice.Check{{Rule: ip, Key: ipKey}, {Rule: user, Key: userKey}}
	if err := strict.Take(ctx, time.Time{}, two, make([]sluice.Decision, 2)); !errors.Is(err, redis.ErrCrossSlot) || !errors.Is(err, sluice.ErrRefused) {
		t.Fatalf("WithoutSplit: err = %v, want ErrCrossSlot, a refusal", err)
	}
	ipKey, userKey = keysOn(t, cc, true)
	two = []sluice.Check{{Rule: ip, Key: ipKey}, {Rule: user, Key: userKey}}
	if err := strict.Take(ctx, time.Time{}, two, make([]sluice.Decision, 2)); err != nil {
		t.Fatalf("WithoutSplit, one master: %v, want it decided in one run", err)
	}
	// A request on more slots than a request may have parts, each a run
	// at once (WithoutBatching: a part per slot), is refused.
	perSlot := newStore(t, cc, redis.WithPrefix(prefix(t)), redis.WithoutBatching())
	var many []sluice.Check
	for i := range 65 {
		many = append(many, sluice.Check{Rule: ip, Key: fmt.Sprint("ip", i)})
	}
	if err := perSlot.Take(ctx, time.Time{}, many, make([]sluice.Decision, len(many))); !errors.Is(err, redis.ErrCrossSlot) || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("65 checks on 65 slots: %v, want refused", err)
	}
	if err := perSlot.Take(ctx, time.Time{}, many[:3], make([]sluice.Decision, 3)); err != nil {
		t.Fatalf("3 checks on 3 slots, WithoutBatching: %v", err)
	}
}

func clusterSplit(t *testing.T, cc *goredis.ClusterClient, a sluice.Algo, same bool) {
	ipKey, userKey := keysOn(t, cc, same)
	p := prefix(t)
	s := newStore(t, cc, redis.WithPrefix(p), redis.WithDenyCache(0))
	user := prep(sluice.Rule{Name: "user", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(3)})
	ip := prep(sluice.Rule{Name: "ip", Algorithm: a, Limit: sluice.Limit{Rate: 10, Period: 1000 * time.Hour}})
	two := []sluice.Check{{Rule: ip, Key: ipKey}, {Rule: user, Key: userKey}}
	for i := range 4 {
		out := take(t, s, time.Time{}, 1, two...)
		if i < 3 && (!out[0].Allowed || !out[1].Allowed || out[0].Remaining != int64(9-i) || out[1].Remaining != int64(2-i)) {
			t.Fatalf("take %d: %+v", i, out)
		}
		if i == 3 && (out[1].Allowed || !out[0].Allowed || out[0].Remaining != 7) {
			t.Fatalf("user exhausted: %+v, want the user denied and the ip's peek, 7 left", out)
		}
	}
	if d := take(t, s, time.Time{}, 0, two[0]); d[0].Remaining != 7 {
		t.Fatalf("the ip after the denied request: %+v, want 7 left", d[0])
	}
	// the ip's part denies: the user's is given back
	user2 := prep(sluice.Rule{Name: "user2", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(3)})
	out := take(t, s, time.Time{}, 8, two[0], sluice.Check{Rule: user2, Key: userKey, Cost: 1})
	if out[0].Allowed || !out[1].Allowed || out[1].Remaining != 3 {
		t.Fatalf("ip denies: %+v, want the user's peek, 3 left", out)
	}
	// a shadow check that allowed is given back with its part
	shadow := prep(sluice.Rule{Name: "shadow", Algorithm: a, Limit: ip.Rule().Limit, Shadow: true})
	out = take(t, s, time.Time{}, 1, sluice.Check{Rule: shadow, Key: ipKey}, two[1])
	if !out[0].Allowed || out[1].Allowed || out[0].Remaining != 10 {
		t.Fatalf("shadow beside an exhausted user: %+v, want its peek, 10 left", out)
	}
	if d := take(t, s, time.Time{}, 0, sluice.Check{Rule: shadow, Key: ipKey}); d[0].Remaining != 10 {
		t.Fatalf("the shadow check was left charged: %+v", d[0])
	}
	// across masters, 6 requests in parts, 3 of them given back;
	// on one, none: each is one run
	want := redis.Stats{Splits: 6, GiveBacks: 3}
	if same {
		want = redis.Stats{}
	}
	if st := s.Stats(); st.Splits != want.Splits || st.GiveBacks != want.GiveBacks || st.GiveBackErrors != 0 || st.Moved != 0 {
		t.Fatalf("stats %+v, want %d splits, %d give-backs", st, want.Splits, want.GiveBacks)
	}
}

// TestClusterSplitHammer: goroutines hammer a request on a user (50 a
// day) and a tenant (1000) in different slots: exactly 50 are allowed,
// and the tenant, charged then given back by every denied request, is
// left charged exactly 50.
func TestClusterSplitHammer(t *testing.T) {
	cl := startCluster(t)
	cc := cl.client(t)
	for _, a := range []sluice.Algo{sluice.AlgoFixedWindow, sluice.AlgoGCRA, sluice.AlgoSlidingLog} {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, cc, redis.WithPrefix(prefix(t)), redis.WithDenyCache(0))
			tenant, user := keysOn(t, cc, false)
			checks := []sluice.Check{
				{Rule: prep(sluice.Rule{Name: "tenant", Algorithm: a, Limit: sluice.Limit{Rate: 1000, Period: 1000 * time.Hour}}), Key: tenant},
				{Rule: prep(sluice.Rule{Name: "user", Algorithm: a, Limit: sluice.Limit{Rate: 50, Period: 1000 * time.Hour}}), Key: user},
			}
			if n := hammer(t, s, checks); n != 50 {
				t.Fatalf("%d allowed, want exactly 50", n)
			}
			if d := take(t, s, time.Time{}, 0, checks[0]); d[0].Remaining != 950 {
				t.Fatalf("tenant: %+v, want 950 left: the denied requests' charges not all given back", d[0])
			}
			if st := s.Stats(); st.GiveBacks < 160 || st.GiveBackErrors != 0 {
				t.Fatalf("stats %+v: want a give-back per denied request", st)
			}
		})
	}
}

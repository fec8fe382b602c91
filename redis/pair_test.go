package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// TestPair: per-second checks in a Redis of their own, the others in the
// main one; a request on both is all-or-nothing: the part that charged is
// given back when the other denies, whichever it is.
func TestPair(t *testing.T) {
	mainSrv, secondSrv := startRedis(t), startRedis(t)
	p := prefix(t)
	main := newCallerStore(t, mainSrv, redis.WithPrefix(p))
	second := newCallerStore(t, secondSrv, redis.WithPrefix(p))
	pair, err := redis.NewPair(main, second, redis.ToSecondStore)
	if err != nil {
		t.Fatal(err)
	}
	hourly := prep(sluice.Rule{Name: "hourly", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 5, Period: time.Hour}})
	perSec := prep(sluice.Rule{Name: "persec", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(3)})
	burst := prep(sluice.Rule{Name: "burst", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)})
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	take := func(at time.Duration, n int64, checks ...sluice.Check) []sluice.Decision {
		t.Helper()
		out := make([]sluice.Decision, len(checks))
		if err := pair.Take(ctx, t0.Add(at), costed(n, checks), out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	both := []sluice.Check{{Rule: hourly, Key: "u"}, {Rule: perSec, Key: "u"}}
	for i := range 3 {
		if d := take(0, 1, both...); !d[0].Allowed || !d[1].Allowed || d[0].Remaining != int64(4-i) || d[1].Remaining != int64(2-i) {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	// the per-second limit denies: the hourly one is given back
	if d := take(0, 1, both...); d[0].Allowed != true || d[0].Remaining != 2 || d[1].Allowed {
		t.Fatalf("per-second exhausted: %+v, want the hourly peek, 2 left", d)
	}
	if d := take(0, 0, both[0]); d[0].Remaining != 2 {
		t.Fatalf("hourly after the denied request: %+v, want 2 left", d[0])
	}
	// the next second: the hourly limit denies a cost of 3, the
	// per-second one is given back
	if d := take(time.Second, 3, both...); d[0].Allowed || !d[1].Allowed || d[1].Remaining != 3 {
		t.Fatalf("hourly short: %+v, want the per-second peek, 3 left", d)
	}
	if d := take(time.Second, 0, both[1]); d[0].Remaining != 3 {
		t.Fatalf("per-second after the denied request: %+v, want 3 left", d[0])
	}
	// a GCRA per second beside it, in the second Redis too
	if d := take(time.Second, 2, sluice.Check{Rule: hourly, Key: "u"}, sluice.Check{Rule: burst, Key: "u"}, sluice.Check{Rule: perSec, Key: "u"}); !d[0].Allowed || !d[1].Allowed || !d[2].Allowed || d[1].Remaining != 8 {
		t.Fatalf("three checks: %+v", d)
	}
	// every key where its rule goes
	for srv, want := range map[*server][]string{mainSrv: {"hourly"}, secondSrv: {"persec", "burst"}} {
		keys := scanKeys(t, srv.client(t), p)
		if len(keys) == 0 {
			t.Fatalf("no keys on %s", srv.addr())
		}
		for _, k := range keys {
			if strings.Contains(k, ":give:") {
				continue // a give-back's token, for ten seconds
			}
			ok := false
			for _, r := range want {
				ok = ok || containsRule(k, r)
			}
			if !ok {
				t.Errorf("key %q on %s, want only %v there", k, srv.addr(), want)
			}
		}
	}
	if st := pair.Stats(); st.Splits != 6 || st.GiveBacks != 2 {
		t.Errorf("stats %+v, want 6 requests in parts, 2 given back", st)
	}
	if _, err := redis.NewPair(main, main, redis.ToSecondStore); err == nil {
		t.Error("a pair of one store: no error")
	}
	if _, err := redis.NewPair(main, nil, redis.ToSecondStore); err == nil {
		t.Error("a pair without its second store: no error")
	}
}

func containsRule(key, rule string) bool {
	for i := 0; i+len(rule)+2 <= len(key); i++ {
		if key[i] == ':' && key[i+1:i+1+len(rule)] == rule && key[i+1+len(rule)] == ':' {
			return true
		}
	}
	return false
}

// TestPairHammer: goroutines hammer a request on a user (50) in one Redis
// and a tenant (1000) in the other: exactly 50 allowed, and the tenant,
// charged and given back by every denied request, left charged 50.
func TestPairHammer(t *testing.T) {
	a, b := startRedis(t), startRedis(t)
	p := prefix(t)
	main := newStore(t, a.client(t), redis.WithPrefix(p), redis.WithDenyCache(0))
	second := newStore(t, b.client(t), redis.WithPrefix(p), redis.WithDenyCache(0))
	for _, alg := range []sluice.Algo{sluice.AlgoFixedWindow, sluice.AlgoGCRA, sluice.AlgoSlidingCounter} {
		t.Run(string(alg), func(t *testing.T) {
			pair, err := redis.NewPair(main, second, func(r sluice.Rule) bool { return r.Name == string(alg)+"-tenant" })
			if err != nil {
				t.Fatal(err)
			}
			checks := []sluice.Check{
				{Rule: prep(sluice.Rule{Name: string(alg) + "-tenant", Algorithm: alg, Limit: sluice.Limit{Rate: 1000, Period: 1000 * time.Hour}}), Key: "acme"},
				{Rule: prep(sluice.Rule{Name: string(alg) + "-user", Algorithm: alg, Limit: sluice.Limit{Rate: 50, Period: 1000 * time.Hour}}), Key: "bob"},
			}
			if n := hammer(t, pair, checks); n != 50 {
				t.Fatalf("%d allowed, want exactly 50", n)
			}
			out := make([]sluice.Decision, 1)
			if err := pair.Take(context.Background(), time.Time{}, costed(0, checks[:1]), out); err != nil || out[0].Remaining != 950 {
				t.Fatalf("tenant: %+v, %v; want 950 left", out[0], err)
			}
		})
	}
}

// TestPairCluster: a pair whose main store is a Cluster: a request on two
// masters and the second Redis is three parts, all-or-nothing.
func TestPairCluster(t *testing.T) {
	cl := startCluster(t)
	cc := cl.client(t)
	srv := startRedis(t)
	p := prefix(t)
	main := newStore(t, cc, redis.WithPrefix(p), redis.WithDenyCache(0))
	second := newStore(t, srv.client(t), redis.WithPrefix(p), redis.WithDenyCache(0))
	pair, err := redis.NewPair(main, second, func(r sluice.Rule) bool { return r.Name == "tenant" })
	if err != nil {
		t.Fatal(err)
	}
	a, b := keysOn(t, cc, false)
	ip := prep(sluice.Rule{Name: "ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(10)})
	user := prep(sluice.Rule{Name: "user", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerDay(10)})
	tenant := prep(sluice.Rule{Name: "tenant", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 2, Period: 1000 * time.Hour}})
	checks := []sluice.Check{{Rule: ip, Key: a}, {Rule: tenant, Key: "acme"}, {Rule: user, Key: b}}
	out := make([]sluice.Decision, 3)
	for i := range 3 {
		if err := pair.Take(context.Background(), time.Time{}, checks, out); err != nil {
			t.Fatal(err)
		}
		if all := out[0].Allowed && out[1].Allowed && out[2].Allowed; all != (i < 2) {
			t.Fatalf("request %d: %+v", i, out)
		}
	}
	// the third was denied by the tenant: both cluster parts given back
	for _, c := range []sluice.Check{checks[0], checks[2]} {
		if err := pair.Take(context.Background(), time.Time{}, costed(0, []sluice.Check{c}), out); err != nil || out[0].Remaining != 8 {
			t.Fatalf("%s after the denied request: %+v, %v; want 8 left", c.Rule.Name(), out[0], err)
		}
	}
	if st := pair.Stats(); st.GiveBacks != 2 {
		t.Errorf("stats %+v, want 2 parts given back", st)
	}
	// A Cluster store that refuses requests across masters refuses them
	// in a pair too.
	strict := newStore(t, cc, redis.WithPrefix(p), redis.WithoutSplit())
	spair, err := redis.NewPair(strict, second, func(r sluice.Rule) bool { return r.Name == "tenant" })
	if err != nil {
		t.Fatal(err)
	}
	if err := spair.Take(context.Background(), time.Time{}, checks, out); !errors.Is(err, redis.ErrCrossSlot) {
		t.Fatalf("WithoutSplit in a pair: %v, want ErrCrossSlot", err)
	}
	if err := spair.Take(context.Background(), time.Time{}, []sluice.Check{checks[1], {}}, out); err == nil || !strings.Contains(err.Error(), "check 1 has no rule") {
		t.Fatalf("a check without a rule: %v", err)
	}
}

// TestPairDenialCache: a store in a pair caches a denial no longer than a
// give-back can take, since the charge that caused it may be given back.
func TestPairDenialCache(t *testing.T) {
	a, b := startRedis(t), startRedis(t)
	opts := []redis.Option{redis.WithPrefix(prefix(t)), redis.WithCallerTime(), redis.WithClockSkew(time.Hour), redis.WithTimeout(time.Second)}
	main := newStore(t, a.client(t), opts...)
	second := newStore(t, b.client(t), opts...)
	rule := prep(sluice.Rule{Name: "daily", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerDay(1)})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	out := make([]sluice.Decision, 1)
	takeAt := func(key string, at time.Duration) {
		t.Helper()
		if err := main.Take(context.Background(), t0.Add(at), []sluice.Check{{Rule: rule, Key: key}}, out); err != nil {
			t.Fatal(err)
		}
	}
	takeAt("k", 0)             // the day's one
	takeAt("k", 0)             // denied for 14h: cached
	takeAt("k", 6*time.Second) // from the cache
	if st := main.Stats(); st.CacheHits != 1 {
		t.Fatalf("alone: %+v, want the denial cached for its RetryAfter", st)
	}
	if _, err := redis.NewPair(main, second, redis.ToSecondStore); err != nil {
		t.Fatal(err)
	}
	takeAt("k2", 0)
	takeAt("k2", 0)             // denied, cached for 5s only
	takeAt("k2", 4*time.Second) // from the cache
	takeAt("k2", 6*time.Second) // from Redis
	if st := main.Stats(); st.CacheHits != 2 {
		t.Fatalf("in a pair: %+v, want the denial cached 5s (5 timeouts of 1s), not 14h", st)
	}
}

// TestPairGiveBackFails: the main Redis dies between its part's take and
// the give-back that the second's denial calls for. The request returns
// the give-back's error, and Stats.GiveBackErrors counts the part left
// charged.
func TestPairGiveBackFails(t *testing.T) {
	x, y := startRedis(t), startRedis(t)
	p := prefix(t)
	main := newStore(t, x.client(t), redis.WithPrefix(p), redis.WithTimeout(10*time.Second), redis.WithDenyCache(0))
	second := newStore(t, y.client(t), redis.WithPrefix(p), redis.WithTimeout(10*time.Second), redis.WithDenyCache(0))
	pair, err := redis.NewPair(main, second, func(r sluice.Rule) bool { return r.Name == "second" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	checks := []sluice.Check{
		{Rule: prep(sluice.Rule{Name: "main", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(10)}), Key: "k"},
		{Rule: prep(sluice.Rule{Name: "second", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1)}), Key: "k"},
	}
	out := make([]sluice.Decision, 2)
	if err := second.Take(ctx, time.Time{}, checks[1:], out); err != nil || !out[0].Allowed {
		t.Fatalf("exhausting the second: %+v, %v", out[0], err)
	}
	// the main Redis has the library, and the store a connection to it
	if err := main.Take(ctx, time.Time{}, []sluice.Check{{Rule: checks[0].Rule, Key: "warm"}}, out); err != nil {
		t.Fatal(err)
	}
	// The second Redis busy for two seconds or more: the pair's part there
	// waits, while its part on the main one is taken and answered; then
	// the main one dies.
	yc := y.client(t)
	busy := make(chan error, 1)
	go func() {
		busy <- yc.Eval(ctx, "local t0 = redis.call('TIME')[1]; while redis.call('TIME')[1] - t0 < 3 do end return 1", nil).Err()
	}()
	xc := x.client(t)
	before := commandCalls(t, xc, "fcall")
	res := make(chan error, 1)
	time.Sleep(100 * time.Millisecond) // the busy script first
	go func() { res <- pair.Take(ctx, time.Time{}, checks, out) }()
	for commandCalls(t, xc, "fcall") == before {
		if ctx.Err() != nil {
			t.Fatal("the main part was never taken")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // its answer read
	x.kill()
	err = <-res
	if err == nil || !strings.Contains(err.Error(), "giving back") {
		t.Fatalf("Take: %v, want the give-back's error", err)
	}
	if st := main.Stats(); st.GiveBackErrors != 1 || st.GiveBacks != 1 {
		t.Fatalf("main's stats %+v: want 1 give-back, failed", st)
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
}

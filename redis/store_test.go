package redis_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/teststore"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
)

// newStore is a Store on c with opts. Its calls have a deadline of 10s
// unless opts say otherwise: the default, 50ms, is a bound a loaded
// machine can miss, and only the tests of the deadline itself want one.
func newStore(t testing.TB, c goredis.UniversalClient, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.New(c, append([]redis.Option{redis.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func take(t testing.TB, s *redis.Store, now time.Time, n int64, checks ...sluice.Check) []sluice.Decision {
	t.Helper()
	out := make([]sluice.Decision, len(checks))
	if err := s.Take(context.Background(), now, costed(n, checks), out); err != nil {
		t.Fatalf("Take(%d): %v", n, err)
	}
	return out
}

// scanKeys lists the keys under prefix p.
func scanKeys(t testing.TB, c goredis.UniversalClient, p string) []string {
	t.Helper()
	var keys []string
	var mu sync.Mutex // ForEachMaster scans the masters at once
	scan := func(ctx context.Context, c *goredis.Client) error {
		it := c.Scan(ctx, 0, p+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	ctx := context.Background()
	var err error
	switch c := c.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { return scan(ctx, n) })
	case *goredis.Client:
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestRedisTime decides at Redis TIME, the default.
func TestRedisTime(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
	rule := prep(sluice.Rule{Name: "daily", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(5)})
	c := sluice.Check{Rule: rule, Key: "alice"}
	for i := range int64(5) {
		d := take(t, s, time.Time{}, 1, c)[0]
		if !d.Allowed || d.Remaining != 4-i || d.Limit != 5 {
			t.Fatalf("take %d = %+v, want allowed with %d left", i, d, 4-i)
		}
	}
	d := take(t, s, time.Time{}, 1, c)[0]
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 24*time.Hour/5 || d.ResetAfter > 24*time.Hour {
		t.Fatalf("6th take = %+v, want denied for at most 24h/5", d)
	}
}

// A sliding counter's request of one unit goes on the script's path of
// its own, at the run's time. A state written at a later time (a lost
// clock: Redis TIME gone back with the clock's key gone, or here a store
// at its callers' time, their clocks ahead, sharing the prefix) is not
// decided there: the request is decided again on the general path, at
// the state's time, as the algorithm reads a time before the last one
// seen.
func TestCounterStateAhead(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p))
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerMinute(10)})
	c := sluice.Check{Rule: rule, Key: "k"}
	if d := take(t, s, time.Time{}, 1, c)[0]; !d.Allowed || d.Remaining != 9 {
		t.Fatalf("first take = %+v, want allowed, 9 left", d)
	}
	// A unit taken an hour ahead: the first one's window, and the next,
	// are over by then, so it no longer counts.
	ahead := counterAhead(t, rc, p, c)
	d := takeRedone(t, s, c)
	off := time.Duration(ahead.UnixMicro()%60e6) * time.Microsecond
	if !d.Allowed || d.Remaining != 8 || d.ResetAfter != 2*time.Minute-off {
		t.Errorf("take on a state ahead = %+v, want allowed, 8 left, reset in %v: decided at the state's time", d, 2*time.Minute-off)
	}
}

// counterAhead takes a unit of the sliding counter c, under prefix p, at
// a time an hour ahead, through a store at its callers' time, and returns
// that time: the state's last time is then ahead of Redis TIME, as only a
// lost clock, or clocks ahead, could make it.
func counterAhead(t testing.TB, rc *goredis.Client, p string, c sluice.Check) time.Time {
	t.Helper()
	ahead := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	take(t, newStore(t, rc, redis.WithPrefix(p), redis.WithCallerTime()), ahead, 1, c)
	return ahead
}

// takeRedone takes one unit of c now, which the script's path of its own
// answers -3 for and the general path decides, in a second run.
func takeRedone(t testing.TB, s *redis.Store, c sluice.Check) sluice.Decision {
	t.Helper()
	runs := s.Stats().Runs
	d := take(t, s, time.Time{}, 1, c)[0]
	if got := s.Stats().Runs - runs; got != 2 {
		t.Errorf("%d runs, want 2: the script's path of its own, then the general path", got)
	}
	return d
}

// A sliding counter whose rule kept its name while its rate came down
// has counts above the new rate, which its path of its own cannot answer
// with: the request is decided on the general path, from the counts.
func TestCounterRateLowered(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
	high := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerHour(100)})
	low := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerHour(10)})
	rateLowered(t, s, high, low)
}

// rateLowered counts 50 units of key "k" under high, then takes one under
// low, the same rule's name at a lower rate: denied, with nothing left,
// decided again on the general path (takeRedone), and charging nothing.
func rateLowered(t *testing.T, s *redis.Store, high, low *sluice.PreparedRule) {
	t.Helper()
	take(t, s, time.Time{}, 50, sluice.Check{Rule: high, Key: "k"})
	if d := takeRedone(t, s, sluice.Check{Rule: low, Key: "k"}); d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
		t.Errorf("one unit at the lower rate, 50 counted = %+v, want denied", d)
	}
	if d := take(t, s, time.Time{}, 0, sluice.Check{Rule: high, Key: "k"})[0]; d.Remaining != 50 {
		t.Errorf("peek at the higher rate = %+v, want 50 left: nothing charged", d)
	}
}

// TestTTL checks that every key lives at least until its ResetAfter, and
// not much longer than its rule can keep a state live: the longest
// ResetAfter the rule can give (its period; two for the sliding counter;
// three for the sliding log, whose TTL is set once a span of two periods:
// see TestLogExpiresLazily) and a second of slack.
func TestTTL(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	for _, alg := range sluice.Algos() {
		// cost 1 on a path of its own where the algorithm has one, 3 on
		// the general path
		for _, cost := range []int64{1, 3} {
			t.Run(fmt.Sprintf("%s/cost=%d", alg, cost), func(t *testing.T) {
				p := prefix(t)
				s := newStore(t, rc, redis.WithPrefix(p))
				rule := prep(sluice.Rule{Name: "r", Algorithm: alg, Limit: sluice.Limit{Rate: 10, Period: 90 * time.Second}})
				start := time.Now()
				d := take(t, s, time.Time{}, cost, sluice.Check{Rule: rule, Key: "k"})[0]
				keys := stateKeys(scanKeys(t, rc, p))
				if len(keys) != 1 {
					t.Fatalf("keys %v, want 1", keys)
				}
				most := 90*time.Second + time.Second
				switch alg {
				case sluice.AlgoSlidingCounter:
					most += 90 * time.Second
				case sluice.AlgoSlidingLog:
					most += 2 * 90 * time.Second
				}
				for _, k := range keys {
					ttl, err := rc.PTTL(context.Background(), k).Result()
					if err != nil {
						t.Fatal(err)
					}
					least := d.ResetAfter.Truncate(time.Millisecond) - time.Since(start)
					if ttl < least || ttl > most {
						t.Errorf("PTTL %s = %v, want in [%v, %v] (ResetAfter %v)", k, ttl, least, most, d.ResetAfter)
					}
				}
			})
		}
	}
}

// stateKeys is keys less the store's clock.
func stateKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !strings.HasSuffix(k, ":clock") {
			out = append(out, k)
		}
	}
	return out
}

// TestIdleKeyDeleted: a key whose state is back to idle is deleted, not
// left to expire.
func TestIdleKeyDeleted(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	for _, alg := range sluice.Algos() {
		t.Run(string(alg), func(t *testing.T) {
			p := prefix(t)
			s := newCallerStore(t, srv, redis.WithPrefix(p))
			c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: alg, Limit: sluice.PerSecond(4)}), Key: "k"}
			d := take(t, s, t0, 2, c)[0]
			if len(scanKeys(t, rc, p)) == 0 {
				t.Fatal("no key after a charge")
			}
			d = take(t, s, t0.Add(d.ResetAfter), 0, c)[0]
			if d.ResetAfter != 0 {
				t.Fatalf("peek at ResetAfter = %+v, want idle", d)
			}
			if keys := scanKeys(t, rc, p); len(keys) != 0 {
				t.Fatalf("keys %v left after idle", keys)
			}
		})
	}
}

// TestNoKeyWithoutTTL decides random requests on many keys and finds
// every key with a TTL.
func TestNoKeyWithoutTTL(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithDenyCache(0), redis.WithTimeout(5*time.Second))
	rng := rand.New(rand.NewPCG(1, 2))
	var rules []*sluice.PreparedRule
	for _, alg := range sluice.Algos() {
		rules = append(rules, prep(sluice.Rule{Name: "a" + string(alg), Algorithm: alg, Limit: sluice.Limit{Rate: 3, Period: time.Minute}}))
		rules = append(rules, prep(sluice.Rule{Name: "b" + string(alg), Algorithm: alg, Limit: sluice.Limit{Rate: 1 + rng.Int64N(9), Period: time.Duration(1+rng.IntN(100)) * time.Second, Burst: rng.Int64N(5)}}))
	}
	for range 2000 {
		r := rules[rng.IntN(len(rules))]
		take(t, s, time.Time{}, rng.Int64N(4), sluice.Check{Rule: r, Key: fmt.Sprint(rng.IntN(300))})
	}
	keys := scanKeys(t, rc, p)
	if len(keys) < 300 {
		t.Fatalf("only %d keys", len(keys))
	}
	for _, k := range keys {
		ttl, err := rc.PTTL(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// -2: gone since the scan, expired as it should. A key's TTL
		// here may be as short as seconds, which a loaded machine can
		// spend between the scan and this PTTL.
		if ttl <= 0 && ttl != -2 {
			t.Fatalf("%s has PTTL %v", k, ttl)
		}
	}
}

// TestScriptFlush: after SCRIPT FLUSH and FUNCTION FLUSH the script is
// loaded again, once, and the request is charged once; on a single Redis
// a run is an FCALL.
func TestScriptFlush(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	s := newStore(t, rc, redis.WithPrefix(prefix(t)))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerDay(10)}), Key: "k"}
	if d := take(t, s, time.Time{}, 1, c)[0]; d.Remaining != 9 {
		t.Fatalf("first take = %+v", d)
	}
	if got := s.Stats().Reloads; got != 1 { // the first call loads it
		t.Fatalf("reloads = %d, want 1", got)
	}
	if d := take(t, s, time.Time{}, 1, c)[0]; d.Remaining != 8 {
		t.Fatalf("second take = %+v", d)
	}
	if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.FunctionFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if d := take(t, s, time.Time{}, 1, c)[0]; d.Remaining != 7 {
		t.Fatalf("take after SCRIPT FLUSH and FUNCTION FLUSH = %+v, want 7 left: charged once", d)
	}
	if got := s.Stats().Reloads; got != 2 {
		t.Fatalf("reloads = %d, want 2", got)
	}
	if calls := commandCalls(t, rc, "fcall"); calls != 5 { // three runs, two of them after a "Function not found"
		t.Errorf("FCALL calls = %d, want 5", calls)
	}
}

// TestShorterRun: a run whose reply is shorter than the one before it
// (the function keeps its reply's table from run to run) answers only its
// own.
func TestShorterRun(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
	var checks []sluice.Check
	for i := range 4 {
		checks = append(checks, sluice.Check{Rule: prep(sluice.Rule{Name: fmt.Sprint("r", i), Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(10)}), Key: "k"})
	}
	taken := make([]int64, len(checks))
	for _, n := range []int{4, 1, 3, 2, 1} {
		d := take(t, s, time.Time{}, 1, checks[:n]...)
		for i := range n {
			taken[i]++
			if !d[i].Allowed || d[i].Remaining != 10-taken[i] {
				t.Fatalf("take of %d checks: check %d = %+v, want allowed, %d left", n, i, d[i], 10-taken[i])
			}
		}
	}
}

// TestWithoutFunctions: a server that has no functions for the store (a
// Redis before 7, here an ACL that refuses them) has its runs by EVALSHA,
// the script loaded by EVAL, and decides the same.
func TestWithoutFunctions(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, scriptOnlyClient(t, srv), redis.WithPrefix(prefix(t)))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerDay(10)}), Key: "k"}
	w := sluice.Check{Rule: prep(sluice.Rule{Name: "w", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerDay(10)}), Key: "k"}
	for i := range 3 {
		if d := take(t, s, time.Time{}, 1, c, w); d[0].Remaining != int64(9-i) || d[1].Remaining != int64(9-2*i) {
			t.Fatalf("take %d = %+v, want %d and %d left", i, d, 9-i, 9-2*i)
		}
		if d := take(t, s, time.Time{}, 1, w)[0]; d.Remaining != int64(8-2*i) {
			t.Fatalf("take %d of the window alone = %+v, want %d left", i, d, 8-2*i)
		}
	}
	if got := s.Stats().Reloads; got != 1 {
		t.Fatalf("reloads = %d, want 1: the script loaded by EVAL once", got)
	}
	rc := srv.client(t)
	if calls := commandCalls(t, rc, "evalsha"); calls != 6 {
		t.Errorf("EVALSHA calls = %d, want 6", calls)
	}
}

// scriptOnlyClient is a client of srv as a user whose ACL refuses Redis
// functions (FCALL, FUNCTION): its store runs the script by EVALSHA, as on
// a Redis before 7.
func scriptOnlyClient(t testing.TB, srv *server) *goredis.Client {
	t.Helper()
	err := srv.client(t).Do(context.Background(), "ACL", "SETUSER", "nofunctions", "on", "nopass", "~*", "&*", "+@all", "-fcall", "-function").Err()
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.addr(), Username: "nofunctions", Password: "any", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// commandCalls is the number of calls of cmd that INFO commandstats counts.
func commandCalls(t testing.TB, rc *goredis.Client, cmd string) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %s: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// TestOutOfRange: limits the script cannot hold exactly are refused
// before any call.
func TestOutOfRange(t *testing.T) {
	srv := startRedis(t)
	s := newCallerStore(t, srv)
	for _, r := range []sluice.Rule{
		{Name: "huge burst per year", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1, Period: 365 * 24 * time.Hour, Burst: 1 << 30}},
		{Name: "ns window", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 10, Period: 1500 * time.Nanosecond}},
		{Name: "huge window", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.Limit{Rate: 2e12, Period: time.Second}},
	} {
		p := prep(r)
		err := s.Take(context.Background(), t0, []sluice.Check{{Rule: p, Key: "k"}}, make([]sluice.Decision, 1))
		if !errors.Is(err, redis.ErrOutOfRange) || !errors.Is(err, sluice.ErrLimitTooLarge) {
			t.Errorf("%s: err = %v, want ErrOutOfRange", r.Name, err)
		}
		if err := s.CheckRule(p); !errors.Is(err, redis.ErrOutOfRange) || !errors.Is(err, sluice.ErrRefused) {
			t.Errorf("%s: CheckRule = %v, want ErrOutOfRange", r.Name, err)
		}
		if r.Algorithm == sluice.AlgoGCRA && !strings.Contains(fmt.Sprint(err), "the nearest limit that fits is 1/8760h0m0s burst 71404103") {
			t.Errorf("%s: err = %v, want the nearest limit that fits named", r.Name, err)
		}
	}
	ok := prep(sluice.Rule{Name: "ok", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)})
	err := s.Take(context.Background(), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), []sluice.Check{{Rule: ok, Key: "k"}}, make([]sluice.Decision, 1))
	if !errors.Is(err, redis.ErrOutOfRange) {
		t.Errorf("year 2200: err = %v, want ErrOutOfRange", err)
	}
	// An unknown algorithm is refused where the rule is prepared; a rule
	// not prepared, where it is used.
	if _, err := (sluice.Rule{Name: "bad", Algorithm: "nope", Limit: sluice.PerSecond(1)}).Prepare(); !errors.Is(err, sluice.ErrUnknownAlgo) {
		t.Errorf("unknown algorithm: err = %v", err)
	}
	for name, r := range map[string]*sluice.PreparedRule{"nil": nil, "zero": new(sluice.PreparedRule)} {
		if err := s.Take(context.Background(), t0, []sluice.Check{{Rule: r, Key: "k"}}, make([]sluice.Decision, 1)); err == nil {
			t.Errorf("%s rule: Take = nil, want an error", name)
		}
		if err := s.CheckRule(r); err == nil {
			t.Errorf("%s rule: CheckRule = nil, want an error", name)
		}
	}
	dup := []sluice.Check{{Rule: ok, Key: "k"}, {Rule: ok, Key: "k"}}
	if err := s.Take(context.Background(), t0, dup, make([]sluice.Decision, 2)); err == nil {
		t.Errorf("two checks on one key: no error")
	}
}

// TestKeys: escaped values cannot collide or move a key out of its slot.
func TestKeys(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithCallerTime())
	log := prep(sluice.Rule{Name: "a:b}", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(5)})
	log2 := prep(sluice.Rule{Name: "a", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(5)})
	for _, c := range []sluice.Check{
		{Rule: log, Key: "x"}, {Rule: log, Key: "{x}"}, {Rule: log, Key: "x}:"}, {Rule: log, Key: ""},
		{Rule: log, Key: "%7B"}, {Rule: log2, Key: "b}:x"}, {Rule: log2, Key: "x:b}"},
	} {
		take(t, s, t0, 1, c)
	}
	keys := scanKeys(t, rc, p)
	if len(keys) != 7 {
		t.Fatalf("%d keys, want 7 (7 checks): %q", len(keys), keys)
	}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, p)
		if !strings.HasPrefix(rest, "{") || strings.Count(rest, "{") != 1 || strings.Count(rest, "}") != 1 {
			t.Errorf("key %q: want exactly one hash tag, first", k)
		}
	}
}

// TestConcurrent: many callers at once, their requests batched: exactly
// the limit is allowed, and a request denied by one rule charges no other.
func TestConcurrent(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithDenyCache(0), redis.WithTimeout(5*time.Second))
	wide := prep(sluice.Rule{Name: "wide", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerDay(1000)})
	narrow := prep(sluice.Rule{Name: "narrow", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(300)})
	checks := []sluice.Check{{Rule: wide, Key: "k"}, {Rule: narrow, Key: "k"}}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			out := make([]sluice.Decision, 2)
			for range 10 {
				if err := s.Take(context.Background(), time.Time{}, checks, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed && out[1].Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 300 || denied.Load() != 180 {
		t.Fatalf("%d allowed, %d denied; want 300 and 180", allowed.Load(), denied.Load())
	}
	if d := take(t, s, time.Time{}, 0, checks[0])[0]; d.Remaining != 700 {
		t.Fatalf("wide rule after = %+v, want 700 left: charged only with narrow", d)
	}
	st := s.Stats()
	t.Logf("%+v", st)
	if st.Runs >= st.Calls {
		t.Errorf("no batching: %d runs for %d requests", st.Runs, st.Calls)
	}
}

// TestBucketLimitChange: a bucket rule whose limit changes under the same
// name (a config reload) must not read the old state in the new limit's
// units. PerSecond(3) keeps its debt in units of 1000/3 ns, PerSecond(10)
// in µs: the old debt of a just emptied bucket, a second, must not become
// three seconds. Fresh or carried over as time, the new bucket of 10 a
// second is at most 100ms from allowing one more.
func TestBucketLimitChange(t *testing.T) {
	srv := startRedis(t)
	s := newCallerStore(t, srv)
	for _, alg := range []sluice.Algo{sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA} {
		t.Run(string(alg), func(t *testing.T) {
			r := prep(sluice.Rule{Name: "r" + string(alg), Algorithm: alg, Limit: sluice.PerSecond(3)})
			c := sluice.Check{Rule: r, Key: "k"}
			if d := take(t, s, t0, 3, c)[0]; !d.Allowed {
				t.Fatalf("Take(t0, 3) = %+v", d)
			}
			r2 := r.Rule()
			r2.Limit = sluice.PerSecond(10)
			d := take(t, s, t0, 1, sluice.Check{Rule: prep(r2), Key: "k"})[0]
			if !d.Allowed && d.RetryAfter > 100*time.Millisecond {
				t.Fatalf("after the change to %v: Take(t0, 1) = %+v, want allowed or a RetryAfter of at most 100ms", r2.Limit, d)
			}
		})
	}
}

// TestCallerClockBehind: with WithCallerTime, a key's TTL runs in Redis's
// clock while its state is read at the callers' times. A caller whose
// clock runs a few ms behind Redis's (or whose request waited a few ms
// on the way) must still find the state it left, not idle yet at its
// time: a key that expired at its ResetAfter in Redis time would forget a
// debt and allow what the algorithm denies. Each algorithm takes at t1
// (Redis's time then), then, once Redis's clock is past the key's
// ResetAfter by more than a TTL computed from it would last, tries again
// at t1 + ResetAfter - 1µs in the caller's time: denied, as the algorithm
// says.
func TestCallerClockBehind(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	redisNow := func() time.Time {
		tm, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, alg := range sluice.Algos() {
		t.Run(string(alg), func(t *testing.T) {
			s := newStore(t, rc, redis.WithPrefix(prefix(t)), redis.WithCallerTime(), redis.WithDenyCache(0))
			rule := prep(sluice.Rule{Name: "r", Algorithm: alg, Limit: sluice.Limit{Rate: 1, Period: 50 * time.Millisecond}})
			c := sluice.Check{Rule: rule, Key: "k"}
			ref, err := alg.New(rule.Rule().Limit)
			if err != nil {
				t.Fatal(err)
			}
			t1 := redisNow().Truncate(time.Microsecond)
			d1 := take(t, s, t1, 1, c)[0]
			sent := redisNow() // no earlier than the script wrote the key
			if want := ref.AllowN(t1, 1); d1 != want || d1.ResetAfter <= 0 {
				t.Fatalf("Take(t1, 1) = %+v, want %+v", d1, want)
			}
			// Past when a TTL of ResetAfter, rounded up to the ms, would
			// have expired the key, and a ms more.
			gone := sent.Add(d1.ResetAfter.Truncate(time.Millisecond) + 2*time.Millisecond)
			deadline := time.Now().Add(30 * time.Second)
			for redisNow().Before(gone) {
				if time.Now().After(deadline) {
					t.Fatal("Redis's clock did not pass the key's ResetAfter in 30s")
				}
				time.Sleep(time.Millisecond)
			}
			t2 := t1.Add(d1.ResetAfter - time.Microsecond)
			d2 := take(t, s, t2, 1, c)[0]
			if want := ref.AllowN(t2, 1); d2 != want {
				t.Fatalf("Take(t1%+v, 1), with the caller's clock %v behind Redis's: %+v, want %+v (the key expired while its state counted)",
					t2.Sub(t1), redisNow().Sub(t2).Round(time.Millisecond), d2, want)
			}
		})
	}
}

// TestWindowKeys: at Redis TIME, a fixed window is a counter per window
// whose key ends in the window's start, in Unix seconds for a period of
// whole seconds and in µs otherwise, its value the window's count, however
// wrong the store's guess of the window.
func TestWindowKeys(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	// The store sends each key with the window its own clock guesses, and
	// the script mends a wrong guess: a clock a day and a half behind
	// guesses wrong every time.
	behind := sluice.ClockFunc(func() time.Time { return time.Now().Add(-36*time.Hour - 1500*time.Millisecond) })
	for _, tc := range []struct {
		period time.Duration
		code   string
		unit   time.Duration
		clock  sluice.Clock
	}{
		{time.Minute, ":w:", time.Second, sluice.SystemClock},
		{1500 * time.Millisecond, ":wu:", time.Microsecond, sluice.SystemClock},
		{time.Minute, ":w:", time.Second, behind},
		{1500 * time.Millisecond, ":wu:", time.Microsecond, behind},
	} {
		t.Run(fmt.Sprintf("%v/guess=%v", tc.period, tc.clock == sluice.SystemClock), func(t *testing.T) {
			p := prefix(t)
			s := newStore(t, rc, redis.WithPrefix(p), redis.WithDenyCache(0), redis.WithBreakerClock(tc.clock))
			c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 5, Period: tc.period}}), Key: "k"}
			before, err := rc.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			take(t, s, time.Time{}, 1, c)
			take(t, s, time.Time{}, 2, c)
			after, err := rc.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			keys := stateKeys(scanKeys(t, rc, p))
			base := p + "{k}:r" + tc.code
			var counts int64
			for _, k := range keys {
				start, ok := strings.CutPrefix(k, base)
				if !ok {
					t.Fatalf("key %q, want %s<start>", k, base)
				}
				n, err := strconv.ParseInt(start, 10, 64)
				if err != nil {
					t.Fatalf("key %q: window start %q: %v", k, start, err)
				}
				at := time.Unix(0, 0).Add(time.Duration(n) * tc.unit)
				if at.UnixNano()%int64(tc.period) != 0 || at.After(after) || !at.After(before.Add(-tc.period)) {
					t.Errorf("key %q: start %v, want a window start between %v and %v", k, at, before.Add(-tc.period), after)
				}
				v, err := rc.Get(ctx, k).Int64()
				if err != nil {
					t.Fatal(err)
				}
				counts += v
			}
			// The two requests may fall in two windows.
			if len(keys) == 0 || len(keys) > 2 || counts != 3 {
				t.Fatalf("keys %v, counts %d: want one or two windows counting 3", keys, counts)
			}
		})
	}
}

// fcallHook records in fns the function each FCALL names, but for the
// runs that hold others back (see hold).
func fcallHook(mu *sync.Mutex, fns *[]string) processHook {
	return func(next goredis.ProcessHook) goredis.ProcessHook {
		return func(ctx context.Context, cmd goredis.Cmder) error {
			if args := cmd.Args(); cmd.Name() == "fcall" && len(args) > 1 && !slices.ContainsFunc(args, isHolderKey) {
				mu.Lock()
				*fns = append(*fns, fmt.Sprint(args[1]))
				mu.Unlock()
			}
			return next(ctx, cmd)
		}
	}
}

// isHolderKey reports whether a command's argument is the key of a run
// that holds others back (see hold).
func isHolderKey(a any) bool {
	k, ok := a.(string)
	return ok && strings.Contains(k, "{holder")
}

// TestFixedRunFunction: at Redis TIME, a run whose every request is one
// unit of a fixed window goes to the library's fixedrun function, and
// decides as take does; any other run goes to take. (TestSameDecisions
// holds fixedrun to the algorithm at the store's clock, TestWindowKeys
// to a wrong guess of the window.)
func TestFixedRunFunction(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	s := newStore(t, rc, redis.WithPrefix(prefix(t)), redis.WithDenyCache(0))
	hour := sluice.Limit{Rate: 4, Period: time.Hour}
	fixed := sluice.Check{Rule: prep(sluice.Rule{Name: "f", Algorithm: sluice.AlgoFixedWindow, Limit: hour}), Key: "k"}
	other := sluice.Check{Rule: prep(sluice.Rule{Name: "f2", Algorithm: sluice.AlgoFixedWindow, Limit: hour}), Key: "k"}
	gcra := sluice.Check{Rule: prep(sluice.Rule{Name: "g", Algorithm: sluice.AlgoGCRA, Limit: hour}), Key: "k"}
	take(t, s, time.Time{}, 1, gcra) // loads the library
	var mu sync.Mutex
	var fns []string
	rc.AddHook(fcallHook(&mu, &fns))
	// Each step is a run of its own; the hour's window may turn between
	// two, so the counts are checked only when it did not.
	steps := []struct {
		n      int64
		checks []sluice.Check
		fn     string
	}{
		{1, []sluice.Check{fixed}, "sluice_fixed_"},
		{2, []sluice.Check{fixed}, "sluice_take_"},       // cost 2
		{1, []sluice.Check{fixed, gcra}, "sluice_take_"}, // two checks: the last unit
		{1, []sluice.Check{gcra}, "sluice_take_"},        // another kind
		{1, []sluice.Check{fixed}, "sluice_fixed_"},      // denied
		{1, []sluice.Check{other}, "sluice_fixed_"},      // another rule
	}
	var got []sluice.Decision
	before := time.Now().Truncate(time.Hour)
	for _, st := range steps {
		got = append(got, take(t, s, time.Time{}, st.n, st.checks...)[0])
	}
	if len(fns) != len(steps) {
		t.Fatalf("FCALLs %v, want %d", fns, len(steps))
	}
	for i, st := range steps {
		if !strings.HasPrefix(fns[i], st.fn) {
			t.Errorf("step %d: FCALL %s, want %s*", i, fns[i], st.fn)
		}
	}
	if time.Now().Truncate(time.Hour) != before {
		t.Skip("the hour turned during the steps")
	}
	for i, want := range []struct {
		allowed   bool
		remaining int64
	}{{true, 3}, {true, 1}, {true, 0}, {}, {false, 0}, {true, 3}} {
		if i == 3 {
			continue // gcra's
		}
		if d := got[i]; d.Allowed != want.allowed || d.Remaining != want.remaining || d.Limit != 4 {
			t.Errorf("step %d: %+v, want allowed %v, remaining %d", i, d, want.allowed, want.remaining)
		}
	}
	if d := got[4]; d.RetryAfter <= 0 || d.RetryAfter > time.Hour || d.ResetAfter != d.RetryAfter {
		t.Errorf("denied: %+v, want RetryAfter = ResetAfter within the hour", d)
	}
}

// takeInOneRun queues requests of one check each, checks[i] at cost
// costs[i], in order, behind a run held out on srv paused (see hold), and
// has s send them in one run once it resumes; it returns their decisions.
// s's timeout must outlast the wait.
func takeInOneRun(t *testing.T, srv *server, s *redis.Store, now time.Time, costs []int64, checks []sluice.Check) []sluice.Decision {
	t.Helper()
	resume := srv.pause(t)
	h := hold(t, s)
	calls := s.Stats().Calls
	var wg sync.WaitGroup
	out := make([]sluice.Decision, len(checks))
	for i, c := range checks {
		wg.Go(func() {
			d := make([]sluice.Decision, 1)
			if err := waitingTake(context.Background(), s, now, costed(costs[i], []sluice.Check{c}), d); err != nil {
				t.Error(err)
			}
			out[i] = d[0]
		})
		waitParked(t, s, i+2, calls+int64(i+1))
	}
	resume()
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	return out
}

// A run of units of several fixed windows goes to fixedrun too, each
// request decided by its own rule, however the rules alternate; a run
// with a request of another shape or another kind beside them goes to
// take.
func TestFixedRunRules(t *testing.T) {
	srv := startRedis(t)
	rc := srv.patientClient(t)
	s := newStore(t, rc, redis.WithPrefix(prefix(t)), redis.WithDenyCache(0))
	one := sluice.Check{Rule: prep(sluice.Rule{Name: "one", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 1, Period: time.Hour}}), Key: "k"}
	five := sluice.Check{Rule: prep(sluice.Rule{Name: "five", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 5, Period: time.Hour}}), Key: "k"}
	one2 := one
	one2.Key = "k2"
	gcra := sluice.Check{Rule: prep(sluice.Rule{Name: "g", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1, Period: time.Hour}}), Key: "k"}
	before := time.Now().Truncate(time.Hour)
	take(t, s, time.Time{}, 1, five) // five's count 1; loads the library
	take(t, s, time.Time{}, 1, one2) // one2's count 1: its next unit is over
	var mu sync.Mutex
	var fns []string
	rc.AddHook(fcallHook(&mu, &fns))
	// one's rule, five's, then one's again: each by its own rate
	rules := takeInOneRun(t, srv, s, time.Time{}, []int64{1, 1, 1}, []sluice.Check{one, five, one2})
	// a unit, then two units of the same rule
	mixed := takeInOneRun(t, srv, s, time.Time{}, []int64{1, 2}, []sluice.Check{five, five})
	// a fixed window's unit (five's sixth), then a GCRA's
	kinds := takeInOneRun(t, srv, s, time.Time{}, []int64{1, 1}, []sluice.Check{five, gcra})
	if len(fns) != 3 || !strings.HasPrefix(fns[0], "sluice_fixed_") || !strings.HasPrefix(fns[1], "sluice_take_") || !strings.HasPrefix(fns[2], "sluice_take_") {
		t.Errorf("FCALLs %v, want fixedrun's, then take's twice", fns)
	}
	if time.Now().Truncate(time.Hour) != before {
		t.Skip("the hour turned during the steps")
	}
	if d := rules; !d[0].Allowed || d[0].Remaining != 0 || !d[1].Allowed || d[1].Remaining != 3 || d[2].Allowed || d[2].Limit != 1 {
		t.Errorf("three units of two rules: %+v, want one's allowed with 0 left, five's with 3, one's second key denied", d)
	}
	if !mixed[0].Allowed || mixed[0].Remaining != 2 || !mixed[1].Allowed || mixed[1].Remaining != 0 {
		t.Errorf("a unit and two: %+v, want allowed with 2 left, then 0", mixed)
	}
	if kinds[0].Allowed || kinds[0].Limit != 5 || !kinds[1].Allowed || kinds[1].Limit != 1 || kinds[1].ResetAfter < 59*time.Minute {
		t.Errorf("a fixed window's unit and a GCRA's: %+v, want five's denied, the GCRA's allowed, reset in an hour", kinds)
	}
}

// A run of units of buckets of several rules, each request decided by its
// own rule however the rules alternate (take's one-unit path, a stretch a
// rule), at Redis TIME and at the callers' time.
func TestBucketRunRules(t *testing.T) {
	srv := startRedis(t)
	rc := srv.patientClient(t)
	for _, opts := range [][]redis.Option{nil, {redis.WithCallerTime()}} {
		s := newStore(t, rc, append([]redis.Option{redis.WithPrefix(prefix(t)), redis.WithDenyCache(0)}, opts...)...)
		gcra := sluice.Check{Rule: prep(sluice.Rule{Name: "g", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1, Period: time.Hour}}), Key: "k"}
		tb := sluice.Check{Rule: prep(sluice.Rule{Name: "tb", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.Limit{Rate: 5, Period: time.Hour}}), Key: "k"}
		gcra2 := gcra
		gcra2.Key = "k2"
		now := time.Now()
		take(t, s, now, 1, gcra2) // its next unit is over
		var mu sync.Mutex
		var fns []string
		rc.AddHook(fcallHook(&mu, &fns))
		out := takeInOneRun(t, srv, s, now, []int64{1, 1, 1}, []sluice.Check{gcra, tb, gcra2})
		if len(fns) != 1 {
			t.Errorf("%v: FCALLs %v, want one", opts, fns)
		}
		if !out[0].Allowed || out[0].Limit != 1 || !out[1].Allowed || out[1].Remaining != 4 || out[2].Allowed || out[2].RetryAfter < 59*time.Minute {
			t.Errorf("%v: %+v, want the GCRA's and the bucket's allowed (4 left), the second GCRA key's denied for an hour", opts, out)
		}
	}
}

// A run of several fixed windows' units whose keys came with windows
// guessed wrong (a client clock a day and a half behind) is mended rule by
// rule: each key counts in its rule's window at Redis TIME.
func TestFixedRunRulesMended(t *testing.T) {
	srv := startRedis(t)
	rc := srv.patientClient(t)
	ctx := context.Background()
	p := prefix(t)
	behind := sluice.ClockFunc(func() time.Time { return time.Now().Add(-36*time.Hour - 1500*time.Millisecond) })
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithDenyCache(0), redis.WithBreakerClock(behind))
	minute := sluice.Check{Rule: prep(sluice.Rule{Name: "m", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 5, Period: time.Minute}}), Key: "k"}
	odd := sluice.Check{Rule: prep(sluice.Rule{Name: "o", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 5, Period: 1500 * time.Millisecond}}), Key: "k"}
	take(t, s, time.Time{}, 2, minute) // loads the library: take's path, not counted below
	var mu sync.Mutex
	var fns []string
	rc.AddHook(fcallHook(&mu, &fns))
	before, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	takeInOneRun(t, srv, s, time.Time{}, []int64{1, 1, 1}, []sluice.Check{minute, odd, minute})
	after, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != 1 || !strings.HasPrefix(fns[0], "sluice_fixed_") {
		t.Fatalf("FCALLs %v, want one of fixedrun", fns)
	}
	counts := map[string]int64{}
	for _, k := range stateKeys(scanKeys(t, rc, p)) {
		var base string
		var period, unit time.Duration
		switch {
		case strings.HasPrefix(k, p+"{k}:m:w:"):
			base, period, unit = p+"{k}:m:w:", time.Minute, time.Second
		case strings.HasPrefix(k, p+"{k}:o:wu:"):
			base, period, unit = p+"{k}:o:wu:", 1500*time.Millisecond, time.Microsecond
		default:
			t.Fatalf("key %q", k)
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(k, base), 10, 64)
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		at := time.Unix(0, 0).Add(time.Duration(n) * unit)
		if at.After(after) || !at.After(before.Add(-period)) {
			t.Errorf("key %q: window start %v, want one between %v and %v", k, at, before.Add(-period), after)
		}
		v, err := rc.Get(ctx, k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		counts[base] += v
	}
	// the minute's 2 before (in the minute before, maybe) and 2 now
	if counts[p+"{k}:m:w:"] != 4 || counts[p+"{k}:o:wu:"] != 1 {
		t.Errorf("counts %v, want the minute's 4 and the odd period's 1", counts)
	}
}

// fixedrun refuses a run it was not made for (the store's clock off,
// here), before it writes anything: a store sending it one by mistake gets
// an error, not a clock written over its first key.
func TestFixedRunRefusesOthers(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	s := newStore(t, rc, redis.WithPrefix(prefix(t)))
	take(t, s, time.Time{}, 1, sluice.Check{Rule: prep(sluice.Rule{Name: "f", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(5)}), Key: "k"})
	libs, err := rc.FunctionList(ctx, goredis.FunctionListQuery{LibraryNamePattern: "sluice_take_*"}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("libraries %v (%v), want one", libs, err)
	}
	fn := strings.Replace(libs[0].Name, "sluice_take_", "sluice_fixed_", 1)
	head := []byte{0, 0, 0, 1} // no node, no clock, a take, one-unit requests
	head = binary.LittleEndian.AppendUint64(head, math.Float64bits(1<<53))
	head = binary.LittleEndian.AppendUint64(head, math.Float64bits(0))
	head = binary.LittleEndian.AppendUint32(head, 1)
	head = binary.LittleEndian.AppendUint32(head, 1)
	head = append(head, 1)
	key := prefix(t) + "victim"
	if err := rc.Set(ctx, key, "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err = rc.FCall(ctx, fn, []string{key}, string(head), "record").Err()
	if err == nil || !strings.Contains(err.Error(), "fixedrun") {
		t.Errorf("FCALL %s with the clock off: %v, want fixedrun's refusal", fn, err)
	}
	if v, _ := rc.Get(ctx, key).Result(); v != "kept" {
		t.Errorf("the first key holds %q, want it untouched", v)
	}
}

// setClockAhead sets the clock of the store under prefix p to d past now,
// as a failover to a replica whose clock is behind leaves it; clockLeft
// checks that the clock is still there.
func setClockAhead(t *testing.T, rc *goredis.Client, p string, d time.Duration) (at time.Time, clockLeft func()) {
	t.Helper()
	ctx := context.Background()
	at = time.Now().Add(d)
	ahead := binary.LittleEndian.AppendUint64(nil, math.Float64bits(float64(at.UnixMicro())))
	if err := rc.Set(ctx, p+"clock", ahead, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	return at, func() {
		t.Helper()
		if got, err := rc.Get(ctx, p+"clock").Result(); err != nil || got != string(ahead) {
			t.Errorf("clock %x (%v), want %x: left ahead", got, err, ahead)
		}
	}
}

// When the store's clock is ahead of Redis TIME (a failover to a replica
// whose clock is behind), a fixed window's run is decided at the clock's
// time, in its window, and leaves the clock where it was.
func TestFixedRunClockAhead(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithDenyCache(0))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(5)}), Key: "k"}
	take(t, s, time.Time{}, 1, c) // loads the library, sets the clock
	at, clockLeft := setClockAhead(t, rc, p, 2*time.Hour)
	d := take(t, s, time.Time{}, 1, c)
	if !d[0].Allowed || d[0].Remaining != 4 {
		t.Errorf("the first unit at the clock's time: %+v, want allowed, 4 left", d[0])
	}
	if want := time.Minute - time.Duration(at.UnixMicro()%60e6)*time.Microsecond; d[0].ResetAfter != want {
		t.Errorf("ResetAfter %v, want %v: the end of the clock's minute", d[0].ResetAfter, want)
	}
	clockLeft()
	start := strconv.FormatInt(at.Unix()/60*60, 10)
	if n, err := rc.Get(ctx, p+"{k}:r:w:"+start).Int64(); err != nil || n != 1 {
		t.Errorf("the clock's window's count: %d (%v), want 1", n, err)
	}
}

// So is a bucket's: decided at the clock's time, written with it, and the
// clock left ahead.
func TestBucketClockAhead(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithDenyCache(0))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "g", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(5)}), Key: "k"}
	take(t, s, time.Time{}, 1, c) // loads the library, sets the clock
	at, clockLeft := setClockAhead(t, rc, p, 2*time.Hour)
	if d := take(t, s, time.Time{}, 1, c); !d[0].Allowed || d[0].Remaining != 4 {
		t.Errorf("a unit two hours on, the first one's gone: %+v, want allowed, 4 left", d[0])
	}
	clockLeft()
	keys := stateKeys(scanKeys(t, rc, p))
	if len(keys) != 1 {
		t.Fatalf("keys %v, want the bucket's", keys)
	}
	raw, err := rc.Get(ctx, keys[0]).Bytes()
	if err != nil || len(raw) < 8 {
		t.Fatalf("state %x (%v)", raw, err)
	}
	if got := math.Float64frombits(binary.LittleEndian.Uint64(raw)); got != float64(at.UnixMicro()) {
		t.Errorf("state's time %.0f, want the clock's %d", got, at.UnixMicro())
	}
}

// TestWindowKeysShared: with WithWindowKeys, a fixed window counts in the
// keys another program writes as envoyproxy/ratelimit does (INCRBY on
// <prefix><domain>_<key>_<value>_<window start in Unix seconds>, with an
// EXPIRE of the window), so that sluice continues its counts and it
// sluice's, as old and new pods do during a rolling swap.
func TestWindowKeysShared(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	p := prefix(t)
	base := p + "envoy_dom_user_alice_"
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithDenyCache(0), redis.WithWindowKeys(func(c sluice.Check) string {
		if c.Key == "alice" {
			return base
		}
		return ""
	}))
	const day = 24 * time.Hour
	alice := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 10, Period: day}}), Key: "alice"}
	bob := alice
	bob.Key = "bob"

	// The window must not turn during the steps: a day's does at midnight
	// UTC only; try again if it did.
	for attempt := 0; ; attempt++ {
		now, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		start := now.Unix() / 86400 * 86400
		key := base + strconv.FormatInt(start, 10)
		rc.Del(ctx, key)
		// envoyproxy/ratelimit's pod counts 7 hits.
		rc.Pipelined(ctx, func(pl goredis.Pipeliner) error {
			pl.IncrBy(ctx, key, 7)
			pl.Expire(ctx, key, day)
			return nil
		})
		steps := []struct {
			n    int64
			want sluice.Decision
		}{
			{1, sluice.Decision{Allowed: true, Limit: 10, Remaining: 2}},
			{3, sluice.Decision{Allowed: false, Limit: 10, Remaining: 2}},
			{2, sluice.Decision{Allowed: true, Limit: 10, Remaining: 0}},
		}
		var got []sluice.Decision
		for _, st := range steps {
			got = append(got, take(t, s, time.Time{}, st.n, alice)[0])
		}
		// The old pod counts one more, over the limit as it counts.
		afterEnvoy, err := rc.IncrBy(ctx, key, 1).Result()
		if err != nil {
			t.Fatal(err)
		}
		last := take(t, s, time.Time{}, 1, alice)[0]
		end, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if end.Unix()/86400*86400 != start {
			if attempt < 2 {
				continue
			}
			t.Fatal("the day's window turned three times")
		}
		for i, st := range steps {
			if got[i].Allowed != st.want.Allowed || got[i].Limit != st.want.Limit || got[i].Remaining != st.want.Remaining {
				t.Errorf("step %d: Take(%d) = %+v, want allowed %v, remaining %d", i, st.n, got[i], st.want.Allowed, st.want.Remaining)
			}
		}
		if afterEnvoy != 11 || last.Allowed {
			t.Errorf("after sluice's 3 and the old pod's 1: count %d, then Take(1) = %+v; want 11 and a denial", afterEnvoy, last)
		}
		if v, err := rc.Get(ctx, key).Int64(); err != nil || v != 11 {
			t.Errorf("count %d, %v after the denial; want 11, the denial uncharged", v, err)
		}
		if ttl, err := rc.TTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > day {
			t.Errorf("TTL %v, %v; want the window's", ttl, err)
		}
		// A check f does not name keeps sluice's key.
		take(t, s, time.Time{}, 1, bob)
		if keys := scanKeys(t, rc, p+"{bob}"); len(keys) != 1 || !strings.HasPrefix(keys[0], p+"{bob}:r:w:") {
			t.Errorf("bob's keys %v, want one under sluice's name", keys)
		}
		return
	}
}

// A sliding log's entry is one push: of one unit, or of several. A request
// at a time before the log's last decision is read as that time. Once the
// first entries have left the window, their units no longer count. The
// log is held to the memory store's by the decisions of requests after
// the steps, at times around the entries' leaving (see sameFutures).
func TestLogEntries(t *testing.T) {
	_, _, s, c, now := callerLog(t)
	take(t, s, now, 1, c)
	take(t, s, now, 2, c)
	if d := take(t, s, now.Add(time.Microsecond), 1, c)[0]; !d.Allowed || d.Remaining != 6 {
		t.Errorf("the fourth unit: %+v, want allowed, 6 left", d)
	}
	// A time before the last decision's is read as that time: its entry
	// leaves with the one of a µs on.
	take(t, s, now, 1, c)
	steps := []logStep{{0, 1}, {0, 2}, {time.Microsecond, 1}, {0, 1}}
	around := []time.Duration{time.Minute - time.Microsecond, time.Minute, time.Minute + time.Microsecond, time.Minute + 2*time.Microsecond, 2 * time.Minute}
	sameFutures(t, s, c.Rule, now, steps, around)
	// A minute on, the entries of the first µs have left.
	later := now.Add(time.Minute)
	if d := take(t, s, later, 1, c)[0]; !d.Allowed || d.Remaining != 7 {
		t.Errorf("a unit a minute on: %+v, want allowed, 7 left (3 of the first µs gone)", d)
	}
	if d := take(t, s, later.Add(time.Microsecond), 0, c)[0]; d.Remaining != 9 {
		t.Errorf("a peek a minute and a µs on: %+v, want 9 left (the two of the second µs gone)", d)
	}
	steps = append(steps, logStep{time.Minute, 1})
	sameFutures(t, s, c.Rule, now, steps, append(around, 2*time.Minute+time.Microsecond))
}

// logStep is a request of n units of one check at t0+at.
type logStep struct {
	at time.Duration
	n  int64
}

// sameFutures holds the log that steps leave to the memory store's: on a
// key of its own that has gone through the steps from t0, at each time
// t0+at, a peek, and on another such key a unit, are decided as the memory
// store decides them. s decides at the caller's time.
func sameFutures(t *testing.T, s *redis.Store, rule *sluice.PreparedRule, t0 time.Time, steps []logStep, at []time.Duration) {
	t.Helper()
	ref, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ctx := context.Background()
	for i, a := range at {
		for _, n := range []int64{0, 1} {
			key := fmt.Sprintf("future:%d:%d:%d", len(steps), i, n)
			c := []sluice.Check{{Rule: rule, Key: key}}
			want := make([]sluice.Decision, 1)
			for _, st := range append(slices.Clone(steps), logStep{a, n}) {
				if err := ref.Take(ctx, t0.Add(st.at), costed(st.n, c), want); err != nil {
					t.Fatal(err)
				}
				if got := take(t, s, t0.Add(st.at), st.n, c...)[0]; got != want[0] {
					t.Fatalf("after %v, %d at t0%+v = %+v, want the memory store's %+v", steps, st.n, st.at, got, want[0])
				}
			}
		}
	}
}

// The units an entry holds beyond one are counted, on the general path
// and on the one-unit path, and when the entry leaves the window they
// count no more.
func TestLogUnitsBeyondOne(t *testing.T) {
	t.Run("general path", func(t *testing.T) {
		_, _, s, c, now := callerLog(t)
		take(t, s, now, 3, c)
		take(t, s, now.Add(30*time.Second), 2, c)
		// The entry of 3 units leaves.
		if d := take(t, s, now.Add(61*time.Second), 1, c)[0]; !d.Allowed || d.Remaining != 7 {
			t.Errorf("a unit at 61s: %+v, want allowed, 7 left", d)
		}
		steps := []logStep{{0, 3}, {30 * time.Second, 2}, {61 * time.Second, 1}}
		sameFutures(t, s, c.Rule, now, steps, []time.Duration{89 * time.Second, 90 * time.Second, 90*time.Second + time.Microsecond, 121 * time.Second, 121*time.Second + time.Microsecond})
	})

	t.Run("one-unit path", func(t *testing.T) {
		rc := startRedis(t).client(t)
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p))
		minute := sluice.Check{Rule: prep(sluice.Rule{Name: "m", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(10)}), Key: "k"}
		take(t, s, time.Time{}, 3, minute)
		runs := s.Stats().Runs
		if d := take(t, s, time.Time{}, 1, minute)[0]; !d.Allowed || d.Remaining != 6 {
			t.Errorf("a unit after 3: %+v, want allowed, 6 left", d)
		}
		if got := s.Stats().Runs - runs; got != 1 {
			t.Errorf("the unit took %d runs, want 1: decided on the path of its own", got)
		}
		// Entries that leave: of a log with a short Period.
		c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.Limit{Rate: 10, Period: 300 * time.Millisecond}}), Key: "k"}
		take(t, s, time.Time{}, 3, c)
		take(t, s, time.Time{}, 1, c)
		time.Sleep(400 * time.Millisecond) // every entry leaves the window
		if d := take(t, s, time.Time{}, 1, c)[0]; !d.Allowed || d.Remaining != 9 {
			t.Errorf("a unit once the others left: %+v, want allowed, 9 left", d)
		}
		// the units beyond one of the entry that left count no more
		if d := take(t, s, time.Time{}, 1, c)[0]; !d.Allowed || d.Remaining != 8 {
			t.Errorf("a unit after: %+v, want allowed, 8 left", d)
		}
	})

	// An entry of 5 units that left the window, not trimmed yet, its 4
	// beyond one still in the anchor's x: a one-unit request, whose first
	// read holds the whole list, counts without them, even under a rate
	// lowered to 3 under the same name, where with them it would be full.
	t.Run("one-unit path, units that left", func(t *testing.T) {
		rc := startRedis(t).client(t)
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p), redis.WithStoreClock())
		high := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.Limit{Rate: 10, Period: time.Second}}), Key: "k"}
		low := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.Limit{Rate: 3, Period: time.Second}}), Key: "k"}
		take(t, s, t0, 5, high)
		take(t, s, t0.Add(500*time.Millisecond), 1, high)
		runs := s.Stats().Runs
		if d := take(t, s, t0.Add(1200*time.Millisecond), 1, low)[0]; !d.Allowed || d.Remaining != 1 {
			t.Errorf("a unit at the lower rate, the 5 gone: %+v, want allowed, 1 left", d)
		}
		if got := s.Stats().Runs - runs; got != 1 {
			t.Errorf("the unit took %d runs, want 1: decided on the path of its own", got)
		}
	})
}

// A store at the store's clock and one at the callers' share a prefix (a
// configuration being rolled out, say), the callers' clock ahead: a push
// at the callers' time keeps its time in the anchor, so that the one-unit
// path, which reads no newest entry, does not push before it, and the
// decisions are the memory store's, which reads a time before the latest
// decided at as that time.
func TestLogMixedClocks(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	p := prefix(t)
	clocked := newStore(t, rc, redis.WithPrefix(p), redis.WithStoreClock(), redis.WithDenyCache(0))
	callers := newStore(t, rc, redis.WithPrefix(p), redis.WithCallerTime(), redis.WithDenyCache(0))
	ref, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	checks := []sluice.Check{{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.Limit{Rate: 10, Period: time.Second}}), Key: "k"}}
	both := func(s *redis.Store, at time.Time, n int64, what string) {
		t.Helper()
		want := make([]sluice.Decision, 1)
		if err := ref.Take(ctx, at, costed(n, checks), want); err != nil {
			t.Fatal(err)
		}
		if got := take(t, s, at, n, checks...)[0]; got != want[0] {
			t.Errorf("%s: %+v, want the memory store's %+v", what, got, want[0])
		}
	}
	both(callers, t0.Add(500*time.Millisecond), 1, "a unit at the callers' time, 500ms ahead")
	runs := clocked.Stats().Runs
	both(clocked, t0, 1, "a unit at the store's clock")
	if got := clocked.Stats().Runs - runs; got != 2 {
		t.Errorf("the store's clock's unit took %d runs, want 2: decided again on the general path", got)
	}
	both(callers, t0.Add(250*time.Millisecond), 0, "a peek at 250ms")
	both(callers, t0.Add(1250*time.Millisecond), 0, "a peek at 1250ms")
}

// callerLog starts a Redis with a store at the caller's time under a
// prefix p of its own, and returns them with a check of a sliding log of
// 10 a minute and a time to decide at.
func callerLog(t *testing.T) (*goredis.Client, string, *redis.Store, sluice.Check, time.Time) {
	t.Helper()
	rc := startRedis(t).client(t)
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithCallerTime())
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(10)}), Key: "k"}
	return rc, p, s, c, time.Unix(1_700_000_000, 0)
}

// logKey is the one key of a sliding log under prefix p.
func logKey(t testing.TB, rc *goredis.Client, p string) string {
	t.Helper()
	for _, k := range scanKeys(t, rc, p) {
		if strings.HasSuffix(k, ":lu") {
			return k
		}
	}
	t.Fatalf("no sliding log under %q", p)
	return ""
}

// setLogRaw writes element i of a sliding log's list (0 its anchor, -1
// its newest entry) as the doubles e.
func setLogRaw(t testing.TB, rc *goredis.Client, key string, i int64, e ...float64) {
	t.Helper()
	var b []byte
	for _, v := range e {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	if err := rc.LSet(context.Background(), key, i, b).Err(); err != nil {
		t.Fatal(err)
	}
}

// A sliding log's key is given its TTL, a span of two Periods, a Period
// and the slack, on the one-unit path by a push whose oldest entry in the
// window is of another aligned span than its time (or that finds none),
// and left alone by a push whose oldest entry is of its own span: the
// first push of a span was at the span's start or after, so the key
// outlives the span's every entry by a Period and the slack at least. The
// general path, whose time may not run as Redis's does (the callers'
// clocks), sets it at every decision: a caller whose clock stands still,
// every request read as the latest time decided at, keeps the key while
// it asks.
func TestLogExpiresLazily(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerSecond(1000)}), Key: "k"}
	pttl := func(key string) time.Duration {
		t.Helper()
		d, err := rc.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	hour := func(key string) {
		t.Helper()
		if err := rc.PExpire(ctx, key, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const span = 2 * time.Second                 // two Periods
	const ttl = span + time.Second + time.Second // a Period past the span, and the slack

	t.Run("one-unit path", func(t *testing.T) {
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p))
		deadline := time.Now().Add(20 * time.Second)
		// redisTime is Redis TIME in µs: a push's time lies between the
		// readings before and after it.
		redisTime := func() float64 {
			t.Helper()
			at, err := rc.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			return float64(at.UnixMicro())
		}
		for {
			first := redisTime()
			take(t, s, time.Time{}, 1, c)
			key := logKey(t, rc, p)
			if d := pttl(key); d <= 0 || d > ttl {
				t.Fatalf("PTTL after the first push %v, want at most %v", d, ttl)
			}
			hour(key)
			take(t, s, time.Time{}, 1, c)
			second := redisTime()
			spanOf := func(us float64) float64 { return math.Floor(us / float64(span.Microseconds())) }
			if spanOf(first) != spanOf(second) || second-first >= 1e6 {
				if time.Now().After(deadline) {
					t.Fatal("no two pushes in one span, within a Period, in 20s")
				}
				if err := rc.Del(ctx, key).Err(); err != nil {
					t.Fatal(err)
				}
				continue // the second push began a span, or found the first gone: try again
			}
			if d := pttl(key); d <= 59*time.Minute {
				t.Errorf("PTTL after a push whose oldest entry is of its span %v, want the hour set before: left alone", d)
			}
			time.Sleep(time.Until(time.UnixMicro(int64(spanOf(second)+1) * span.Microseconds())))
			take(t, s, time.Time{}, 1, c)
			if d := pttl(key); d > ttl {
				t.Errorf("PTTL after the first push of the next span %v, want at most %v", d, ttl)
			}
			return
		}
	})

	// Whether a push sets the TTL or leaves it, the key then lives a
	// Period and the slack past the push at least: pushes every quarter
	// second for three seconds, across spans.
	t.Run("outlives its entries", func(t *testing.T) {
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p))
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			before := time.Now()
			take(t, s, time.Time{}, 1, c)
			// a Period and the slack, less what passed since the push and
			// a millisecond of Redis's rounding
			least := time.Second + time.Second - time.Since(before) - time.Millisecond
			if d := pttl(logKey(t, rc, p)); d < least {
				t.Fatalf("PTTL after a push %v, want at least %v", d, least)
			}
			time.Sleep(250 * time.Millisecond)
		}
	})

	t.Run("general path", func(t *testing.T) {
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p), redis.WithCallerTime())
		now := time.Unix(1_700_000_000, 0)
		take(t, s, now, 1000, c)
		key := logKey(t, rc, p)
		hour(key)
		take(t, s, now.Add(time.Millisecond), 0, c) // a peek
		if d := pttl(key); d > ttl {
			t.Errorf("PTTL after a peek %v, want at most %v: set", d, ttl)
		}
		hour(key)
		// A clock that stands still: read as the time decided at last.
		if d := take(t, s, now.Add(-time.Millisecond), 1, c)[0]; d.Allowed {
			t.Errorf("a unit over the rate: %+v, want denied", d)
		}
		if d := pttl(key); d > ttl {
			t.Errorf("PTTL after a denial %v, want at most %v: set again", d, ttl)
		}
	})
}

// A rule whose rate came down under the same name finds more counted than
// it allows: its Remaining is 0, never below. The fixed window's packed
// state and the sliding log, on the general path (the caller's time).
func TestRemainingNeverNegative(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithCallerTime())
	now := time.Unix(1_700_000_000, 0)
	for _, alg := range []sluice.Algo{sluice.AlgoFixedWindow, sluice.AlgoSlidingLog} {
		high := prep(sluice.Rule{Name: string(alg), Algorithm: alg, Limit: sluice.PerMinute(100)})
		low := prep(sluice.Rule{Name: string(alg), Algorithm: alg, Limit: sluice.PerMinute(10)})
		take(t, s, now, 50, sluice.Check{Rule: high, Key: "k"})
		if d := take(t, s, now, 1, sluice.Check{Rule: low, Key: "k"})[0]; d.Allowed || d.Remaining != 0 {
			t.Errorf("%s: 1 at the lower rate, 50 counted = %+v, want denied, 0 remaining", alg, d)
		}
		if d := take(t, s, now, 0, sluice.Check{Rule: low, Key: "k"})[0]; d.Remaining != 0 {
			t.Errorf("%s: a peek at the lower rate, 50 counted = %+v, want 0 remaining", alg, d)
		}
	}
}

// A store whose clock runs ahead of Redis TIME (Redis's clock went back)
// decides at the clock's time, which stands still until Redis's catches
// up: a sliding log's one-unit request then goes to the general path,
// which sets the key's TTL at every decision, so that a clock standing
// still does not let the key expire under its entries.
func TestLogClockAhead(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx := context.Background()
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p))
	c := sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(10)}), Key: "k"}
	take(t, s, time.Time{}, 1, c)
	key := logKey(t, rc, p)
	ahead := binary.LittleEndian.AppendUint64(nil, math.Float64bits(float64(time.Now().Add(time.Hour).UnixMicro())))
	if err := rc.Set(ctx, p+"clock", ahead, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.PExpire(ctx, key, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if d := takeRedone(t, s, c); !d.Allowed || d.Remaining != 9 {
		t.Errorf("a unit at the clock's time, an hour on: %+v, want allowed, 9 left (the first unit gone)", d)
	}
	// Another unit at the clock's time, which has not moved: a push whose
	// oldest entry is of its own span, which the one-unit path would
	// leave the TTL alone for.
	if err := rc.PExpire(ctx, key, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if d := takeRedone(t, s, c); !d.Allowed || d.Remaining != 8 {
		t.Errorf("a second unit at the clock's time: %+v, want allowed, 8 left", d)
	}
	if d, err := rc.PTTL(ctx, key).Result(); err != nil || d > 3*time.Minute+time.Second {
		t.Errorf("PTTL %v (%v), want at most three Periods and the slack: set", d, err)
	}
}

// givingBack is a Pair at the callers' time whose second store's Redis
// the test pauses: a request with a check there that denies has its part
// in the main store given back, and the test acts in between.
type givingBack struct {
	main   *redis.Store // on a Redis of its own, for the checks to give back
	mainRC *goredis.Client
	pair   *redis.Pair
	second *server
	deny   sluice.Check // in the second store, denied
}

func newGivingBack(t *testing.T, opts ...redis.Option) *givingBack {
	t.Helper()
	mainSrv, secondSrv := startRedis(t), startRedis(t)
	g := &givingBack{mainRC: mainSrv.client(t), second: secondSrv}
	g.main = newStore(t, g.mainRC, append([]redis.Option{redis.WithPrefix(prefix(t)), redis.WithCallerTime()}, opts...)...)
	second := newStore(t, secondSrv.patientClient(t), redis.WithPrefix(prefix(t)), redis.WithCallerTime(), redis.WithTimeout(time.Minute))
	var err error
	if g.pair, err = redis.NewPair(g.main, second, func(r sluice.Rule) bool { return r.Name == "deny" }); err != nil {
		t.Fatal(err)
	}
	g.deny = sluice.Check{Rule: prep(sluice.Rule{Name: "deny", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1)}), Key: "k"}
	take(t, second, t0.Add(-time.Hour), 1, g.deny) // denied for the day after
	return g
}

// takeGivenBack has the Pair decide checks in the main store beside the
// denied one, at at: the main part is taken, then, while the second
// store's Redis is paused, between runs, and once it resumes the part is
// given back. It returns the checks' decisions: the give-back's peeks
// for the checks it charged.
func (g *givingBack) takeGivenBack(t *testing.T, at time.Time, checks []sluice.Check, between func()) []sluice.Decision {
	t.Helper()
	runs := commandCalls(t, g.mainRC, "fcall")
	resume := g.second.pause(t)
	out := make([]sluice.Decision, len(checks)+1)
	errc := make(chan error, 1)
	go func() {
		errc <- g.pair.Take(context.Background(), at, append(slices.Clone(checks), g.deny), out)
	}()
	waitUntil(t, "the main part taken", func() bool { return commandCalls(t, g.mainRC, "fcall") > runs })
	if between != nil {
		between()
	}
	resume()
	if err := <-errc; err != nil {
		t.Fatalf("Take: %v", err)
	}
	if d := out[len(checks)]; d.Allowed {
		t.Fatalf("the second store's check: %+v, want denied", d)
	}
	if st := g.main.Stats(); st.GiveBacks == 0 {
		t.Fatalf("Stats = %+v, want the main part given back", st)
	}
	return out[:len(checks)]
}

// A give-back of the newest entry's every unit drops the entry, and the
// latest time decided at that it held (a peek's, after the take) stays
// with the entry before it: the give-back's peek, sent at the take's
// time, is read as that time, as the memory store reads it.
func TestLogGiveBackKeepsLatestTime(t *testing.T) {
	g := newGivingBack(t)
	s := g.main
	ctx := context.Background()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.Limit{Rate: 2, Period: 10 * time.Second}})
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	ref, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	both := func(sec float64, n int64) (got, want sluice.Decision) {
		t.Helper()
		out := make([]sluice.Decision, 1)
		if err := ref.Take(ctx, at(sec), costed(n, checks), out); err != nil {
			t.Fatal(err)
		}
		return take(t, s, at(sec), n, checks...)[0], out[0]
	}
	both(-5, 1)
	// A take at 3s, a peek at 8s in between, then the take given back.
	between := func() { take(t, s, at(8), 0, checks...) }
	if err := ref.Take(ctx, at(8), costed(0, checks), make([]sluice.Decision, 1)); err != nil {
		t.Fatal(err)
	}
	back := g.takeGivenBack(t, at(3), checks, between)
	want := make([]sluice.Decision, 1)
	if err := ref.Take(ctx, at(3), costed(0, checks), want); err != nil {
		t.Fatal(err)
	}
	if back[0] != want[0] {
		t.Errorf("the give-back's peek %+v, want %+v (the memory store's, at 8s)", back[0], want[0])
	}
}

// A give-back takes out the entry its take pushed, the newest or not,
// and its units beyond one no longer count; a give-back after its entry
// left the window and was trimmed takes nothing out. The log is then held
// to the memory store's, which never saw the take, by peeks at the times
// its entries leave.
func TestLogGiveBackTakesEntryOut(t *testing.T) {
	g := newGivingBack(t)
	s := g.main
	ctx := context.Background()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(10)})
	ref, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	// both has both stores decide n units of key at t, and the memory
	// store's decision must be s's where exact.
	both := func(key string, t1 time.Time, n int64, exact bool) {
		t.Helper()
		c := []sluice.Check{{Rule: rule, Key: key}}
		want := make([]sluice.Decision, 1)
		if err := ref.Take(ctx, t1, costed(n, c), want); err != nil {
			t.Fatal(err)
		}
		if got := take(t, s, t1, n, c...)[0]; exact && got != want[0] {
			t.Errorf("%s: %d at t0%+v = %+v, want the memory store's %+v", key, n, t1.Sub(t0), got, want[0])
		}
	}

	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	both("k", at(0), 1, true)
	between := func() { both("k", at(2), 1, false) } // the memory store's unit at 2s is taken with it
	g.takeGivenBack(t, at(1), costed(2, checks), between)
	if d := take(t, s, at(3), 0, checks...)[0]; d.Remaining != 8 {
		t.Errorf("a peek after: %+v, want 8 left", d)
	}
	for _, sec := range []time.Duration{60*time.Second - time.Microsecond, 60 * time.Second, 60*time.Second + time.Microsecond, 61*time.Second + time.Microsecond, 62 * time.Second, 62*time.Second + time.Microsecond} {
		both("k", t0.Add(sec), 0, true)
	}

	checks = []sluice.Check{{Rule: rule, Key: "k2"}}
	both("k2", at(0), 1, true)
	both("k2", at(2), 1, true)
	between = func() { both("k2", at(100), 1, false) } // the memory store's unit at 100s is taken with it
	g.takeGivenBack(t, at(40), checks, between)
	if d := take(t, s, at(100), 0, checks...)[0]; d.Remaining != 9 {
		t.Errorf("a peek after: %+v, want 9 left", d)
	}
	for _, sec := range []time.Duration{100 * time.Second, 160*time.Second - time.Microsecond, 160 * time.Second, 160*time.Second + time.Microsecond} {
		both("k2", t0.Add(sec), 0, true)
	}
}

// The tests' rules are valid, and their requests have a cost (see
// teststore.Costed).
var (
	prep   = teststore.Prepare
	costed = teststore.Costed
)

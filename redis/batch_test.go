package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// A run serving several callers must not be cut short by its leader's
// deadline: here the leader's has passed, the others have half a minute,
// and their requests are decided.
func TestBatchOutlivesLeaderDeadline(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithCallerTime(), redis.WithTimeout(0))
	release := redis.HoldLeaders(s)
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)})
	now := time.Unix(1_700_000_000, 0)

	const members = 3
	var wg sync.WaitGroup
	errs := make([]error, members)
	outs := make([][]sluice.Decision, members)
	for i := range members {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			outs[i] = make([]sluice.Decision, 1)
			errs[i] = s.Take(ctx, now, []sluice.Check{{Rule: rule, Key: "k"}}, outs[i])
		})
	}
	waitQueued(t, s, members)
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := redis.LeadAs(past, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the expired leader got %v, want its own context's error", err)
	}
	wg.Wait()
	release()
	if n := redis.Running(s); n != 0 {
		t.Errorf("%d leader slots still taken", n)
	}
	for i := range members {
		if errs[i] != nil || !outs[i][0].Allowed {
			t.Errorf("member %d: Take = %v, %+v; want allowed", i, errs[i], outs[i][0])
		}
	}
}

// While a run is out, requests wait for it rather than go in a second
// run of their own, until there are enough of them to fill one: then they
// go at once, beside the run out.
func TestSecondRunOnlyWhenFull(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithCallerTime(), redis.WithMaxBatch(4), redis.WithTimeout(0))
	release := redis.HoldRun(s, 0)
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(100)})
	now := time.Unix(1_700_000_000, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	take := func(n int) {
		for range n {
			wg.Go(func() {
				out := make([]sluice.Decision, 1)
				if err := s.Take(ctx, now, []sluice.Check{{Rule: rule, Key: "k"}}, out); err != nil || !out[0].Allowed {
					t.Errorf("Take = %v, %+v; want allowed", err, out[0])
				}
			})
		}
	}

	take(3)
	for redis.Queued(s) < 3 {
		if n := redis.Running(s); n != 1 {
			t.Fatalf("%d runs out with %d requests queued, want them queued behind the one run out", n, redis.Queued(s))
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of 3 requests queued", redis.Queued(s))
		}
		time.Sleep(time.Millisecond)
	}
	take(1) // the fourth fills a run: it goes, the first run still out
	wg.Wait()
	if st := s.Stats(); st.Runs != 1 || st.Calls != 4 {
		t.Errorf("Stats = %+v, want the 4 requests in 1 run", st)
	}

	take(2)
	waitQueued(t, s, 2)
	release() // the run out ends: its leader hands the queue on
	wg.Wait()
	if st := s.Stats(); st.Runs != 2 || st.Calls != 6 {
		t.Errorf("Stats = %+v, want the 2 more requests in 1 more run", st)
	}
	if n := redis.Running(s); n != 0 {
		t.Errorf("%d leader slots still taken", n)
	}
}

// A run out that does not come back holds up the requests after it only
// until it has been out for half the Store's timeout: then they go in a
// run of their own, however few.
func TestSecondRunWhenStalled(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithCallerTime(), redis.WithTimeout(10*time.Second))
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(100)})
	now := time.Unix(1_700_000_000, 0)
	c := []sluice.Check{{Rule: rule, Key: "k"}}

	// out for a second: it has not stalled; a request queues behind it
	release := redis.HoldRun(s, time.Second)
	done := make(chan error, 1)
	go func() { done <- s.Take(context.Background(), now, c, make([]sluice.Decision, 1)) }()
	waitQueued(t, s, 1)
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// out for 6s of a 10s timeout: the next request goes at once
	release = redis.HoldRun(s, 6*time.Second)
	defer release()
	out := make([]sluice.Decision, 1)
	if err := s.Take(context.Background(), now, c, out); err != nil || !out[0].Allowed {
		t.Fatalf("beside a stalled run: Take = %v, %+v; want allowed", err, out[0])
	}
	if st := s.Stats(); st.Runs != 2 {
		t.Errorf("Stats = %+v, want 2 runs", st)
	}
}

// waitQueued waits until n requests are queued in s's batcher: for the
// goroutines to get there, not for time to pass.
func waitQueued(t *testing.T, s *redis.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for redis.Queued(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests queued after 30s", redis.Queued(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A queued caller stops waiting when the Store's timeout runs out, on
// its own timer: it is shed (sluice.ErrShed), not failed, since its
// request was never sent; the key is not charged, and neither the errors
// nor the breaker count it.
func TestQueuedCallerTimesOut(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithCallerTime(), redis.WithTimeout(20*time.Millisecond))
	release := redis.HoldLeaders(s)
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)})
	now := time.Unix(1_700_000_000, 0)
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	out := make([]sluice.Decision, 1)
	if err := s.Take(context.Background(), now, checks, out); !errors.Is(err, sluice.ErrShed) || errors.Is(err, redis.ErrTimeout) {
		t.Fatalf("queued past the timeout: Take = %v, want ErrShed", err)
	}
	if st := s.Stats(); st.Shed != 1 || st.Timeouts != 0 || st.Errors != 0 {
		t.Errorf("Stats = %+v, want one request shed and no error", st)
	}
	release()
	// The next caller leads what is left in the queue. Its own call to
	// Redis has the same 20ms, which a loaded machine may miss: that is
	// no failure here (a peek charges nothing either way). The key is
	// then read through a store with a deadline of seconds.
	if err := s.Take(context.Background(), now, costed(0, checks), out); err != nil && !errors.Is(err, redis.ErrTimeout) && !errors.Is(err, sluice.ErrShed) {
		t.Fatalf("after the timeout: peek = %v", err)
	}
	patient := newStore(t, srv.client(t), redis.WithCallerTime(), redis.WithTimeout(10*time.Second))
	if err := patient.Take(context.Background(), now, checks, out); err != nil || !out[0].Allowed {
		t.Fatalf("after the timeout: Take = %v, %+v; want the key uncharged, allowed", err, out[0])
	}
	if redis.Queued(s) != 0 {
		t.Errorf("%d requests still queued", redis.Queued(s))
	}
	if n := redis.Running(s); n != 0 {
		t.Errorf("%d leader slots still taken", n)
	}
}

// One run of requests on 255 rules, every byte a rule can have in the
// run's shape, letters, a pattern's magic characters ('%', '-', ']', '^')
// and bytes past 127 among them: the script decides the one-check
// requests a stretch of one rule at a time (see upto in take.lua), and
// finds where a stretch ends by its rule's byte. The requests queue in a
// set order: each rule has two on one key, side by side (a stretch of
// two) for the even rules, apart for the odd ones, and a request of two
// checks (the general path, a 0 in the shape) comes after every
// sixteenth rule. A rule allows one request a key: every pair must be one
// allowed and one denied, each reply the request's own.
func TestStretchesOfManyRules(t *testing.T) {
	srv := startRedis(t)
	algs := []sluice.Algo{sluice.AlgoGCRA, sluice.AlgoFixedWindow, sluice.AlgoSlidingCounter, sluice.AlgoTokenBucket, sluice.AlgoSlidingLog}
	const nrules = 255
	rules := make([]*sluice.PreparedRule, nrules)
	for i := range rules {
		// Each its own period, so that a reply decided by another rule
		// shows; the logs' first ones below 2^26 µs, on their path of
		// their own.
		period := time.Duration(i+1) * time.Second
		rules[i] = prep(sluice.Rule{Name: fmt.Sprintf("r%d", i), Algorithm: algs[i%len(algs)], Limit: sluice.Limit{Rate: 1, Period: period, Burst: 1}})
	}
	const general = -1
	var order []int // rule indexes, or general
	for r := range nrules {
		order = append(order, r)
		if r%2 == 0 {
			order = append(order, r)
		}
		if r%16 == 15 {
			order = append(order, general)
		}
	}
	for r := 1; r < nrules; r += 2 {
		order = append(order, r)
	}
	s := newStore(t, srv.client(t), redis.WithMaxBatch(len(order)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := redis.HoldRun(s, 0)
	got := make([][]sluice.Decision, nrules)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n, r := range order {
		wg.Go(func() {
			checks := []sluice.Check{{Rule: rules[0], Key: fmt.Sprintf("g%d", n)}, {Rule: rules[1], Key: fmt.Sprintf("g%d", n)}}
			if r != general {
				checks = []sluice.Check{{Rule: rules[r], Key: "k"}}
			}
			out := make([]sluice.Decision, len(checks))
			if err := s.Take(ctx, time.Now(), checks, out); err != nil {
				t.Error(err)
			}
			if r == general {
				if !out[0].Allowed || !out[1].Allowed {
					t.Errorf("request %d, of two checks on keys of their own: %+v, want both allowed", n, out)
				}
				return
			}
			mu.Lock()
			got[r] = append(got[r], out[0])
			mu.Unlock()
		})
		if n < len(order)-1 {
			waitQueued(t, s, n+1) // in order; the last fills the run, which goes beside the one held out
		}
	}
	wg.Wait()
	release()
	if st := s.Stats(); st.Runs != 1 || st.Calls != int64(len(order)) {
		t.Fatalf("Stats = %+v, want the %d requests in 1 run", st, len(order))
	}
	for i, d := range got {
		if len(d) != 2 {
			t.Fatalf("rule %d: %d decisions, want 2", i, len(d))
		}
		a, b := d[0], d[1]
		if a.Allowed == b.Allowed || a.Remaining != 0 || b.Remaining != 0 {
			t.Errorf("rule %d (%s): %+v and %+v, want one allowed and one denied, 0 remaining", i, rules[i].Rule().Algorithm, a, b)
			continue
		}
		denied := a
		if a.Allowed {
			denied = b
		}
		lo, hi := time.Duration(0), rules[i].Rule().Limit.Period
		switch rules[i].Rule().Algorithm {
		case sluice.AlgoSlidingLog: // both decided at one µs: the entry leaves a period on
			lo = hi - time.Microsecond
		case sluice.AlgoGCRA, sluice.AlgoTokenBucket: // a period after the allowed one, less the time between
			lo = max(0, hi-10*time.Second)
		}
		if denied.RetryAfter <= lo || denied.RetryAfter > hi {
			t.Errorf("rule %d (%s): denied with RetryAfter %v, want in (%v, %v]", i, rules[i].Rule().Algorithm, denied.RetryAfter, lo, hi)
		}
	}
}

// errInjected is the error failHook gives a script run.
var errInjected = errors.New("injected failure")

// processHook is a go-redis hook that wraps Process alone.
type processHook func(next goredis.ProcessHook) goredis.ProcessHook

func (processHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h processHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return h(next) }

func (processHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// failHook fails every script run (FCALL, EVALSHA, EVAL) from the
// from-th on (1 the first; 0 none), counting them in runs.
func failHook(runs, from *atomic.Int64) processHook {
	return func(next goredis.ProcessHook) goredis.ProcessHook {
		return func(ctx context.Context, cmd goredis.Cmder) error {
			switch cmd.Name() {
			case "fcall", "evalsha", "eval":
				if n := runs.Add(1); from.Load() > 0 && n >= from.Load() {
					cmd.SetErr(errInjected)
					return errInjected
				}
			}
			return next(ctx, cmd)
		}
	}
}

// A request the script sends back to the general path (-3, see
// cstretch in take.lua) is decided again in a run of its own after the
// first. If that run fails, the error is that request's alone: the other
// request of the first run was decided there, and is answered.
func TestRedoErrorIsItsOwn(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	var runs, from atomic.Int64
	rc.AddHook(failHook(&runs, &from))
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithMaxBatch(2))
	counter := sluice.Check{Rule: prep(sluice.Rule{Name: "c", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerMinute(10)}), Key: "k"}
	other := sluice.Check{Rule: prep(sluice.Rule{Name: "g", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(10)}), Key: "k"}
	take(t, s, time.Time{}, 1, counter)
	// The counter's state written an hour ahead: the one-unit path
	// answers -3 for it (TestCounterStateAhead).
	key, raw, _ := counterAhead(t, rc, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	from.Store(runs.Load() + 2) // the first run goes through; the redo fails
	release := redis.HoldRun(s, 0)
	outC, outO := make([]sluice.Decision, 1), make([]sluice.Decision, 1)
	var errC, errO error
	var wg sync.WaitGroup
	wg.Go(func() { errC = s.Take(ctx, time.Time{}, []sluice.Check{counter}, outC) })
	waitQueued(t, s, 1)
	wg.Go(func() { errO = s.Take(ctx, time.Time{}, []sluice.Check{other}, outO) })
	wg.Wait() // the second fills a run of 2, which goes beside the one held out
	release()
	if got := runs.Load() - (from.Load() - 2); got != 2 {
		t.Errorf("%d script runs, want 2: the run of both, then the counter's again", got)
	}
	if errO != nil || !outO[0].Allowed || outO[0].Remaining != 9 {
		t.Errorf("the other request: %+v, %v; want allowed, 9 left, no error", outO[0], errO)
	}
	if !errors.Is(errC, errInjected) {
		t.Errorf("the request decided again: %+v, %v; want the redo's error", outC[0], errC)
	}
	after, err := rc.Get(ctx, key).Bytes()
	if err != nil || string(after) != string(raw) {
		t.Errorf("the counter's state went from %x to %x (%v): want it unchanged", raw, after, err)
	}
}

// A sliding log's one-unit request, under the store's clock and a Period
// below 2^26 µs, goes on the script's path of its own (lstretch): two in
// one run on one key are decided at one µs, an entry each; a log whose
// anchor holds a later time than the run's (a lost clock), or more counted
// than the rate allows, is decided again on the general path, in a second
// run, with nothing written by the first.
func TestLogPathOfItsOwn(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(10)})

	t.Run("one run", func(t *testing.T) {
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p), redis.WithMaxBatch(2))
		release := redis.HoldRun(s, 0)
		var wg sync.WaitGroup
		outs := [2][]sluice.Decision{make([]sluice.Decision, 1), make([]sluice.Decision, 1)}
		for i := range 2 {
			wg.Go(func() {
				if err := s.Take(ctx, time.Time{}, []sluice.Check{{Rule: rule, Key: "k"}}, outs[i]); err != nil {
					t.Error(err)
				}
			})
			if i == 0 {
				waitQueued(t, s, 1)
			}
		}
		wg.Wait() // the second fills the run, which goes beside the one held out
		release()
		if st := s.Stats(); st.Runs != 1 {
			t.Fatalf("Stats = %+v, want 1 run", st)
		}
		rems := []int64{outs[0][0].Remaining, outs[1][0].Remaining}
		slices.Sort(rems)
		for _, o := range outs {
			if d := o[0]; !d.Allowed || d.ResetAfter != time.Minute || d.RetryAfter != 0 {
				t.Errorf("decision %+v, want allowed, reset in 1m", d)
			}
		}
		if rems[0] != 8 || rems[1] != 9 {
			t.Errorf("remaining %v, want 8 and 9", rems)
		}
		if an, es := logList(t, rc, logKey(t, rc, p)); an.x != 0 || len(es) != 2 || es[0] != es[1] || es[0][1] != 1 {
			t.Errorf("anchor %v, entries %v: want two of one unit at one µs", an, es)
		}
		// The eight units left, then a denial: the waits until the entry
		// leaves the window, from the path of its own.
		for range 8 {
			take(t, s, time.Time{}, 1, sluice.Check{Rule: rule, Key: "k"})
		}
		runs := s.Stats().Runs
		d := take(t, s, time.Time{}, 1, sluice.Check{Rule: rule, Key: "k"})[0]
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.ResetAfter < d.RetryAfter || d.ResetAfter > time.Minute {
			t.Errorf("the eleventh unit: %+v, want denied, a retry within a minute, the reset no sooner", d)
		}
		if got := s.Stats().Runs - runs; got != 1 {
			t.Errorf("the denial took %d runs, want 1: decided on the path of its own", got)
		}
	})

	// oneEntry is a store with a log of one unit taken, its key and the
	// unit's time.
	oneEntry := func(t *testing.T) (*redis.Store, string, float64) {
		t.Helper()
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p))
		take(t, s, time.Time{}, 1, sluice.Check{Rule: rule, Key: "k"})
		key := logKey(t, rc, p)
		_, es := logList(t, rc, key)
		if len(es) != 1 {
			t.Fatalf("entries %v, want one", es)
		}
		return s, key, es[0][0]
	}

	// A later time decided at (a denial's, say) than the run's: the
	// general path decides at that time, when the entry has left.
	t.Run("decided ahead", func(t *testing.T) {
		s, key, at := oneEntry(t)
		setLogRaw(t, rc, key, 0, -(1 << 53), 0, at+3600e6) // the anchor's last, an hour ahead
		d := takeRedone(t, s, sluice.Check{Rule: rule, Key: "k"})
		if !d.Allowed || d.Remaining != 9 {
			t.Errorf("decision %+v, want allowed, 9 left: decided an hour on", d)
		}
	})

	// An anchor that left the window after the run's time: a push trimmed
	// at a later time (a lost clock). The general path decides at the
	// time it left, when the entry after it has left too.
	t.Run("anchor ahead", func(t *testing.T) {
		s, key, at := oneEntry(t)
		setLogRaw(t, rc, key, 0, at+3600e6-60e6) // left the window an hour on
		d := takeRedone(t, s, sluice.Check{Rule: rule, Key: "k"})
		if !d.Allowed || d.Remaining != 9 {
			t.Errorf("decision %+v, want allowed, 9 left: decided an hour on", d)
		}
		if d := take(t, s, time.Time{}, 0, sluice.Check{Rule: rule, Key: "k"})[0]; d.Remaining != 9 {
			t.Errorf("a peek after = %+v, want 9 left", d)
		}
	})

	t.Run("rate lowered", func(t *testing.T) {
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p))
		high := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(100)})
		rateLowered(t, s, high, rule)
	})
}

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
// deadline: here the leader's passes while the run is out, the others
// have half a minute, and their requests are decided.
func TestBatchOutlivesLeaderDeadline(t *testing.T) {
	// The leader's deadline must pass after it led the run, not while it
	// queued: a loaded machine that missed the first is given a longer one.
	for _, wait := range []time.Duration{2 * time.Second, 8 * time.Second, 30 * time.Second} {
		if batchOutlivesLeaderDeadline(t, wait) {
			return
		}
	}
	t.Fatal("the leader's deadline passed each time before it led the run")
}

// batchOutlivesLeaderDeadline reports false if the leader's deadline, wait
// on, passed before it led its run, which then decided nothing of the
// case.
func batchOutlivesLeaderDeadline(t *testing.T, wait time.Duration) bool {
	srv := startRedis(t)
	s := newStore(t, srv.patientClient(t), redis.WithCallerTime(), redis.WithTimeout(0))
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(10)})
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	now := time.Unix(1_700_000_000, 0)
	resume := srv.pause(t)
	h := hold(t, s)

	// the leader first in the queue, then the others
	lctx, lcancel := context.WithTimeout(context.Background(), wait)
	defer lcancel()
	var lerr error
	lout := make([]sluice.Decision, 1)
	var wg sync.WaitGroup
	wg.Go(func() { lerr = waitingTake(lctx, s, now, checks, lout) })
	waitParked(t, s, 2, 2)
	const members = 3
	errs := make([]error, members)
	outs := make([][]sluice.Decision, members)
	for i := range members {
		outs[i] = make([]sluice.Decision, 1)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs[i] = waitingTake(ctx, s, now, checks, outs[i])
		})
	}
	waitParked(t, s, 2+members, 2+members)
	if err := h.release(); !errors.Is(err, context.Canceled) {
		t.Errorf("the holding run's caller gave up: %v, want its context's error", err)
	}
	// The queue handed to the leader, it sends its run: then its deadline
	// passes, with the run out.
	waitUntil(t, "the leader's run written", func() bool { return s.Stats().Runs == 2 })
	led := lctx.Err() == nil
	<-lctx.Done()
	resume()
	wg.Wait()
	if !led {
		t.Logf("the leader's deadline, %v on, passed while it queued", wait)
		return false
	}
	if lerr != nil && !errors.Is(lerr, context.DeadlineExceeded) {
		t.Errorf("the leader got %v, want its decision or its context's error", lerr)
	}
	for i := range members {
		if errs[i] != nil || !outs[i][0].Allowed {
			t.Errorf("member %d: Take = %v, %+v; want allowed", i, errs[i], outs[i][0])
		}
	}
	// The slots are given back: a request goes in a run at once.
	out := make([]sluice.Decision, 1)
	if err := s.Take(context.Background(), now, checks, out); err != nil || !out[0].Allowed {
		t.Errorf("after: Take = %v, %+v; want allowed", err, out[0])
	}
	if st := s.Stats(); st.Runs != 3 {
		t.Errorf("Stats = %+v, want 3 runs: the one held out, the leader's, the last", st)
	}
	return true
}

// While a run is out, requests wait for it rather than go in a second
// run of their own, until there are enough of them to fill one: then they
// go at once, beside the run out.
func TestSecondRunOnlyWhenFull(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.patientClient(t), redis.WithCallerTime(), redis.WithMaxBatch(4), redis.WithTimeout(0))
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(100)})
	now := time.Unix(1_700_000_000, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	take := func(n int) {
		for range n {
			wg.Go(func() {
				out := make([]sluice.Decision, 1)
				if err := waitingTake(ctx, s, now, []sluice.Check{{Rule: rule, Key: "k"}}, out); err != nil || !out[0].Allowed {
					t.Errorf("Take = %v, %+v; want allowed", err, out[0])
				}
			})
		}
	}

	resume := srv.pause(t)
	h := hold(t, s)
	take(3)
	waitParked(t, s, 4, 4)
	if st := s.Stats(); st.Runs != 1 {
		t.Fatalf("Stats = %+v with 3 requests waiting, want them queued behind the one run out", st)
	}
	take(1) // the fourth fills a run: it goes, the first run still out
	waitUntil(t, "a full run written beside the one out", func() bool { return s.Stats().Runs == 2 })
	resume()
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Runs != 2 || st.Calls != 5 {
		t.Errorf("Stats = %+v, want the 4 requests in 1 run beside the one held out", st)
	}

	resume = srv.pause(t)
	h = hold(t, s)
	take(2)
	waitParked(t, s, 3, 8)
	resume() // the run out ends: its leader hands the queue on
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Runs != 4 || st.Calls != 8 {
		t.Errorf("Stats = %+v, want the 2 more requests in 1 more run after the one held out", st)
	}
}

// A run out that does not come back holds up the requests after it only
// until it has been out for half the Store's timeout: then they go in a
// run of their own, however few.
func TestSecondRunWhenStalled(t *testing.T) {
	srv := startRedis(t)
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(100)})
	now := time.Unix(1_700_000_000, 0)
	c := []sluice.Check{{Rule: rule, Key: "k"}}

	// out for less than half a minute's timeout: it has not stalled; a
	// request queues behind it
	s := newStore(t, srv.patientClient(t), redis.WithCallerTime(), redis.WithTimeout(time.Minute))
	resume := srv.pause(t)
	h := hold(t, s)
	done := make(chan error, 1)
	go func() { done <- waitingTake(context.Background(), s, now, c, make([]sluice.Decision, 1)) }()
	waitParked(t, s, 2, 2)
	if st := s.Stats(); st.Runs != 1 {
		t.Errorf("Stats = %+v beside a run out for less than half the timeout, want the request queued", st)
	}
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}

	// out for more than 5s of a 10s timeout: the next request goes at once
	const timeout = 10 * time.Second
	s = newStore(t, srv.patientClient(t), redis.WithCallerTime(), redis.WithTimeout(timeout))
	resume = srv.pause(t)
	h = hold(t, s)
	written := time.Now()
	waitUntil(t, "the run out for half the timeout", func() bool { return time.Since(written) > timeout/2 })
	out := make([]sluice.Decision, 1)
	go func() { done <- waitingTake(context.Background(), s, now, c, out) }()
	waitUntil(t, "a run written beside the stalled one", func() bool { return s.Stats().Runs == 2 })
	if st := s.Stats(); st.Timeouts != 0 {
		t.Fatalf("Stats = %+v: the run held out timed out before the next went, which tells nothing", st)
	}
	resume()
	if err := <-done; err != nil || !out[0].Allowed {
		t.Fatalf("beside a stalled run: Take = %v, %+v; want allowed", err, out[0])
	}
	<-h.done // answered or timed out: either way it was out when the next went
	if st := s.Stats(); st.Runs != 2 {
		t.Errorf("Stats = %+v, want 2 runs", st)
	}
}

// A queued caller stops waiting when the Store's timeout runs out, on
// its own timer: it is shed (sluice.ErrShed), not failed, since its
// request was never sent; the key is not charged, and neither the errors
// nor the breaker count it.
//
// Its turn must come later than its timeout: one request a run, two runs
// out (the most) on a paused Redis, two requests queued ahead of it. Each
// run is bounded by the timeout from its writing, and those queued ahead
// go in runs written once the runs out time out: after the caller queued,
// so they end after its timeout. The three arrive after half the timeout,
// so that the two ahead lead before their own timeout runs out.
func TestQueuedCallerTimesOut(t *testing.T) {
	srv := startRedis(t)
	const timeout = 4 * time.Second
	s := newStore(t, srv.patientClient(t), redis.WithCallerTime(), redis.WithTimeout(timeout), redis.WithMaxBatch(1))
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)})
	now := time.Unix(1_700_000_000, 0)
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	resume := srv.pause(t)
	holders := []*holder{hold(t, s), hold(t, s)}
	written := time.Now()
	waitUntil(t, "half the timeout", func() bool { return time.Since(written) > timeout/2 })
	var wg sync.WaitGroup
	ahead := make([]error, 2)
	for i := range ahead {
		wg.Go(func() {
			ahead[i] = waitingTake(context.Background(), s, now, []sluice.Check{{Rule: rule, Key: fmt.Sprint("ahead", i)}}, make([]sluice.Decision, 1))
		})
		waitParked(t, s, 3+i, int64(3+i))
	}
	out := make([]sluice.Decision, 1)
	errc := make(chan error, 1)
	go func() { errc <- waitingTake(context.Background(), s, now, checks, out) }()
	waitParked(t, s, 5, 5)
	if st := s.Stats(); st.Runs != 2 {
		t.Fatalf("Stats = %+v: a run out ended before the caller queued (a machine too busy for a %v timeout)", st, timeout)
	}
	if err := <-errc; !errors.Is(err, sluice.ErrShed) || errors.Is(err, redis.ErrTimeout) {
		t.Fatalf("queued past the timeout: Take = %v, want ErrShed", err)
	}
	resume()
	wg.Wait()
	timeouts := int64(0)
	for _, err := range append(ahead, holders[0].release(), holders[1].release()) {
		if errors.Is(err, redis.ErrTimeout) {
			timeouts++
		} else if err != nil {
			t.Errorf("a request ahead: %v, want its decision or ErrTimeout", err)
		}
	}
	if st := s.Stats(); st.Shed != 1 || st.Timeouts != timeouts || st.Errors != timeouts || st.Breaker != "closed" {
		t.Errorf("Stats = %+v, want one request shed, and as many errors as timeouts, %d", st, timeouts)
	}
	patient := newStore(t, srv.client(t), redis.WithCallerTime(), redis.WithTimeout(10*time.Second))
	if err := patient.Take(context.Background(), now, checks, out); err != nil || !out[0].Allowed {
		t.Fatalf("after the timeout: Take = %v, %+v; want the key uncharged, allowed", err, out[0])
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
	s := newStore(t, srv.patientClient(t), redis.WithMaxBatch(len(order)), redis.WithTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resume := srv.pause(t)
	hold(t, s)
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
			if err := waitingTake(ctx, s, time.Now(), checks, out); err != nil {
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
			waitParked(t, s, n+2, int64(n+2)) // in order; the last fills the run, which goes beside the one held out
		}
	}
	waitUntil(t, "the full run written", func() bool { return s.Stats().Runs == 2 })
	resume()
	wg.Wait()
	if st := s.Stats(); st.Runs != 2 || st.Calls != int64(len(order))+1 {
		t.Fatalf("Stats = %+v, want the %d requests in 1 run beside the one held out", st, len(order))
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
	rc := srv.patientClient(t)
	var runs, from atomic.Int64
	rc.AddHook(failHook(&runs, &from))
	p := prefix(t)
	s := newStore(t, rc, redis.WithPrefix(p), redis.WithMaxBatch(2))
	counter := sluice.Check{Rule: prep(sluice.Rule{Name: "c", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.PerMinute(10)}), Key: "k"}
	other := sluice.Check{Rule: prep(sluice.Rule{Name: "g", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(10)}), Key: "k"}
	take(t, s, time.Time{}, 1, counter)
	// The counter's state written an hour ahead: the one-unit path
	// answers -3 for it (TestCounterStateAhead).
	counterAhead(t, rc, p, counter)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := stateKeys(scanKeys(t, rc, p))
	if len(keys) != 1 {
		t.Fatalf("keys %v, want the counter's", keys)
	}
	key := keys[0]
	raw, err := rc.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}

	from.Store(runs.Load() + 3) // the run held out and the first go through; the redo fails
	resume := srv.pause(t)
	hold(t, s)
	calls := s.Stats().Calls
	outC, outO := make([]sluice.Decision, 1), make([]sluice.Decision, 1)
	var errC, errO error
	var wg sync.WaitGroup
	wg.Go(func() { errC = waitingTake(ctx, s, time.Time{}, []sluice.Check{counter}, outC) })
	waitParked(t, s, 2, calls+1)
	wg.Go(func() { errO = waitingTake(ctx, s, time.Time{}, []sluice.Check{other}, outO) })
	// the second fills a run of 2, which goes beside the one held out
	waitUntil(t, "the run of both written", func() bool { return s.Stats().Runs == 3 })
	resume()
	wg.Wait()
	if got := runs.Load() - (from.Load() - 3); got != 3 {
		t.Errorf("%d script runs, want 3: the one held out, the run of both, then the counter's again", got)
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
	rc := srv.patientClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerMinute(10)})

	t.Run("one run", func(t *testing.T) {
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p), redis.WithMaxBatch(2), redis.WithTimeout(time.Minute))
		resume := srv.pause(t)
		hold(t, s)
		var wg sync.WaitGroup
		outs := [2][]sluice.Decision{make([]sluice.Decision, 1), make([]sluice.Decision, 1)}
		for i := range 2 {
			wg.Go(func() {
				if err := waitingTake(ctx, s, time.Time{}, []sluice.Check{{Rule: rule, Key: "k"}}, outs[i]); err != nil {
					t.Error(err)
				}
			})
			if i == 0 {
				waitParked(t, s, 2, 2)
			}
		}
		// the second fills the run, which goes beside the one held out
		waitUntil(t, "the run of both written", func() bool { return s.Stats().Runs == 2 })
		resume()
		wg.Wait()
		if st := s.Stats(); st.Runs != 2 {
			t.Fatalf("Stats = %+v, want 1 run beside the one held out", st)
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
	// unit's time, as Redis TIME tells it to the µs after the take.
	oneEntry := func(t *testing.T) (*redis.Store, string, float64) {
		t.Helper()
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p))
		take(t, s, time.Time{}, 1, sluice.Check{Rule: rule, Key: "k"})
		at, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return s, logKey(t, rc, p), float64(at.UnixMicro())
	}

	// A later time decided at than the run's (a unit's, of a store at its
	// callers' time, their clocks an hour ahead): the general path decides
	// at that time, when the first entry has left.
	t.Run("decided ahead", func(t *testing.T) {
		p := prefix(t)
		s := newStore(t, rc, redis.WithPrefix(p))
		take(t, s, time.Time{}, 1, sluice.Check{Rule: rule, Key: "k"})
		ahead := newStore(t, rc, redis.WithPrefix(p), redis.WithCallerTime())
		take(t, ahead, time.Now().Add(time.Hour), 1, sluice.Check{Rule: rule, Key: "k"})
		d := takeRedone(t, s, sluice.Check{Rule: rule, Key: "k"})
		if !d.Allowed || d.Remaining != 8 {
			t.Errorf("decision %+v, want allowed, 8 left: decided an hour on, the unit then counted", d)
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

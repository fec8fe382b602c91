package sluice_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// clocks is a wall clock and a monotonic clock that a test moves by hand:
// the readings under a steady clock. It is safe for concurrent use.
type clocks struct {
	mu         sync.Mutex
	wall, mono int64
}

func newClocks(t0 time.Time) *clocks { return &clocks{wall: t0.UnixNano(), mono: 5e9} }

func (c *clocks) read() (wall, mono int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall, c.mono, true
}

// pass lets d go by: both clocks move.
func (c *clocks) pass(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall += int64(d)
	c.mono += int64(d)
}

// step moves the wall clock alone, as NTP or an operator does.
func (c *clocks) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall += int64(d)
}

// wallNow reads the wall clock alone: what time.Now gives a limiter.
func (c *clocks) wallNow() time.Time {
	w, _, _ := c.read()
	return time.Unix(0, w)
}

var clockT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fromT0 prints t0 + d.
func fromT0(d time.Duration) string {
	if d < 0 {
		return "t0-" + (-d).String()
	}
	return "t0+" + d.String()
}

type clockStep struct {
	name       string
	pass, step time.Duration
	want       time.Duration // Now - t0
}

func runClockSteps(t *testing.T, steps []clockStep) {
	t.Helper()
	c := newClocks(clockT0)
	s := sluice.NewSteadyClock(c.read)
	if got := s.Now(); !got.Equal(clockT0) {
		t.Fatalf("at the start Now() = %v, want %v", got, clockT0)
	}
	for _, st := range steps {
		c.pass(st.pass)
		c.step(st.step)
		if got := s.Now().Sub(clockT0); got != st.want {
			t.Errorf("%s: Now() = %s, want %s", st.name, fromT0(got), fromT0(st.want))
		}
	}
}

// TestSteadyClockStepBack: a wall clock stepped back is not followed; the
// time keeps flowing at the monotonic clock's rate until the wall clock
// is ahead again, and is read so (once WallEvery has passed since the
// last reading).
func TestSteadyClockStepBack(t *testing.T) {
	ms := sluice.WallEvery
	runClockSteps(t, []clockStep{
		{"1s passes", time.Second, 0, time.Second},
		{"the wall clock steps back 1h", 0, -time.Hour, time.Second},
		{"2s pass", 2 * time.Second, 0, 3 * time.Second},
		{"the wall clock steps forward 30m, still behind", 0, 30 * time.Minute, 3 * time.Second},
		{"1s passes", time.Second, 0, 4 * time.Second},
		{"the wall clock steps forward 1h, 30m ahead, not read yet", 0, time.Hour, 4 * time.Second},
		{"WallEvery passes: read", ms, 0, 4*time.Second + ms + 30*time.Minute},
		{"1s passes", time.Second, 0, 5*time.Second + ms + 30*time.Minute},
		{"the wall clock steps back 1ns", 0, -1, 5*time.Second + ms + 30*time.Minute},
		{"1ns passes", 1, 0, 5*time.Second + ms + 30*time.Minute + 1},
	})
}

// TestSteadyClockStepForward: a wall clock stepped forward is followed at
// the first reading WallEvery after the last, and the time flows on from
// there; the readings in between run on the monotonic clock.
func TestSteadyClockStepForward(t *testing.T) {
	ms := sluice.WallEvery
	runClockSteps(t, []clockStep{
		{"the wall clock steps forward 1h", 0, time.Hour, 0},
		{"WallEvery - 1ns passes", ms - 1, 0, ms - 1},
		{"1ns passes: read", 1, 0, time.Hour + ms},
		{"1s passes", time.Second, 0, time.Hour + time.Second + ms},
		{"the wall clock steps forward 1ns", 0, 1, time.Hour + time.Second + ms},
		{"1s passes and the wall clock steps forward 1s", time.Second, time.Second, time.Hour + 3*time.Second + ms + 1},
		{"the wall clock steps forward 1m", 0, time.Minute, time.Hour + 3*time.Second + ms + 1},
		{"WallEvery / 2 passes", ms / 2, 0, time.Hour + 3*time.Second + ms + ms/2 + 1},
		{"WallEvery / 2 passes: read", ms / 2, 0, time.Hour + time.Minute + 3*time.Second + 2*ms + 1},
	})
}

// TestSteadyClockConcurrent: while the wall clock steps back and forth,
// no reader sees the time go back, neither after its own last read nor
// after any read that ended before its own began. Every other move lets
// WallEvery pass, so that the readers race through the readings of the
// wall clock (sync, raise) as well as the monotonic clock alone.
func TestSteadyClockConcurrent(t *testing.T) {
	c := newClocks(clockT0)
	s := sluice.NewSteadyClock(c.read)
	var latest atomic.Int64 // the latest time a read returned, by then
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		defer close(stop)
		for i := range 2000 {
			c.pass(time.Duration(i%7) * time.Microsecond)
			if i%2 == 0 {
				c.pass(sluice.WallEvery)
			}
			switch i % 10 {
			case 3:
				c.step(-time.Hour)
			case 6:
				c.step(90 * time.Minute)
			case 9:
				c.step(-time.Millisecond)
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			var last int64
			for done := false; !done; {
				select {
				case <-stop:
					done = true // one more read after the last step
				default:
				}
				before := latest.Load()
				now := s.Now().UnixNano()
				if now < last || now < before {
					t0 := clockT0.UnixNano()
					t.Errorf("Now() = %s after %s (its own last) and %s (any read ended before)",
						fromT0(time.Duration(now-t0)), fromT0(time.Duration(last-t0)), fromT0(time.Duration(before-t0)))
					return
				}
				last = now
				for old := latest.Load(); now > old && !latest.CompareAndSwap(old, now); old = latest.Load() {
				}
			}
		})
	}
	wg.Wait()
}

// TestSystemClock: SystemClock's readings never go back, and, while the
// wall clock takes no step (which SystemClock may read up to WallEvery
// late), they are never behind the wall clock read before them: by
// nothing on Linux, where the monotonic clock is slewed with the wall
// clock; 100µs allows for a clock that is not.
func TestSystemClock(t *testing.T) {
	start := time.Now()
	var last time.Time
	for range 100000 {
		before := time.Now()
		got := sluice.SystemClock.Now()
		if got.Before(last) {
			t.Fatalf("SystemClock.Now() = %v after %v", got, last)
		}
		last = got
		// wall time less monotonic time since the start: a step, if not 0
		if d := before.Round(0).Sub(start.Round(0)) - before.Sub(start); d < -time.Microsecond || d > time.Microsecond {
			continue
		}
		if lag := before.Round(0).Sub(got); lag > 100*time.Microsecond {
			t.Fatalf("SystemClock.Now() = %v, %v behind time.Now() = %v read before it", got, lag, before)
		}
	}
}

// TestMonoReadingInBubble: in a synctest bubble, the monotonic reading
// SystemClock's reads rest on is negative, which sends them to time.Now.
func TestMonoReadingInBubble(t *testing.T) {
	if m := sluice.MonoReading(); m < 0 {
		t.Fatalf("outside a bubble: %d", m)
	}
	synctest.Test(t, func(t *testing.T) {
		if m := sluice.MonoReading(); m >= 0 {
			t.Fatalf("in a bubble: %d, want negative", m)
		}
	})
}

// TestSystemClockInBubble: in a synctest bubble, where time.Now has no
// monotonic reading, SystemClock is the bubble's time.Now.
func TestSystemClockInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for range 3 {
			if got, want := sluice.SystemClock.Now(), time.Now(); !got.Equal(want) {
				t.Fatalf("SystemClock.Now() = %v, want time.Now() = %v", got, want)
			}
			time.Sleep(time.Hour)
		}
	})
}

// stepBackResult is what a Limiter answers around a wall-clock step back.
type stepBackResult struct {
	drained, afterStep, afterWait sluice.Result
}

// stepBack drains a key of a Limiter on a memory store that reads clock,
// steps the wall clock back an hour, then lets the drained request's
// RetryAfter pass on both clocks.
func stepBack(t *testing.T, algo sluice.Algo, c *clocks, clock sluice.Clock) stepBackResult {
	t.Helper()
	store, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim, err := sluice.NewLimiter(store, sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	rule := prep(t, sluice.Rule{Name: "r", Algorithm: algo, Limit: sluice.PerMinute(4)})
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	take := func() sluice.Result {
		t.Helper()
		res, err := lim.Take(context.Background(), checks, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	c.pass(10 * time.Second) // not at a window's start
	for i := range 4 {
		if res := take(); !res.Allowed {
			t.Fatalf("request %d of 4: %+v, want allowed", i+1, res.Decision)
		}
	}
	var r stepBackResult
	if r.drained = take(); r.drained.Allowed {
		t.Fatalf("request 5 of 4: %+v, want denied", r.drained.Decision)
	}
	c.step(-time.Hour)
	r.afterStep = take()
	c.pass(r.drained.RetryAfter)
	r.afterWait = take()
	return r
}

// TestLimiterWallClockStepBack: a Limiter on the steady clock denies
// nothing extra when the wall clock steps back an hour: a drained key is
// told the same RetryAfter as before the step and is allowed once it has
// passed. On the wall clock itself, as with time.Now, the same key is
// still denied then.
func TestLimiterWallClockStepBack(t *testing.T) {
	for _, algo := range sluice.Algos() {
		t.Run(string(algo), func(t *testing.T) {
			c := newClocks(clockT0)
			r := stepBack(t, algo, c, sluice.NewSteadyClock(c.read))
			if r.afterStep.Allowed || r.afterStep.RetryAfter != r.drained.RetryAfter {
				t.Errorf("steady clock, after the step back: %+v, want denied, RetryAfter %v as before it",
					r.afterStep.Decision, r.drained.RetryAfter)
			}
			if !r.afterWait.Allowed {
				t.Errorf("steady clock, %v later: %+v, want allowed", r.drained.RetryAfter, r.afterWait.Decision)
			}

			c = newClocks(clockT0)
			r = stepBack(t, algo, c, sluice.ClockFunc(c.wallNow))
			if r.afterWait.Allowed {
				t.Errorf("wall clock, %v after the step back: %+v, want denied", r.drained.RetryAfter, r.afterWait.Decision)
			}
		})
	}
}

// TestLimiterWallClockStepBackWindowsRoll: after the wall clock steps back
// an hour, a fixed window keeps rolling once a minute on the steady clock.
func TestLimiterWallClockStepBackWindowsRoll(t *testing.T) {
	c := newClocks(clockT0)
	store, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim, err := sluice.NewLimiter(store, sluice.WithClock(sluice.NewSteadyClock(c.read)))
	if err != nil {
		t.Fatal(err)
	}
	rule := prep(t, sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(2)})
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	for k := range 5 {
		if k == 1 {
			c.step(-time.Hour)
		}
		for i, want := range []bool{true, true, false} {
			res, err := lim.Take(context.Background(), checks, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != want || (!want && res.RetryAfter != time.Minute) {
				t.Fatalf("window %d, request %d: %+v, want allowed %v (RetryAfter 1m if denied)", k, i+1, res.Decision, want)
			}
		}
		c.pass(time.Minute)
	}
}

// BenchmarkClock: a read of SystemClock against time.Now, which it
// replaced as the edges' clock.
func BenchmarkClock(b *testing.B) {
	for _, bc := range []struct {
		name string
		now  func() time.Time
	}{
		{"clock=time.Now", time.Now},
		{"clock=SystemClock", sluice.SystemClock.Now},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var last time.Time
			for b.Loop() {
				last = bc.now()
			}
			sinkTime = last
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var odd int64
				for pb.Next() {
					odd += bc.now().UnixNano() & 1
				}
				sinkInt.Add(odd)
			})
		})
	}
}

var (
	sinkTime time.Time
	sinkInt  atomic.Int64
)

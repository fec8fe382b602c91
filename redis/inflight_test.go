package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// WithMaxInFlight bounds the requests queued or in a run: past it, a
// request waits for room until its deadline, and is then shed, having
// been neither written nor charged; the requests in flight are decided.
// Two are held in flight by a paused Redis: one in a run out, one queued
// behind it. Runs of two show a third that did not wait for room: with
// the one queued, it would fill a run, which would go at once.
func TestMaxInFlight(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.patientClient(t), redis.WithPrefix(prefix(t)), redis.WithCallerTime(), redis.WithTimeout(0), redis.WithMaxInFlight(2), redis.WithMaxBatch(2))
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(3)})
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	now := time.Unix(1_700_000_000, 0)

	resume := srv.pause(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([][]sluice.Decision, 2)
	for i := range 2 {
		outs[i] = make([]sluice.Decision, 1)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs[i] = waitingTake(ctx, s, now, checks, outs[i])
		})
	}
	waitParked(t, s, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := s.Take(ctx, now, checks, make([]sluice.Decision, 1))
	if !errors.Is(err, sluice.ErrShed) {
		t.Fatalf("a third request with two in flight: %v, want ErrShed", err)
	}
	if st := s.Stats(); st.Runs != 1 {
		t.Errorf("Stats = %+v, want the one run out: the third never queued", st)
	}
	resume()
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || !outs[i][0].Allowed {
			t.Errorf("request %d in flight: %v, %+v; want allowed", i, errs[i], outs[i][0])
		}
	}
	// Two of three taken: the shed request took nothing.
	if d := take(t, s, now, 1, checks[0]); !d[0].Allowed || d[0].Remaining != 0 {
		t.Errorf("after the shed request: %+v, want the third unit allowed", d[0])
	}
	if st := s.Stats(); st.Shed != 1 || st.Errors != 0 || st.Runs != 3 {
		t.Errorf("stats %+v, want one shed, no error, and 3 runs: the first, the second queued behind it, the last", st)
	}
}

func TestMaxInFlightInvalid(t *testing.T) {
	srv := startRedis(t)
	for _, n := range []int{0, -1} {
		if _, err := redis.New(srv.client(t), redis.WithMaxInFlight(n)); err == nil {
			t.Errorf("WithMaxInFlight(%d): no error", n)
		}
	}
}

// Load puts the script, and the library of functions, in Redis before
// the first request: none of the first requests has to load it, on a
// single Redis or on each master of a Cluster.
func TestLoad(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := startRedis(t)
		s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
		testLoad(t, s)
	})
	t.Run("cluster", func(t *testing.T) {
		c := startCluster(t)
		s := newStore(t, c.client(t), redis.WithPrefix(prefix(t)), redis.WithTimeout(10*time.Second))
		testLoad(t, s)
	})
}

func testLoad(t *testing.T, s *redis.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	for i := range 50 { // on every master, by the odds
		take(t, s, time.Time{}, 1, sluice.Check{Rule: daily, Key: fmt.Sprint("k", i)})
	}
	if st := s.Stats(); st.Reloads != 0 {
		t.Errorf("stats %+v: the script was loaded again after Load", st)
	}
}

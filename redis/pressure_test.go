package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// load sends requests through lim from callers goroutines, each on a key
// of its own far from its limit, until stop is closed, and counts what
// they got.
type load struct {
	ok, shed, failed atomic.Int64
	firstFailure     atomic.Value // the error's text
	wg               sync.WaitGroup
	stop             chan struct{}
}

func startLoad(lim *sluice.Limiter, callers int) *load {
	l := &load{stop: make(chan struct{})}
	for i := range callers {
		l.wg.Go(func() {
			checks := []sluice.Check{{Rule: daily, Key: fmt.Sprint("caller-", i)}}
			out := make([]sluice.Decision, 1)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				res, err := lim.Take(context.Background(), checks, out)
				switch {
				case err != nil:
					l.failed.Add(1)
					l.firstFailure.CompareAndSwap(nil, err.Error())
				case errors.Is(res.Err, sluice.ErrShed):
					l.shed.Add(1)
				case res.Err != nil:
					l.failed.Add(1)
					l.firstFailure.CompareAndSwap(nil, res.Err.Error())
				default:
					l.ok.Add(1)
				}
				if res.Err != nil {
					// a caller told to come back later does not spin
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	return l
}

func (l *load) end() { close(l.stop); l.wg.Wait() }

// waitFor waits until cond holds, for at most d, and reports whether it
// did.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// TestBreakerRedisDown: under load, with the store's defaults (a 50ms
// timeout, the breaker at half of 20 calls over 10s), the breaker opens
// within its window once Redis is killed, or paused (SIGSTOP: no refusal,
// only silence), and closes again once Redis is back.
func TestBreakerRedisDown(t *testing.T) {
	for _, fault := range []string{"killed", "paused"} {
		t.Run(fault, func(t *testing.T) {
			srv := startRedis(t)
			s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithTimeout(50*time.Millisecond)) // the default, over the tests' longer one
			lim, err := sluice.NewLimiter(s)
			if err != nil {
				t.Fatal(err)
			}
			l := startLoad(lim, 16)
			defer l.end()
			if !waitFor(30*time.Second, func() bool { return l.ok.Load() >= 200 }) {
				t.Fatalf("200 decisions not made in 30s before the fault: %+v", s.Stats())
			}
			before := s.Stats()
			if before.BreakerOpens != 0 {
				t.Fatalf("the breaker opened before the fault: %+v", before)
			}
			start := time.Now()
			switch fault {
			case "killed":
				srv.kill()
			case "paused":
				srv.signal(syscall.SIGSTOP)
				defer srv.signal(syscall.SIGCONT)
			}
			// Its window is 10s: the calls before the fault leave it by
			// then, and the failures are all that is left.
			if !waitFor(30*time.Second, func() bool { return s.Stats().BreakerOpens > 0 }) {
				t.Fatalf("Redis %s: the breaker still closed after 30s: %+v", fault, s.Stats())
			}
			t.Logf("Redis %s: the breaker opened after %v: %+v", fault, time.Since(start).Round(time.Millisecond), s.Stats())
			switch fault {
			case "killed":
				srv.start()
			case "paused":
				srv.signal(syscall.SIGCONT)
			}
			back := time.Now()
			if !waitFor(30*time.Second, func() bool { return s.Stats().Breaker == "closed" }) {
				t.Fatalf("Redis back: the breaker not closed after 30s: %+v", s.Stats())
			}
			ok := l.ok.Load()
			if !waitFor(30*time.Second, func() bool { return l.ok.Load() >= ok+100 }) {
				t.Fatalf("Redis back, breaker closed: 100 more decisions not made in 30s: %+v", s.Stats())
			}
			t.Logf("Redis back: the breaker closed after %v", time.Since(back).Round(time.Millisecond))
		})
	}
}

// TestBreakerSlowRedis: a Redis that is slow but answers every call
// within the store's timeout, under more load than it can serve in time,
// never opens the breaker: the requests that wait too long in the
// store's queue for their turn are shed, and shedding is not failure.
// Redis is made slow by scripts that hold it 35ms at a time, the store's
// timeout being 50ms. Between two holds Redis serves two or three full
// runs, so a caller's turn comes back about once every callers/150 holds:
// with 1,000 callers, far past the 50ms a request may wait, on a fast
// machine as on a slow one.
func TestBreakerSlowRedis(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithTimeout(50*time.Millisecond)) // the default, over the tests' longer one
	lim, err := sluice.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	// as sluice serve does before it takes traffic
	if err := s.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	busy := srv.client(t)
	stop := make(chan struct{})
	var hold sync.WaitGroup
	var holds atomic.Int64
	hold.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := busy.Eval(context.Background(), "local t0 = redis.call('TIME'); while true do local t = redis.call('TIME'); if (t[1] - t0[1]) * 1000000 + t[2] - t0[2] >= 35000 then return 1 end end", nil).Err()
			if err != nil {
				t.Errorf("holding Redis: %v", err)
				return
			}
			holds.Add(1)
			time.Sleep(time.Millisecond) // let a run in between
		}
	})
	l := startLoad(lim, 1000)
	// 200 runs are ten times the calls the breaker needs to judge.
	if !waitFor(60*time.Second, func() bool { return l.shed.Load() >= 100 && l.ok.Load() >= 500 && s.Stats().Runs >= 200 }) {
		t.Logf("100 shed, 500 decided and 200 runs not reached in 60s: %d shed, %d decided, %d runs", l.shed.Load(), l.ok.Load(), s.Stats().Runs)
	}
	l.end()
	close(stop)
	hold.Wait()
	st := s.Stats()
	t.Logf("decided %d, shed %d, failed %d; Redis held 35ms %d times; %+v", l.ok.Load(), l.shed.Load(), l.failed.Load(), holds.Load(), st)
	if st.BreakerOpens != 0 || st.Rejected != 0 {
		t.Errorf("a slow but healthy Redis opened the breaker: %+v", st)
	}
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d requests decided by their failure modes, the first for %v", n, l.firstFailure.Load())
	}
	if l.shed.Load() == 0 {
		t.Errorf("no request shed: the load was not more than the slow Redis could serve in time")
	}
}

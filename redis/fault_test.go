package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redis"
)

// slack is how much later than its deadline a call may return on a busy
// machine. It only catches a call that hangs until the client's own
// timeouts, which TestSlowRedis sets to a minute; it measures nothing.
const slack = 10 * time.Second

var daily = prep(sluice.Rule{Name: "daily", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(1_000_000)})

// TestKilled kills Redis under load: calls fail within the deadline,
// the breaker opens, nothing panics and no goroutine is left behind. The
// deadline is long enough that no call before the kill misses it on a
// loaded machine; after the kill, calls fail as their connections break.
func TestKilled(t *testing.T) {
	srv := startRedis(t)
	const timeout = 10 * time.Second
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithTimeout(timeout), redis.WithBreaker(5, time.Hour))
	take(t, s, time.Time{}, 1, sluice.Check{Rule: daily, Key: "k"})
	before := runtime.NumGoroutine()

	var ok, failed atomic.Int64
	var worst atomic.Int64
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			out := make([]sluice.Decision, 1)
			checks := []sluice.Check{{Rule: daily, Key: string(rune('a' + w))}}
			for errs := 0; errs < 50; {
				start := time.Now()
				err := s.Take(context.Background(), start, checks, out)
				el := time.Since(start)
				if err == nil {
					if ok.Add(1) == 300 {
						once.Do(func() { close(killed); srv.kill() })
					}
					continue
				}
				select {
				case <-killed:
				default:
					t.Errorf("error before the kill: %v", err)
					return
				}
				errs++
				failed.Add(1)
				for {
					w := worst.Load()
					if int64(el) <= w || worst.CompareAndSwap(w, int64(el)) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("ok %d, failed %d, slowest failure %v, stats %+v", ok.Load(), failed.Load(), time.Duration(worst.Load()), st)
	if time.Duration(worst.Load()) > timeout+slack {
		t.Errorf("a failed call took %v, deadline %v", time.Duration(worst.Load()), timeout)
	}
	if st.Rejected == 0 || st.Breaker != "open" {
		t.Errorf("breaker did not open: %+v", st)
	}
	// The breaker opens once the failures are half the calls of its
	// window: those before the kill, and a run's worth out when it opens.
	if st.Errors > ok.Load()+16 {
		t.Errorf("%d calls reached a dead Redis after %d succeeded: the breaker should stop them", st.Errors, ok.Load())
	}
	// Goroutines that are ending may take a while to be gone on a
	// loaded machine: wait for them, not for a leak.
	deadline := time.Now().Add(30 * time.Second)
	for after := runtime.NumGoroutine(); after > before+4; after = runtime.NumGoroutine() {
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines 30s after, %d before", after, before)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// takeEventually is take on a store whose deadline is tighter than a
// loaded machine may meet: after ErrTimeout it tries again, for 30s at
// most. The rules it is used with are far from their limits.
func takeEventually(t *testing.T, s *redis.Store, c sluice.Check) sluice.Decision {
	t.Helper()
	out := make([]sluice.Decision, 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.Take(context.Background(), time.Time{}, []sluice.Check{c}, out)
		if err == nil {
			return out[0]
		}
		if !errors.Is(err, redis.ErrTimeout) || time.Now().After(deadline) {
			t.Fatalf("Take: %v (tried for up to 30s)", err)
		}
	}
}

// TestRestart restarts Redis, empty: once the breaker lets a probe
// through, decisions resume and the script is loaded again. The breaker
// opens at two failures of three calls.
func TestRestart(t *testing.T) {
	srv := startRedis(t)
	clk := testclock.New(t0)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithBreaker(3, time.Second), redis.WithBreakerClock(clk))
	c := sluice.Check{Rule: daily, Key: "k"}
	take(t, s, time.Time{}, 1, c)
	srv.kill()
	out := make([]sluice.Decision, 1)
	for i := range 2 {
		if err := s.Take(context.Background(), time.Time{}, []sluice.Check{c}, out); err == nil || errors.Is(err, redis.ErrCircuitOpen) {
			t.Fatalf("call %d to a dead Redis: err = %v", i, err)
		}
	}
	if err := s.Take(context.Background(), time.Time{}, []sluice.Check{c}, out); !errors.Is(err, redis.ErrCircuitOpen) {
		t.Fatalf("third call: err = %v, want ErrCircuitOpen", err)
	}
	srv.start()
	reloads := s.Stats().Reloads
	var err error
	for range 5 { // a probe may meet a connection the restart broke
		clk.Advance(time.Second)
		if err = s.Take(context.Background(), time.Time{}, []sluice.Check{c}, out); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if !out[0].Allowed || out[0].Remaining != 999_999 {
		t.Errorf("after restart = %+v, want a fresh bucket charged once", out[0])
	}
	if st := s.Stats(); st.Reloads != reloads+1 || st.Breaker != "closed" {
		t.Errorf("stats %+v, want one more reload and a closed breaker", st)
	}
}

// proxy forwards TCP to Redis and can hold Redis's answers back.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	stall  chan struct{} // non-nil: answers wait until it is closed
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		r, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, r)
		p.mu.Unlock()
		p.wg.Go(func() { io.Copy(r, c); r.Close() })
		p.wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					p.mu.Lock()
					stall := p.stall
					p.mu.Unlock()
					if stall != nil {
						<-stall
					}
					if _, err := c.Write(buf[:n]); err != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		})
	}
}

// hold makes Redis's answers wait until release.
func (p *proxy) hold() (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.stall = ch
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.stall = nil
		p.mu.Unlock()
		close(ch)
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestSlowRedis: when Redis does not answer, every call returns at its
// deadline: ErrTimeout for a call written to Redis, sluice.ErrShed for
// one that waited for its turn behind it; and the store works again once
// it answers.
// The client's own timeouts are a minute, so that a call the store did
// not end at its deadline would hang far past timeout+slack. The calls
// around the stall may miss the 50ms deadline on a loaded machine: they
// try again.
func TestSlowRedis(t *testing.T) {
	// With ContextTimeoutEnabled the client bounds a run by its context's
	// deadline itself (the connection's); without, the store waits aside.
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", direct), func(t *testing.T) { testSlowRedis(t, direct) })
	}
}

func testSlowRedis(t *testing.T, direct bool) {
	srv := startRedis(t)
	px := startProxy(t, srv.addr())
	rc := goredis.NewClient(&goredis.Options{Addr: px.addr(), MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute, ContextTimeoutEnabled: direct})
	t.Cleanup(func() { rc.Close() })
	const timeout = 50 * time.Millisecond
	s := newStore(t, rc, redis.WithPrefix(prefix(t)), redis.WithTimeout(timeout), redis.WithBreaker(0, 0))
	c := sluice.Check{Rule: daily, Key: "k"}
	takeEventually(t, s, c)
	before := s.Stats()

	release := px.hold()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			start := time.Now()
			err := s.Take(context.Background(), start, []sluice.Check{c}, make([]sluice.Decision, 1))
			el := time.Since(start)
			if !(errors.Is(err, redis.ErrTimeout) && errors.Is(err, context.DeadlineExceeded)) && !errors.Is(err, sluice.ErrShed) {
				t.Errorf("err = %v, want ErrTimeout or ErrShed", err)
			}
			if el > timeout+slack {
				t.Errorf("call returned after %v, deadline %v", el, timeout)
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Timeouts-before.Timeouts == 0 || st.Timeouts-before.Timeouts+st.Shed-before.Shed != 8 {
		t.Errorf("stats %+v, want 8 timeouts or sheds more than the %+v before the stall, a timeout among them", st, before)
	}
	release()
	if d := takeEventually(t, s, c); !d.Allowed {
		t.Fatalf("after the stall = %+v", d)
	}
}

// TestLimiterTimeout: through a Limiter, which passes its caller's
// context through, the store's bound on a call is the one deadline: once
// Redis has been silent for a second, a call past it is a timeout of the
// store's, which counts towards the breaker, which opens. A caller's own
// deadline, shorter, is the caller giving up, and counts for nothing.
func TestLimiterTimeout(t *testing.T) {
	srv := startRedis(t)
	px := startProxy(t, srv.addr())
	rc := goredis.NewClient(&goredis.Options{Addr: px.addr(), MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	clk := testclock.New(t0)
	s := newStore(t, rc, redis.WithPrefix(prefix(t)), redis.WithTimeout(200*time.Millisecond), redis.WithBreaker(4, time.Hour), redis.WithBreakerClock(clk)) // 3 failures of 4 calls open it
	lim, err := sluice.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	c := []sluice.Check{{Rule: daily, Key: "k"}}
	take(t, s, time.Time{}, 1, c[0])
	release := px.hold()
	defer release()
	clk.Advance(2 * time.Second) // Redis silent since its last answer

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Take(ctx, time.Time{}, c, make([]sluice.Decision, 1)); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrTimeout) {
		t.Errorf("Take past the caller's deadline = %v, want the context's error", err)
	}
	if st := s.Stats(); st.Errors != 0 || st.Timeouts != 0 {
		t.Errorf("after the caller's deadline: %+v, want no error counted", st)
	}
	for i := range 3 {
		res, err := lim.Take(context.Background(), c, nil)
		if err != nil || !errors.Is(res.Err, redis.ErrTimeout) {
			t.Fatalf("call %d past the store's bound: %+v, %v; want Err wrapping redis.ErrTimeout", i, res, err)
		}
	}
	if st := s.Stats(); st.Timeouts != 3 || st.Breaker != "open" {
		t.Errorf("after 3 calls past the store's bound: %+v, want 3 timeouts and the breaker open", st)
	}
	if res, _ := lim.Take(context.Background(), c, nil); !errors.Is(res.Err, redis.ErrCircuitOpen) {
		t.Errorf("next call: Err = %v, want ErrCircuitOpen", res.Err)
	}
}

// TestLimiterFailOpen: with Redis down, the Limiter applies the rule's
// failure mode and reports the store's error.
func TestLimiterFailOpen(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
	lim, err := sluice.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	srv.kill()
	open := prep(sluice.Rule{Name: "open", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1), Failure: sluice.FailOpen})
	closed := prep(sluice.Rule{Name: "closed", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1), Failure: sluice.FailClosed})
	res, err := lim.Take(context.Background(), []sluice.Check{{Rule: open, Key: "k"}}, nil)
	if err != nil || !res.Allowed || res.Err == nil {
		t.Errorf("fail-open: %+v, %v", res, err)
	}
	res, err = lim.Take(context.Background(), []sluice.Check{{Rule: closed, Key: "k"}}, nil)
	if err != nil || res.Allowed || res.Err == nil {
		t.Errorf("fail-closed: %+v, %v", res, err)
	}
}

// TestLimiterFallbackByDefault: the Limiter of the package
// documentation, a Store with a memory fallback, decides with the
// fallback once Redis is down for a rule that sets no Failure: past the
// limit it denies, rather than letting every request through, and it
// reports the store's error.
func TestLimiterFallbackByDefault(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
	mem, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	lim, err := sluice.NewLimiter(s, sluice.WithFallback(mem))
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.Prepare(sluice.Rule{Name: "per-user", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(3)})
	if err != nil {
		t.Fatal(err)
	}
	srv.kill()
	c := []sluice.Check{{Rule: r, Key: "alice"}}
	for i := range 5 {
		res, err := lim.Take(context.Background(), c, nil)
		if err != nil || res.Err == nil || res.Allowed != (i < 3) {
			t.Errorf("request %d with Redis down: %+v, %v; want the fallback's decision, allowed = %v, and the store's error", i+1, res, err, i < 3)
		}
	}
	if st := s.Stats(); st.Errors == 0 {
		t.Errorf("Stats = %+v, want the failed calls counted", st)
	}
}

// TestLimiterRefused: a request the store refuses as given is bad input,
// returned by the Limiter, not an outage that a fail-open rule lets
// through: a limit outside the exact range, and one key named twice.
func TestLimiterRefused(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
	lim, err := sluice.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	ok := prep(sluice.Rule{Name: "ok", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)})
	huge := prep(sluice.Rule{Name: "huge burst per year", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1, Period: 365 * 24 * time.Hour, Burst: 1 << 30}})
	for name, checks := range map[string][]sluice.Check{
		"out of range": {{Rule: huge, Key: "k"}},
		"key twice":    {{Rule: ok, Key: "k"}, {Rule: ok, Key: "k"}},
	} {
		res, err := lim.Take(context.Background(), checks, nil)
		if !errors.Is(err, sluice.ErrRefused) || res.Allowed {
			t.Errorf("%s: Take = %+v, %v; want an error wrapping ErrRefused", name, res, err)
		}
	}
	if st := s.Stats(); st.Calls != 0 || st.Errors != 0 {
		t.Errorf("Stats = %+v: a refusal reached Redis or was counted as a failure", st)
	}
}

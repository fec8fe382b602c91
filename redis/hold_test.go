package redis_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// The tests of batching hold a Store's requests back through a real
// fault, not a hook into the store: they pause the redis-server (SIGSTOP),
// so that a run written to it is out until it resumes (SIGCONT), and the
// requests that arrive meanwhile wait for their turn. What they then
// observe is what a caller can: the Store's Stats, which count a run when
// it is written, the decisions, and whether a caller's goroutine is
// parked in Take.

// pause stops srv's process, as a machine that stops scheduling it would:
// connections are still accepted by the kernel and writes buffered, but
// nothing is answered until resume. The server resumes when the test ends
// too, so that its cleanups find it answering.
func (s *server) pause(t testing.TB) (resume func()) {
	t.Helper()
	var once sync.Once
	resume = func() { once.Do(func() { s.signal(syscall.SIGCONT) }) }
	s.signal(syscall.SIGSTOP)
	t.Cleanup(resume)
	return resume
}

// waitingTake is Take in a goroutine of the test's, by which parked finds
// the callers that wait in a Store.
//
//go:noinline
func waitingTake(ctx context.Context, s sluice.Store, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	return s.Take(ctx, now, checks, out)
}

// parkedStates are the states of a goroutine that waits for another to
// wake it: for its turn, or for an answer. A goroutine waiting for a
// mutex is not among them, being on its way somewhere.
var parkedStates = []string{"select", "chan receive", "chan send", "IO wait", "sync.Cond.Wait"}

// parked is how many goroutines in waitingTake wait to be woken.
func parked() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(g, "redis_test.waitingTake(") {
			continue
		}
		_, state, _ := strings.Cut(head, "[")
		for _, p := range parkedStates {
			if strings.HasPrefix(state, p) {
				count++
				break
			}
		}
	}
	return count
}

// waitUntil waits until cond holds, for 30s at most: for goroutines to get
// where the test sends them, not for time to pass.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitParked waits until n callers are parked in waitingTake, every one
// of them having reached s (its Stats count calls of n at least, each
// counted as it enters): each waits for its turn, or for its run's answer.
func waitParked(t testing.TB, s *redis.Store, n int, calls int64) {
	t.Helper()
	waitUntil(t, "callers parked in Take", func() bool { return s.Stats().Calls >= calls && parked() >= n })
}

// holder is a request out in a run to a paused Redis, on a key of its own:
// the requests after it wait for it.
type holder struct {
	cancel context.CancelFunc
	done   chan error
}

// hold sends a peek on a key of its own through s, whose Redis is paused,
// and waits until its run is written: a run out until Redis resumes, or
// until release ends its caller's wait. The requests that arrive while it
// is out queue behind it.
func hold(t testing.TB, s *redis.Store) *holder { return holdOn(t, s, "holder") }

// holdOn is hold with the peek on key, which begins with "holder": on a
// Cluster, a key on the master paused.
func holdOn(t testing.TB, s *redis.Store, key string) *holder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &holder{cancel: cancel, done: make(chan error, 1)}
	t.Cleanup(cancel)
	rule := prep(sluice.Rule{Name: "holder", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerSecond(1)})
	runs := s.Stats().Runs
	go func() {
		h.done <- waitingTake(ctx, s, time.Now(), []sluice.Check{{Rule: rule, Key: key, Peek: true}}, make([]sluice.Decision, 1))
	}()
	waitUntil(t, "the holding run written", func() bool { return s.Stats().Runs > runs })
	return h
}

// release ends the holding run's wait, as its caller giving up, while
// Redis is still paused: its leader hands the queue on.
func (h *holder) release() error {
	h.cancel()
	return <-h.done
}

// patientClient is client with read and write timeouts of a minute, for a
// test that pauses the server: a run out on a paused Redis then ends at
// the store's timeout or when the server resumes, not at go-redis's
// default of 3s.
func (s *server) patientClient(t testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// patientClient is the cluster's client with read and write timeouts of a
// minute, as server.patientClient.
func (c *cluster) patientClient(t testing.TB) *goredis.ClusterClient {
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.addr())
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRedirects: 3, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { cc.Close() })
	return cc
}

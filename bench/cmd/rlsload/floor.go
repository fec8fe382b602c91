package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench"
)

// floorRLS decides each request as the least an exact fixed window can
// cost Redis: bench.FloorLibrary's floor_fixed (Redis TIME and the
// clock's SET ... GET once a run, then per request an INCR, a PEXPIRE if
// the window is new and a DECR if over). It batches as the Redis store
// does (redis/batch.go), so that its runs are about as long as the
// store's under the same load (run.sh reports both): one run out at a
// time, up to 64 requests in it; while it is out, callers queue, and the
// caller whose run comes back hands the queue to the oldest waiter, woken
// to send it. run.sh reads Redis's command time per request under it
// beside sluice's and the pair's: what exactness (one clock,
// all-or-nothing) costs Redis at the store's run size, whatever the
// store's own script does beyond it. It decides a request's first
// descriptor, one unit, against bench.yaml's rule.
//
// Where it batches otherwise than the store: it never sends a second run
// beside the one out (the store does with 64 queued, or when a run
// stalls); a queued caller waits for its run whatever its context says;
// and it has no deny cache. None of these comes into play under run.sh's
// loads.
type floorRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	// send decides a run: keys are the clock's and then one a request,
	// and the reply floor_fixed's, a number for each key.
	send  func(keys []string) ([]int64, error)
	mu    sync.Mutex
	queue []*floorCall
	out   bool // a run is out: its leader will hand the queue on
}

// newFloorRLS is a floorRLS whose runs are FCALLs of floor_fixed on rc,
// bounded by the client's timeouts, not by any caller's context.
func newFloorRLS(rc *goredis.Client) *floorRLS {
	return &floorRLS{send: func(keys []string) ([]int64, error) {
		return rc.FCall(context.Background(), "floor_fixed", keys, floorRule...).Int64Slice()
	}}
}

// floorCall is one request, queued for a run.
type floorCall struct {
	key   string
	reply int64 // floor_fixed's: the count after ×2 + 1 if allowed, else the count ×2
	err   error
	lead  bool          // handed the queue: send it
	wake  chan struct{} // receives once: decided, or made leader
}

// floorRule is bench.yaml's rule as floor_fixed takes it: the rate, and
// the TTL of a window's key in ms (its second and a second of slack).
var floorRule = []any{"100", "2000"}

const (
	floorClock    = "bench_clock"
	floorMaxBatch = 64 // as the store's default WithMaxBatch
)

var errFloorReply = errors.New("floor_fixed answered too few numbers")

func (s *floorRLS) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, errors.New("no descriptor")
	}
	var k strings.Builder
	k.WriteString(req.GetDomain())
	for _, e := range ds[0].GetEntries() {
		k.WriteByte('_')
		k.WriteString(e.GetKey())
		k.WriteByte('_')
		k.WriteString(e.GetValue())
	}
	k.WriteByte('_')
	k.WriteString(strconv.FormatInt(time.Now().Unix(), 10)) // the window's start, as the pair's
	c := &floorCall{key: k.String()}
	s.decide(c)
	if c.err != nil {
		return nil, c.err
	}
	code := rlspb.RateLimitResponse_OK
	if c.reply%2 == 0 {
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return &rlspb.RateLimitResponse{OverallCode: code, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: code}}}, nil
}

// decide sets c's reply or err: it sends c's run when no run is out, and
// otherwise queues c until a leader decides it or hands it the queue.
func (s *floorRLS) decide(c *floorCall) {
	c.wake = make(chan struct{}, 1)
	s.mu.Lock()
	if s.out {
		s.queue = append(s.queue, c)
		s.mu.Unlock()
		<-c.wake
		if !c.lead {
			return
		}
	} else {
		s.out = true
		s.mu.Unlock()
	}
	s.lead(c)
}

// lead sends c and as much of the queue as fits in one run, answers the
// others, and hands on what queued meanwhile.
func (s *floorRLS) lead(c *floorCall) {
	batch := []*floorCall{c}
	s.mu.Lock()
	n := min(len(s.queue), floorMaxBatch-1)
	batch = append(batch, s.queue[:n]...)
	s.shift(n)
	s.mu.Unlock()
	keys := make([]string, 0, len(batch)+1)
	keys = append(keys, floorClock)
	for _, b := range batch {
		keys = append(keys, b.key)
	}
	vals, err := s.send(keys)
	if err == nil && len(vals) != len(keys) {
		err = errFloorReply
	}
	for i, b := range batch {
		if err != nil {
			b.err = err
		} else {
			b.reply = vals[i+1]
		}
		if b != c {
			b.wake <- struct{}{}
		}
	}
	s.handOn()
}

// handOn ends the run out: the queue's oldest waiter is woken to send the
// queue, or, with none, the next caller sends its own.
func (s *floorRLS) handOn() {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.out = false
		s.mu.Unlock()
		return
	}
	next := s.queue[0]
	s.shift(1)
	s.mu.Unlock()
	next.lead = true
	next.wake <- struct{}{}
}

// shift takes the oldest n calls off the queue, with s.mu held, keeping
// its array and no pointer to a call taken.
func (s *floorRLS) shift(n int) {
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
}

// floorGRPC serves floorRLS on addr (and POST /json on httpAddr, if not
// empty), on the Redis at url, into which it loads bench.FloorLibrary
// (Redis 7 or later).
func floorGRPC(ctx context.Context, addr, httpAddr, url string) error {
	rc, err := redisClient(url)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := rc.FunctionLoadReplace(ctx, bench.FloorLibrary).Err(); err != nil {
		return fmt.Errorf("FUNCTION LOAD of the floor: %w", err)
	}
	return serveRLS(ctx, addr, httpAddr, newFloorRLS(rc))
}

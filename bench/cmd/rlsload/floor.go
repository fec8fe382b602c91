package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench"
)

// floorRLS decides each request as the least an exact fixed window can
// cost Redis: bench.FloorLibrary's floor_fixed (Redis TIME and the
// clock's SET ... GET once a run, then per request an INCR, a PEXPIRE if
// the window is new and a DECR if over). Requests queue while a run is
// out, and the next run sends all of them, up to 64, in one FCALL, as the
// Redis store batches. run.sh reads Redis's command time per request
// under it beside sluice's and the pair's, in the same run: what exactness
// (one clock, all-or-nothing) costs Redis under this load, whatever the
// store's own script does beyond it. It decides a request's first
// descriptor, one unit, against bench.yaml's rule.
type floorRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	rc    *goredis.Client
	queue chan *floorCall
}

// floorCall is one request, queued for a run.
type floorCall struct {
	key   string
	reply int64 // floor_fixed's: the count after ×2 + 1 if allowed, else the count ×2
	err   error
	done  chan struct{}
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
	c := &floorCall{key: k.String(), done: make(chan struct{})}
	select {
	case s.queue <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.err != nil {
		return nil, c.err
	}
	code := rlspb.RateLimitResponse_OK
	if c.reply%2 == 0 {
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return &rlspb.RateLimitResponse{OverallCode: code, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: code}}}, nil
}

// runs sends the queue, one run out at a time, until ctx is done.
func (s *floorRLS) runs(ctx context.Context) {
	batch := make([]*floorCall, 0, floorMaxBatch)
	keys := make([]string, 0, floorMaxBatch+1)
	for {
		select {
		case c := <-s.queue:
			batch = append(batch[:0], c)
		case <-ctx.Done():
			return
		}
	fill:
		for len(batch) < floorMaxBatch {
			select {
			case c := <-s.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		keys = append(keys[:0], floorClock)
		for _, c := range batch {
			keys = append(keys, c.key)
		}
		vals, err := s.rc.FCall(ctx, "floor_fixed", keys, floorRule...).Int64Slice()
		if err == nil && len(vals) != len(keys) {
			err = errFloorReply
		}
		for i, c := range batch {
			if err != nil {
				c.err = err
			} else {
				c.reply = vals[i+1]
			}
			close(c.done)
		}
	}
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
	fs := &floorRLS{rc: rc, queue: make(chan *floorCall, 1024)}
	go fs.runs(ctx)
	return serveRLS(ctx, addr, httpAddr, fs)
}

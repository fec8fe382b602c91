package server

import (
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testredis"
	sredis "github.com/sluicehq/sluice/redis"
)

// On the Redis store, which refuses a key named twice in one request, the
// same descriptor twice is one check costing both its hits: charged, and
// denied once over the limit (it failed open, uncharged, before).
func TestSameDescriptorTwiceRedis(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testredis.Start(t), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	st, err := sredis.New(c, sredis.WithCallerTime())
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, Config{Store: st})
	ctx := t.Context()
	steps := []struct {
		a, b uint64 // the two descriptors' hits
		code rlspb.RateLimitResponse_Code
		left uint32
	}{
		{1, 2, ok, 0},   // per_user: 3 a minute, 1 + 2 taken
		{1, 0, over, 0}, // 1 more: over
		{0, 0, ok, 0},   // two peeks
	}
	for i, s := range steps {
		resp, err := e.rls.ShouldRateLimit(ctx, withHits(withHits(rlReq("test", 0, "user=yan", "user=yan"), 0, s.a), 1, s.b))
		if err != nil {
			t.Fatal(err)
		}
		ss := resp.GetStatuses()
		if resp.GetOverallCode() != s.code || ss[0].GetLimitRemaining() != s.left || ss[1].GetLimitRemaining() != s.left {
			t.Errorf("step %d: %v, want %v with %d left on both", i, resp, s.code, s.left)
		}
	}
	if n := counter(t, e.srv, "sluice_store_errors_total"); n != 0 {
		t.Errorf("%v store errors, want none", n)
	}
}

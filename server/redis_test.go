package server

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testredis"
	sredis "github.com/sluicehq/sluice/redis"
)

// newRedisStore is a Redis store on a redis-server of the test's own. Its
// calls have a deadline of 10s: the default, 50ms, is a bound a loaded
// machine can miss.
func newRedisStore(t *testing.T) *sredis.Store {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testredis.Start(t), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	st, err := sredis.New(c, sredis.WithCallerTime(), sredis.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A rule the Redis store cannot hold (a prime rate per day, beyond its
// exact range) is a config error on that store: New refuses the config,
// and a reload to it keeps the last good one, instead of every request
// that reaches the rule failing.
func TestRuleOutOfStoreRange(t *testing.T) {
	const bad = `domain: test
descriptors:
  - key: user
    rate_limit:
      name: per_user_yearly
      algorithm: gcra
      unit: year
      requests_per_unit: 1
      burst: 1073741824
`
	st := newRedisStore(t)
	_, err := New(Settings{Store: st, Paths: []string{writeFile(t, t.TempDir(), "bad.yaml", bad)}})
	if !errors.Is(err, sluice.ErrRefused) || !errors.Is(err, sredis.ErrOutOfRange) {
		t.Fatalf("New with a rule out of the store's range = %v, want ErrRefused", err)
	}
	path := writeFile(t, t.TempDir(), "test.yaml", testYAML)
	s, _ := newServer(t, Settings{Store: st, Paths: []string{path}, ReloadInterval: -1})
	writeFile(t, filepath.Dir(path), "test.yaml", bad)
	if err := s.Reload(t.Context()); !errors.Is(err, sluice.ErrRefused) {
		t.Errorf("Reload to a rule out of the store's range = %v, want ErrRefused", err)
	}
	if st := limitOf(t, s, "user=a"); st.GetCurrentLimit().GetName() != "per_user" {
		t.Errorf("after the refused reload: %v, want the last good config", st)
	}
}

// On the Redis store, which refuses a key named twice in one request, the
// same descriptor twice is one check costing both its hits: charged, and
// denied once over the limit (it failed open, uncharged, before).
func TestSameDescriptorTwiceRedis(t *testing.T) {
	e := start(t, Settings{Store: newRedisStore(t)})
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

// On the Redis store, whose keys name the rule, an override's counts are
// kept apart from the config's limit and from other overrides, in one
// request too.
func TestOverrideRedis(t *testing.T) {
	e := start(t, Settings{Store: newRedisStore(t)})
	ctx := t.Context()
	for i, want := range []uint32{1, 0} {
		req := withLimit(rlReq("test", 0, "user=zed", "user=zed", "user=zed"), 0, 2, typepb.RateLimitUnit_MINUTE, 0)
		req = withLimit(req, 1, 5, typepb.RateLimitUnit_MINUTE, 0)
		resp, err := e.rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ss := resp.GetStatuses()
		if resp.GetOverallCode() != ok || ss[0].GetLimitRemaining() != want || ss[1].GetLimitRemaining() != 4-uint32(i) || ss[2].GetLimitRemaining() != 2-uint32(i) {
			t.Errorf("request %d: %v, want 2/MINUTE %d left, 5/MINUTE %d, per_user %d", i+1, resp, want, 4-i, 2-i)
		}
	}
	if n := counter(t, e.srv, "sluice_store_errors_total"); n != 0 {
		t.Errorf("%v store errors, want none", n)
	}
}

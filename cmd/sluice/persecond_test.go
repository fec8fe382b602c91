package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testredis"
)

const perSecondYAML = `domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 100
`

// REDIS_PERSECOND=true under sluice serve, as envoyproxy/ratelimit is
// deployed with it: the per-second limit counts in the second redis-server,
// in envoyproxy/ratelimit's key, the hourly one in the main; a request
// on both that the per-second limit denies leaves the hourly one
// uncharged.
func TestEnvoyRunPerSecond(t *testing.T) {
	mainAddr, secondAddr := testredis.Start(t), testredis.Start(t)
	root := t.TempDir()
	current := filepath.Join(root, "current")
	swapSymlink(t, writeRuntime(t, root, "v1", map[string]string{"config.yaml": perSecondYAML}), current)
	c := startChild(t, []string{
		"RUNTIME_ROOT=" + current, "RUNTIME_SUBDIRECTORY=ratelimit",
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "USE_STATSD=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + mainAddr,
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=" + secondAddr,
		// all or nothing: the hourly limit is given back when the
		// per-second one denies (envoyproxy/ratelimit's default, false,
		// charges it anyway)
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
	})
	if want := "redis redis://" + mainAddr + ", per second redis redis://" + secondAddr; c.banner["store"] != want {
		t.Errorf("banner store %q, want %q", c.banner["store"], want)
	}
	conn, err := grpc.NewClient(grpcAddr(c), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	ask := func(user, tenant string) rlspb.RateLimitResponse_Code {
		t.Helper()
		req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}},
		}}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode()
	}
	mainRC := goredis.NewClient(&goredis.Options{Addr: mainAddr})
	defer mainRC.Close()
	secondRC := goredis.NewClient(&goredis.Options{Addr: secondAddr})
	defer secondRC.Close()
	count := func(rc *goredis.Client, key string) int64 {
		t.Helper()
		n, err := rc.Get(t.Context(), key).Int64()
		if err != nil && err != goredis.Nil {
			t.Fatal(err)
		}
		return n
	}
	// Two requests in one second of Redis's clock: the per-second limit
	// (1) denies the second. A run that straddles a second is not a
	// failure of sluice's, and is tried again with new names.
	for try := 0; ; try++ {
		run := fmt.Sprint(time.Now().UnixNano())
		user, tenant := "u"+run, "t"+run
		before := time.Now().Unix()
		first, second := ask(user, tenant), ask(user, tenant)
		sec := time.Now().Unix()
		if sec != before {
			if try == 5 {
				t.Fatal("five runs of two requests each straddled a second")
			}
			continue
		}
		if first != rlspb.RateLimitResponse_OK || second != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("two requests in one second: %v then %v, want OK then OVER_LIMIT", first, second)
		}
		hour := strconv.FormatInt(sec/3600*3600, 10)
		userKey, tenantKey := "api_user_"+user+"_"+strconv.FormatInt(sec, 10), "api_tenant_"+tenant+"_"+hour
		if n := count(secondRC, userKey); n != 1 {
			t.Errorf("the per-second Redis's %s: %d, want 1", userKey, n)
		}
		if n := count(mainRC, tenantKey); n != 1 {
			t.Errorf("the main Redis's %s: %d, want 1: the denied request given back", tenantKey, n)
		}
		for rc, key := range map[*goredis.Client]string{mainRC: "api_user_*", secondRC: "api_tenant_*"} {
			if keys, _ := rc.Keys(t.Context(), key).Result(); len(keys) != 0 {
				t.Errorf("%s in the wrong Redis: %v", key, keys)
			}
		}
		break
	}
	if strings.Contains(c.log(), "REDIS_PERSECOND") && strings.Contains(c.log(), "not implemented") {
		t.Errorf("the log still says REDIS_PERSECOND is not implemented:\n%s", c.log())
	}
}

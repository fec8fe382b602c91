package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testredis"
)

// stuckRedis is a server that takes connections and reads what they
// send, but never answers: a Redis that has stopped.
func stuckRedis(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	return l.Addr().String()
}

// REDIS_TIMEOUT and REDIS_PERSECOND_TIMEOUT, set, are the deadlines of
// the stores' calls: a Redis that does not answer holds a request as
// long as the caller waits when they are a minute, and meets the failure
// modes first when they are short or, unset, the store's own.
func TestEnvoyRunRedisTimeout(t *testing.T) {
	root := t.TempDir()
	current := filepath.Join(root, "current")
	swapSymlink(t, writeRuntime(t, root, "v1", map[string]string{"config.yaml": perSecondYAML}), current)
	stuck, up := stuckRedis(t), testredis.Start(t)
	for _, tt := range []struct {
		name     string
		env      []string
		key      string // the descriptor asked: user counts per second, tenant per hour
		answered bool   // else the caller's deadline passes first
	}{
		{"unset", []string{"REDIS_URL=" + stuck}, "tenant", true},
		{"REDIS_TIMEOUT=1m", []string{"REDIS_URL=" + stuck, "REDIS_TIMEOUT=1m"}, "tenant", false},
		{"REDIS_TIMEOUT=100ms", []string{"REDIS_URL=" + stuck, "REDIS_TIMEOUT=100ms"}, "tenant", true},
		// The per-second Redis has REDIS_TIMEOUT's unless its own is set.
		{"per second, REDIS_TIMEOUT=1m", []string{"REDIS_URL=" + up, "REDIS_TIMEOUT=1m", "REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=" + stuck}, "user", false},
		{"per second, REDIS_PERSECOND_TIMEOUT=100ms", []string{"REDIS_URL=" + up, "REDIS_TIMEOUT=1m", "REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=" + stuck, "REDIS_PERSECOND_TIMEOUT=100ms"}, "user", true},
		{"per second, REDIS_PERSECOND_TIMEOUT=1m", []string{"REDIS_URL=" + up, "REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=" + stuck, "REDIS_PERSECOND_TIMEOUT=1m"}, "user", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startChild(t, append([]string{
				"RUNTIME_ROOT=" + current, "RUNTIME_SUBDIRECTORY=ratelimit",
				"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
				"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "USE_STATSD=false",
				"REDIS_SOCKET_TYPE=tcp",
			}, tt.env...))
			conn, err := grpc.NewClient(grpcAddr(c), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Long enough for a short deadline and the failure modes on a
			// busy machine, far shorter than a minute.
			wait := 5 * time.Second
			if tt.answered {
				wait = 30 * time.Second
			}
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api",
				Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: tt.key, Value: "a"}}}}})
			if late := status.Code(err) == codes.DeadlineExceeded; late == tt.answered {
				t.Errorf("ShouldRateLimit with %v to wait: %v; want an answer: %v\n%s", wait, err, tt.answered, c.log())
			}
			c.stop(t)
		})
	}
}

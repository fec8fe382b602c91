package main

import (
	"context"
	"sync"
	"testing"
	"time"

	quotapb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/server/rlqstest"
)

const rlqsServeYAML = `domain: quota
descriptors:
  - key: name
    value: api
    rate_limit: {unit: second, requests_per_unit: 100}
`

// A replica killed mid-stream (SIGKILL: no zero-TTL goodbye): the client
// reuses its last assignment, opens a stream to another replica and is
// assigned there again.
func TestRLQSReplicaKilled(t *testing.T) {
	cfg := writeConfig(t, rlqsServeYAML)
	a, bannerA := serveProcess(t, "-config", cfg)
	_, bannerB := serveProcess(t, "-config", cfg)
	var conns []grpc.ClientConnInterface
	for _, addr := range []string{bannerA["grpc"], bannerB["grpc"]} {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		conns = append(conns, cc)
	}
	api := map[string]string{"name": "api"}
	c := rlqstest.New(rlqstest.Config{
		Domain: "quota",
		Bucket: func(any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) {
			return api, &quotapb.RateLimitQuotaBucketSettings{
				ReportingInterval: durationpb.New(50 * time.Millisecond),
				ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior{
					ExpiredAssignmentBehaviorTimeout: durationpb.New(time.Minute),
					ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment_{
						ReuseLastAssignment: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment{}},
				},
			}
		},
		Conns: conns,
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	waitState := func(what string, cond func(state string) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			c.Allow(api, time.Now())
			if s, _ := c.State(api, time.Now()); cond(s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("still waiting after 30s for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitState("an assignment from the first replica", func(s string) bool { return s == rlqstest.Active && c.Streams() == 1 })
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Active a second after the kill, past the first replica's TTL
	// (300ms): the assignment is the second replica's.
	waitState("an assignment from the second replica", func(s string) bool {
		return s == rlqstest.Active && c.Streams() >= 2 && time.Since(killed) > time.Second
	})
}

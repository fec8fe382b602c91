package main

import (
	"context"
	"math"
	"os/exec"
	"sync"
	"syscall"
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
		Bucket: reuseLast(api, time.Minute),
		Conns:  conns,
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
	waitState("a stream to the second replica, assigned", func(s string) bool { return s == rlqstest.Active && c.Streams() >= 2 })
	t.Logf("assigned by the second replica %v after the kill", time.Since(killed).Round(time.Millisecond))
	// Active a second after the kill, past the first replica's TTL
	// (300ms): the assignment is the second replica's.
	waitState("an assignment from the second replica", func(s string) bool {
		return s == rlqstest.Active && c.Streams() >= 2 && time.Since(killed) > time.Second
	})
}

// sharedYAML is one bucket's limit, which replicas on one Redis share.
const sharedYAML = `domain: quota
descriptors:
  - key: name
    value: api
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// Two replicas on one redis-server share an RLQS bucket's limit among
// the streams of both: a stream on each, asking 1.5 times the limit in
// all, one three times the other, is assigned its proportional part of
// the one limit (within a quarter), not each the whole of it.
func TestRLQSSharedRedis(t *testing.T) {
	rp := startRedisProc(t, "redis-server")
	cfg := writeConfig(t, sharedYAML)
	api := map[string]string{"name": "api"}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var clients []*rlqstest.Client
	for _, rate := range []float64{375, 1125} {
		_, banner := serveProcess(t, "-config", cfg, "-redis", "redis://"+rp.addr)
		cc, err := grpc.NewClient(banner["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		c := rlqstest.New(rlqstest.Config{
			Domain: "quota",
			Bucket: func(any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) {
				return api, &quotapb.RateLimitQuotaBucketSettings{ReportingInterval: durationpb.New(50 * time.Millisecond)}
			},
			Conns: []grpc.ClientConnInterface{cc},
		})
		clients = append(clients, c)
		wg.Go(func() { c.Run(ctx) })
		wg.Go(func() { c.Drive(ctx, api, rate) })
	}
	begin := time.Now()
	deadline := begin.Add(30 * time.Second)
	for {
		var rates [2]float64
		for i, c := range clients {
			_, st := c.State(api, time.Now())
			if tb := st.GetTokenBucket(); tb != nil {
				rates[i] = float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
			}
		}
		if time.Since(begin) > time.Second && math.Abs(rates[0]-250) <= 250/4 && math.Abs(rates[1]-750) <= 750/4 {
			t.Logf("after %v: the streams refill at %.0f and %.0f a second of 1000", time.Since(begin).Round(time.Millisecond), rates[0], rates[1])
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the streams refill at %.0f and %.0f a second, want about 250 and 750: their parts of one limit of 1000", rates[0], rates[1])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Redis stopped (SIGSTOP) under a replica: its renewals fail, so the
// stream's assignment runs to its TTL and expires; when Redis answers
// again, the stream is assigned again.
func TestRLQSRedisStopped(t *testing.T) {
	rp := startRedisProc(t, "redis-server")
	_, banner := serveProcess(t, "-config", writeConfig(t, rlqsServeYAML), "-redis", "redis://"+rp.addr)
	cc, err := grpc.NewClient(banner["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	api := map[string]string{"name": "api"}
	c := rlqstest.New(rlqstest.Config{
		Domain: "quota",
		Bucket: reuseLast(api, time.Hour),
		Conns:  []grpc.ClientConnInterface{cc},
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	wait := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			c.Allow(api, time.Now())
			if s, _ := c.State(api, time.Now()); s == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("still waiting after 30s for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("an assignment", rlqstest.Active)
	if err := rp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cont := func() { rp.cmd.Process.Signal(syscall.SIGCONT) }
	t.Cleanup(cont)
	wait("the assignment expired with Redis stopped", rlqstest.Expired)
	t.Logf("the assignment expired %v after Redis stopped (its TTL: 300ms)", time.Since(stopped).Round(time.Millisecond))
	cont()
	resumed := time.Now()
	wait("an assignment again with Redis back", rlqstest.Active)
	t.Logf("assigned again %v after Redis resumed", time.Since(resumed).Round(time.Millisecond))
}

// A replica SIGKILLed mid-stream with the replicas sharing one Redis:
// the client reconnects to the other, which is assigned at first only
// what the dead stream's share leaves (the authority counts it until its
// TTL), and the whole limit once it has lapsed.
func TestRLQSReplicaKilledSharedRedis(t *testing.T) {
	rp := startRedisProc(t, "redis-server")
	cfg := writeConfig(t, sharedYAML)
	var conns []grpc.ClientConnInterface
	var procs []*exec.Cmd
	for range 2 {
		p, banner := serveProcess(t, "-config", cfg, "-redis", "redis://"+rp.addr)
		cc, err := grpc.NewClient(banner["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		conns, procs = append(conns, cc), append(procs, p)
	}
	api := map[string]string{"name": "api"}
	c := rlqstest.New(rlqstest.Config{
		Domain: "quota",
		Bucket: reuseLast(api, time.Minute),
		Conns:  conns,
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { c.Run(ctx) })
	wg.Go(func() { c.Drive(ctx, api, 1500) }) // 1.5 times the limit
	rate := func() float64 {
		_, st := c.State(api, time.Now())
		if tb := st.GetTokenBucket(); tb != nil {
			return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
		}
		return -1
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("still waiting after 30s for %s (streams %d, rate %.0f)", what, c.Streams(), rate())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("the first replica's stream at the whole limit", func() bool { return c.Streams() == 1 && rate() >= 750 })
	if err := procs[0].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wait("a stream to the second replica", func() bool { return c.Streams() >= 2 })
	wait("the second replica's assignment at the whole limit, the dead share lapsed", func() bool {
		s, _ := c.State(api, time.Now())
		return s == rlqstest.Active && c.Streams() >= 2 && rate() >= 750
	})
	t.Logf("at the whole limit again on the second replica %v after the kill (rate %.0f)", time.Since(killed).Round(time.Millisecond), rate())
}

// reuseLast is a test client's Bucket function: every request is bucket,
// reported every 50ms, its expired assignment reused for timeout.
func reuseLast(bucket map[string]string, timeout time.Duration) func(any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) {
	return func(any) (map[string]string, *quotapb.RateLimitQuotaBucketSettings) {
		return bucket, &quotapb.RateLimitQuotaBucketSettings{
			ReportingInterval: durationpb.New(50 * time.Millisecond),
			ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior{
				ExpiredAssignmentBehaviorTimeout: durationpb.New(timeout),
				ExpiredAssignmentBehavior: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment_{
					ReuseLastAssignment: &quotapb.RateLimitQuotaBucketSettings_ExpiredAssignmentBehavior_ReuseLastAssignment{}},
			},
		}
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Calls to ShouldRateLimit that send their headers and never their
// message, 1024 on each of 40 connections, hold no more than the bounds
// allow: the service's RSS rises at most 64 MB over its idle size, its
// goroutines stay within -grpc-max-streams plus 200, the calls past that
// bound are refused with UNAVAILABLE, and every call held ends, with the
// service's DEADLINE_EXCEEDED, within -grpc-recv-timeout and 2s. On a
// machine busy with other work neither the service nor this test runs on
// time, so the bound grows by twice the longest the service took
// meanwhile to answer a health check: a call's deadline runs from when
// the service reads its headers, and its end reaches the client when the
// service writes it, and each may lag by that much.
func TestServeHeldStreams(t *testing.T) {
	if raceEnabled {
		t.Skip("the child process is this race-instrumented binary: its shadow memory makes RSS figures meaningless")
	}
	const (
		conns   = 40
		perConn = 1024
		recv    = 2 * time.Second
		slack   = 2 * time.Second
		// A bound below the default (4096, whose figures README gives),
		// so that the RSS allowance is not taken up by the collector's
		// pacing of the garbage the refused calls leave.
		streamCap = 1024
		maxRise   = 64 << 20
		spareGors = 200
	)
	// GOGC's own pacing, not -gc-floor's: the bound is on what the calls
	// hold, not on garbage the collector is told to leave.
	cmd, banner := serveProcess(t, "-config", writeConfig(t, serveYAML), "-gc-floor", "0",
		"-grpc-recv-timeout", recv.String(), "-grpc-max-streams", strconv.Itoa(streamCap))
	pid := cmd.Process.Pid
	metrics := "http://" + banner["http"] + "/metrics"

	clients := make([]*grpc.ClientConn, conns+1) // the last one probes
	for i := range clients {
		c, err := grpc.NewClient(banner["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// One call each, so that every connection is open before the
		// idle figures are read.
		if _, err := healthpb.NewHealthClient(c).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	idleRSS, idleGors := vmRSS(t, pid), goroutines(t, metrics)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var watched sync.WaitGroup
	var maxRSS, maxGors, maxHeap, maxStack, maxProbe atomic.Int64
	watched.Go(func() { // the service's figures, sampled through the flood
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, err := readRSS(pid); err == nil {
				maxRSS.Store(max(maxRSS.Load(), v))
			}
			for m, v := range readMetrics(metrics, "go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes") {
				at := map[string]*atomic.Int64{"go_goroutines": &maxGors, "go_memstats_heap_inuse_bytes": &maxHeap, "go_memstats_stack_inuse_bytes": &maxStack}[m]
				at.Store(max(at.Load(), v))
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	watched.Go(func() { // how long the service takes to answer meanwhile
		h := healthpb.NewHealthClient(clients[conns])
		for ctx.Err() == nil {
			start := time.Now()
			h.Check(ctx, &healthpb.HealthCheckRequest{}) // UNAVAILABLE past the bound: an answer all the same
			maxProbe.Store(max(maxProbe.Load(), int64(time.Since(start))))
		}
	})

	var (
		mu       sync.Mutex
		codesOf  = map[codes.Code]int{}
		heldFor  []time.Duration
		openErrs []error
		calls    sync.WaitGroup
		openers  sync.WaitGroup
	)
	for _, c := range clients[:conns] {
		openers.Go(func() {
			for range perConn {
				start := time.Now()
				cs, err := c.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
					"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
				if err != nil {
					mu.Lock()
					openErrs = append(openErrs, err)
					mu.Unlock()
					return
				}
				calls.Go(func() {
					err := cs.RecvMsg(new(rlspb.RateLimitResponse))
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					codesOf[status.Code(err)]++
					if status.Code(err) == codes.DeadlineExceeded {
						heldFor = append(heldFor, took)
					}
				})
			}
		})
	}
	openers.Wait()
	allEnded := make(chan struct{})
	go func() {
		calls.Wait()
		close(allEnded)
	}()
	// Far past recv+slack, the calls still held are held for good.
	select {
	case <-allEnded:
	case <-time.After(recv + slack + time.Minute):
		mu.Lock()
		t.Errorf("calls still held a minute past %v after the last was opened; ended so far: %v", recv+slack, codesOf)
		mu.Unlock()
	}
	cancel()
	watched.Wait()
	calls.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(openErrs) > 0 {
		t.Errorf("%d calls could not be opened, the first: %v", len(openErrs), openErrs[0])
	}
	held, refused := codesOf[codes.DeadlineExceeded], codesOf[codes.Unavailable]
	slices.Sort(heldFor)
	longest := time.Duration(0)
	if len(heldFor) > 0 {
		longest = heldFor[len(heldFor)-1]
		t.Logf("held calls ended after %v (median) to %v (longest); the longest health check took %v",
			heldFor[len(heldFor)/2].Round(time.Millisecond), longest.Round(time.Millisecond), time.Duration(maxProbe.Load()).Round(time.Millisecond))
	}
	t.Logf("%d calls: %d held until the service's deadline, %d refused past the bound of %d; "+
		"RSS %.1f MiB idle, %.1f MiB at most (heap in use %.1f MiB, stacks %.1f MiB at most); goroutines %d idle, %d at most",
		conns*perConn, held, refused, streamCap, mib(idleRSS), mib(maxRSS.Load()), mib(maxHeap.Load()), mib(maxStack.Load()), idleGors, maxGors.Load())
	if held+refused != conns*perConn {
		t.Errorf("the calls ended with %v, want each DEADLINE_EXCEEDED or UNAVAILABLE", codesOf)
	}
	if held < streamCap || refused == 0 {
		t.Errorf("%d calls held and %d refused, want at least the bound, %d, held and the rest refused", held, refused, streamCap)
	}
	if bound := recv + slack + 2*time.Duration(maxProbe.Load()); longest > bound {
		t.Errorf("a held call ended %v after it was opened, want within %v", longest, bound)
	}
	if rise := maxRSS.Load() - idleRSS; rise > maxRise {
		t.Errorf("RSS rose %.1f MiB over the idle service, want at most %d MiB", mib(rise), maxRise>>20)
	}
	if g := maxGors.Load(); g > streamCap+spareGors {
		t.Errorf("%d goroutines, want at most the stream bound and %d: %d", g, spareGors, streamCap+spareGors)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// vmRSS is process pid's resident memory, from /proc.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	v, err := readRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// goroutines reads go_goroutines from the service's metrics.
func goroutines(t *testing.T, url string) int64 {
	t.Helper()
	v, ok := readMetrics(url, "go_goroutines")["go_goroutines"]
	if !ok {
		t.Fatalf("no go_goroutines in %s", url)
	}
	return v
}

// readMetrics reads the unlabelled metrics names from url; those it could
// not read are missing.
func readMetrics(url string, names ...string) map[string]int64 {
	out := map[string]int64{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = int64(n)
		}
	}
	return out
}

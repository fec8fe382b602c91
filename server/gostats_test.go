package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server/internal/protocol"
	"github.com/sluicehq/sluice/server/internal/statsd"
)

// TestStatsdEnvoy: with Envoy set, each flush carries the Go runtime's
// statistics and the pools' under envoyproxy/ratelimit's names and kinds,
// and response_time in whole milliseconds.
func TestStatsdEnvoy(t *testing.T) {
	addr, lines := statsdLines(t, "tcp")
	pool := StatsPool{Name: "redis_pool", Conns: func() (uint64, uint64) { return 2, 3 }}
	e := start(t, Settings{
		Paths:      []string{writeFile(t, t.TempDir(), "sd.yaml", statsdYAML)},
		Statsd:     &Statsd{Addr: addr, FlushInterval: 10 * time.Millisecond, Envoy: true},
		StatsPools: []StatsPool{pool},
	})
	for range 3 {
		if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq("sd", 1, "user=a")); err != nil {
			t.Fatalf("ShouldRateLimit = %v", err)
		}
	}
	want := map[string]string{
		"ratelimit.go.alloc": "g", "ratelimit.go.gcCPUPercent": "g", "ratelimit.go.heapAlloc": "g",
		"ratelimit.go.heapIdle": "g", "ratelimit.go.heapInuse": "g", "ratelimit.go.heapObjects": "g",
		"ratelimit.go.heapReleased": "g", "ratelimit.go.heapSys": "g", "ratelimit.go.lastGC": "g",
		"ratelimit.go.nextGC": "g", "ratelimit.go.numGoroutine": "g", "ratelimit.go.sys": "g",
		"ratelimit.go.mallocs": "c", "ratelimit.go.totalAlloc": "c",
		"ratelimit.redis_pool.cx_active": "g", "ratelimit.redis_pool.cx_total": "c", "ratelimit.redis_pool.cx_local_close": "c",
	}
	// Counted only once the runtime collected garbage.
	sometimes := map[string]string{"ratelimit.go.frees": "c", "ratelimit.go.numGC": "c", "ratelimit.go.pauseTotalNs": "c"}
	got := map[string]float64{} // counters summed, gauges as last sent
	timings := 0
	deadline := time.After(30 * time.Second)
	for timings < 3 || len(got) < len(want) {
		var l string
		select {
		case l = <-lines:
		case <-deadline:
			t.Fatalf("after 30s, %d response times and %v, want 3 and %v", timings, got, want)
		}
		name, rest, _ := strings.Cut(l, ":")
		value, kind, _ := strings.Cut(rest, "|")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v < 0 {
			t.Fatalf("line %q: want a number not negative", l)
		}
		if name == "ratelimit_server.ShouldRateLimit.response_time" {
			if v != float64(int64(v)) {
				t.Errorf("line %q: want whole milliseconds", l)
			}
			timings++
			continue
		}
		if !strings.HasPrefix(name, "ratelimit.go.") && !strings.HasPrefix(name, "ratelimit.redis_pool.") {
			continue
		}
		if w := want[name] + sometimes[name]; w != kind {
			t.Fatalf("line %q: want kind %q", l, w)
		}
		if _, ok := want[name]; !ok {
			continue
		}
		if kind == "c" {
			got[name] += v
		} else {
			got[name] = v
		}
	}
	// The pool's: two open of three opened, so one closed; a counter
	// sends what it added since the last flush.
	for _, p := range []struct {
		name string
		want float64
	}{{"ratelimit.redis_pool.cx_active", 2}, {"ratelimit.redis_pool.cx_total", 3}, {"ratelimit.redis_pool.cx_local_close", 1}} {
		if got[p.name] != p.want {
			t.Errorf("%s = %v, want %v", p.name, got[p.name], p.want)
		}
	}
}

// timingSink keeps the timings it is given.
type timingSink struct{ took []time.Duration }

func (s *timingSink) Counter(string) *statsd.Counter   { return new(statsd.Counter) }
func (s *timingSink) Gauge(string) *statsd.Gauge       { return new(statsd.Gauge) }
func (s *timingSink) Timing(_ string, d time.Duration) { s.took = append(s.took, d) }
func (s *timingSink) Generate(func())                  {}
func (s *timingSink) Run(ctx context.Context)          { <-ctx.Done() }

// response_time: whole milliseconds, rounded down, under Envoy; sluice's
// own precision otherwise.
func TestStatsdResponseTime(t *testing.T) {
	for _, tc := range []struct {
		envoy bool
		want  time.Duration
	}{{true, time.Millisecond}, {false, 1999 * time.Microsecond}} {
		sink := &timingSink{}
		st := newStatsOn(sink, 0.8, tc.envoy, nil)
		st.decided(protocol.GRPC, nil, nil, errors.New("refused"), 1999*time.Microsecond, false)
		if len(sink.took) != 1 || sink.took[0] != tc.want {
			t.Errorf("Envoy %v: timed %v, want [%v]", tc.envoy, sink.took, tc.want)
		}
	}
}

func TestStatsPoolsRefused(t *testing.T) {
	conns := func() (uint64, uint64) { return 0, 0 }
	for _, ps := range [][]StatsPool{
		{{Name: "", Conns: conns}},
		{{Name: "redis.pool", Conns: conns}},
		{{Name: "redis_pool"}},
		{{Name: "redis_pool", Conns: conns}, {Name: "redis_pool", Conns: conns}},
	} {
		if _, err := New(Settings{Store: newStore(t), StatsPools: ps}); err == nil {
			t.Errorf("New with StatsPools %+v = nil error, want one", ps)
		}
	}
}

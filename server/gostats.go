package server

import (
	"runtime"
	"sync"

	"github.com/sluicehq/sluice/server/internal/statsd"
)

// statGo prefixes the Go runtime's statistics, as envoyproxy/ratelimit's
// statistics library names them.
const statGo = "ratelimit.go."

// goRuntimeStats returns what sends the Go runtime's statistics into
// sink, once a call: the names, kinds and units of
// envoyproxy/ratelimit's (lyft/gostats' runtime statistics), gauges of
// bytes, objects and goroutines, and counters of what the runtime counts
// since it started, of which each call adds what was counted since the
// last. Its "lookups" counter is left out: that library never sets it,
// so it is never sent. Its "sys" gauge, which that library never sets
// either and so always sends as 0, carries runtime.MemStats.Sys.
func goRuntimeStats(sink statSink) func() {
	g := func(name string) *statsd.Gauge { return sink.Gauge(statGo + name) }
	c := func(name string) *statsd.Counter { return sink.Counter(statGo + name) }
	alloc, sys, heapAlloc, heapSys, heapIdle, heapInuse, heapReleased, heapObjects, nextGC, lastGC, gcCPU, goroutines := g("alloc"), g("sys"), g("heapAlloc"), g("heapSys"), g("heapIdle"), g("heapInuse"), g("heapReleased"), g("heapObjects"), g("nextGC"), g("lastGC"), g("gcCPUPercent"), g("numGoroutine")
	type total struct {
		c    *statsd.Counter
		last uint64
	}
	totalAlloc, mallocs, frees, pauseTotal, numGC := &total{c: c("totalAlloc")}, &total{c: c("mallocs")}, &total{c: c("frees")}, &total{c: c("pauseTotalNs")}, &total{c: c("numGC")}
	var mu sync.Mutex // two scrapes may call at once
	return func() {
		mu.Lock()
		defer mu.Unlock()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		alloc.Set(m.Alloc)
		sys.Set(m.Sys)
		heapAlloc.Set(m.HeapAlloc)
		heapSys.Set(m.HeapSys)
		heapIdle.Set(m.HeapIdle)
		heapInuse.Set(m.HeapInuse)
		heapReleased.Set(m.HeapReleased)
		heapObjects.Set(m.HeapObjects)
		nextGC.Set(m.NextGC)
		lastGC.Set(m.LastGC)
		gcCPU.Set(uint64(m.GCCPUFraction * 100))
		goroutines.Set(uint64(runtime.NumGoroutine()))
		for _, t := range []struct {
			t *total
			v uint64
		}{{totalAlloc, m.TotalAlloc}, {mallocs, m.Mallocs}, {frees, m.Frees}, {pauseTotal, m.PauseTotalNs}, {numGC, uint64(m.NumGC)}} {
			if t.v > t.t.last {
				t.t.c.Add(t.v - t.t.last)
				t.t.last = t.v
			}
		}
	}
}

// A StatsPool is a connection pool whose connections the statistics
// report as envoyproxy/ratelimit reports its Redis pools', under
// ratelimit.<Name>: cx_active, the connections open (a gauge); cx_total,
// those opened, and cx_local_close, those closed (counters).
type StatsPool struct {
	// Name is envoyproxy/ratelimit's: redis_pool, or
	// redis_per_second_pool for the per-second Redis. Required.
	Name string
	// Conns returns the connections open now and those opened since the
	// pool began, opened at least active. It is called once a flush.
	// Required.
	Conns func() (active, opened uint64)
}

// poolStats returns what sends pools' connection counts into sink, once
// a call.
func poolStats(sink statSink, pools []StatsPool) func() {
	type pool struct {
		conns          func() (active, opened uint64)
		active         *statsd.Gauge
		total, closed  *statsd.Counter
		opened, closes uint64 // as last added
	}
	ps := make([]*pool, len(pools))
	for i, p := range pools {
		n := "ratelimit." + p.Name + "."
		ps[i] = &pool{conns: p.Conns, active: sink.Gauge(n + "cx_active"), total: sink.Counter(n + "cx_total"), closed: sink.Counter(n + "cx_local_close")}
	}
	var mu sync.Mutex // two scrapes may call at once
	return func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ps {
			active, opened := p.conns()
			opened = max(opened, active)
			p.active.Set(active)
			if opened > p.opened {
				p.total.Add(opened - p.opened)
				p.opened = opened
			}
			if closes := opened - active; closes > p.closes {
				p.closed.Add(closes - p.closes)
				p.closes = closes
			}
		}
	}
}

package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// memoryStats is a store that counts what it holds, evicts and refuses:
// the memory store.
type memoryStats interface{ Stats() memory.Stats }

// memoryCollector reads the memory stores' counts at each scrape, so the
// decision path does no more work for them.
type memoryCollector struct {
	stores  []memoryStats
	names   []string // the store label: main, fallback
	keys    *prometheus.Desc
	bytes   *prometheus.Desc
	evicted *prometheus.Desc
	refused *prometheus.Desc
}

// newMemoryCollector collects the stores of main and fallback that are
// memory stores, and returns nil if neither is.
func newMemoryCollector(main, fallback sluice.Store) *memoryCollector {
	c := &memoryCollector{
		keys:  prometheus.NewDesc("sluice_memory_keys", "Keys held by the memory store, by store (main, or the fallback of rules that fail local).", []string{"store"}, nil),
		bytes: prometheus.NewDesc("sluice_memory_bytes", "Bytes the memory store counts against -max-memory, by store.", []string{"store"}, nil),
		evicted: prometheus.NewDesc("sluice_memory_evictions_total",
			"Keys the memory store evicted to make room for new ones, by store and kind: idle (nothing lost) or live "+
				"(a key that still allowed; its client may be admitted again what it had used). A key that would deny is never evicted.",
			[]string{"store", "kind"}, nil),
		refused: prometheus.NewDesc("sluice_memory_refusals_total",
			"New keys the memory store refused for want of room, every key it sampled being one that would deny: "+
				"the rules' failure modes decided those requests, local as open.", []string{"store"}, nil),
	}
	for _, s := range []struct {
		st   sluice.Store
		name string
	}{{main, "main"}, {fallback, "fallback"}} {
		if ms, ok := s.st.(memoryStats); ok {
			c.stores = append(c.stores, ms)
			c.names = append(c.names, s.name)
		}
	}
	if len(c.stores) == 0 {
		return nil
	}
	return c
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.bytes
	ch <- c.evicted
	ch <- c.refused
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	for i, st := range c.stores {
		s, name := st.Stats(), c.names[i]
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Keys), name)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes), name)
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(s.EvictedIdle), name, "idle")
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(s.EvictedLive), name, "live")
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused), name)
	}
}

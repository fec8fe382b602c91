package console

import (
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// The ring of recent seconds behind GET /v1/stats.
const (
	// statsSeconds is the window the console shows: five minutes.
	statsSeconds = 300
	// statsMaxCells bounds the per-rule counts the ring holds, 16 bytes
	// each: past it, the oldest seconds go first, so that a config of
	// many busy rules shows a shorter window rather than more memory.
	statsMaxCells = 1 << 18
)

// The values of sluice_decisions_total's result label, which the
// statistics read: package server counts by them.
const (
	ResultWithin     = decide.ResultWithin
	ResultOver       = decide.ResultOver
	ResultShadowOver = decide.ResultShadowOver
)

// statsRing samples the server's counters once a second and keeps the
// differences, per second, for the last statsSeconds. It reads the
// Prometheus collectors the decisions already count in, so the decision
// path does no more work for it; and those hold no key, value or address,
// only the config's domains and rule names.
type statsRing struct {
	mu    sync.Mutex
	secs  [statsSeconds]second
	head  int // index of the oldest second
	n     int // seconds held
	cells int // cells held, summed over secs

	series []seriesKey // by index: every (domain, rule) seen
	index  map[seriesKey]int32
	last   []tally // cumulative at the last sample, by series index
	lat    latTally
	errs   uint64
	primed bool // last, lat and errs hold a sample
}

// seriesKey is a series of sluice_decisions_total (a domain and a rule),
// or, with request set, of sluice_requests_total (a domain).
type seriesKey struct {
	domain, rule string
	request      bool
}

// tally is one series' decisions: allowed, denied, denied in shadow mode.
type tally struct{ within, over, shadow uint64 }

// latTally is the decision-duration histogram, over every endpoint.
type latTally struct {
	count   uint64
	sum     float64
	buckets []uint64 // cumulative, by latBounds
}

// second is what one second added.
type second struct {
	at          int64 // Unix seconds
	cells       []cell
	decisions   uint64
	latSum      float64 // seconds
	p50, p99    float64 // seconds: the upper bound of the bucket; +Inf past the last
	storeErrors uint64
}

// cell is one series' decisions in one second.
type cell struct {
	series               int32
	within, over, shadow uint32
}

// run samples every second until ctx ends.
func (r *statsRing) run(ctx context.Context, svc *Service) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	r.sample(svc, svc.Clock.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sample(svc, svc.Clock.Now())
		}
	}
}

// sample reads the counters at now and records what they added since the
// last sample as the second now falls in. The first sample only primes.
func (r *statsRing) sample(svc *Service, now time.Time) {
	cum := readCounts(svc.Decisions, false)
	maps.Copy(cum, readCounts(svc.Requests, true))
	lat := readLatency(svc.Duration)
	errs := readCounter(svc.StoreErrors)

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.index == nil {
		r.index = make(map[seriesKey]int32)
	}
	sec := second{at: now.Unix()}
	for k, v := range cum {
		i, ok := r.index[k]
		if !ok {
			i = int32(len(r.series))
			r.index[k] = i
			r.series = append(r.series, k)
			// A series born since the last sample is all new; one found
			// by the first sample is the baseline.
			r.last = append(r.last, tally{})
			if !r.primed {
				r.last[i] = v
			}
		}
		d := tally{within: v.within - r.last[i].within, over: v.over - r.last[i].over, shadow: v.shadow - r.last[i].shadow}
		r.last[i] = v
		if d != (tally{}) {
			sec.cells = append(sec.cells, cell{series: i, within: clamp32(d.within), over: clamp32(d.over), shadow: clamp32(d.shadow)})
		}
	}
	if r.primed {
		sec.decisions = lat.count - r.lat.count
		sec.latSum = lat.sum - r.lat.sum
		sec.p50 = lat.quantile(&r.lat, 0.5)
		sec.p99 = lat.quantile(&r.lat, 0.99)
		sec.storeErrors = errs - r.errs
	}
	r.lat, r.errs = lat, errs
	if !r.primed {
		r.primed = true
		return
	}
	r.push(sec)
}

// push appends sec, replacing a second of the same time, and drops the
// oldest seconds past the window or the cell bound.
func (r *statsRing) push(sec second) {
	if r.n > 0 {
		if last := &r.secs[(r.head+r.n-1)%statsSeconds]; last.at >= sec.at {
			// Two ticks in one second (a late tick): merge them.
			sec = merge(*last, sec)
			r.cells -= len(last.cells)
			r.n--
		}
	}
	if r.n == statsSeconds {
		r.dropOldest()
	}
	for r.n > 0 && r.cells+len(sec.cells) > statsMaxCells {
		r.dropOldest()
	}
	if len(sec.cells) > statsMaxCells {
		sec.cells = sec.cells[:statsMaxCells]
	}
	r.secs[(r.head+r.n)%statsSeconds] = sec
	r.n++
	r.cells += len(sec.cells)
}

func (r *statsRing) dropOldest() {
	r.cells -= len(r.secs[r.head].cells)
	r.secs[r.head] = second{}
	r.head = (r.head + 1) % statsSeconds
	r.n--
}

func merge(a, b second) second {
	out := b
	out.at = a.at
	out.cells = append([]cell(nil), a.cells...)
	for _, c := range b.cells {
		found := false
		for i := range out.cells {
			if out.cells[i].series == c.series {
				out.cells[i].within = sat32(out.cells[i].within, c.within)
				out.cells[i].over = sat32(out.cells[i].over, c.over)
				out.cells[i].shadow = sat32(out.cells[i].shadow, c.shadow)
				found = true
				break
			}
		}
		if !found {
			out.cells = append(out.cells, c)
		}
	}
	out.decisions = a.decisions + b.decisions
	out.latSum = a.latSum + b.latSum
	out.p50, out.p99 = max(a.p50, b.p50), max(a.p99, b.p99)
	out.storeErrors = a.storeErrors + b.storeErrors
	return out
}

func clamp32(v uint64) uint32 { return uint32(min(v, math.MaxUint32)) }

func sat32(a, b uint32) uint32 { return clamp32(uint64(a) + uint64(b)) }

// latBounds are the decision-duration buckets' upper bounds, as
// newMetrics sets them.
var latBounds = prometheus.ExponentialBuckets(25e-6, 2, 16)

// quantile is the upper bound of the bucket that holds quantile q of the
// observations since prev, +Inf past the last bucket, 0 if there are
// none.
func (t *latTally) quantile(prev *latTally, q float64) float64 {
	n := t.count - prev.count
	if n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(n)))
	for i, b := range latBounds {
		var p uint64
		if i < len(prev.buckets) {
			p = prev.buckets[i]
		}
		if i < len(t.buckets) && t.buckets[i]-p >= want {
			return b
		}
	}
	return math.Inf(1)
}

// collect gathers c's metrics.
func collect(c prometheus.Collector) []*dto.Metric {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var out []*dto.Metric
	for pm := range ch {
		var m dto.Metric
		if pm.Write(&m) == nil {
			out = append(out, &m)
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// readCounts reads sluice_decisions_total, by domain and rule, or, with
// requests, sluice_requests_total, by domain.
func readCounts(c *prometheus.CounterVec, requests bool) map[seriesKey]tally {
	out := make(map[seriesKey]tally)
	for _, m := range collect(c) {
		k := seriesKey{domain: label(m, "domain"), rule: label(m, "rule"), request: requests}
		t := out[k]
		v := uint64(m.GetCounter().GetValue())
		switch label(m, "result") {
		case ResultWithin:
			t.within = v
		case ResultOver:
			t.over = v
		case ResultShadowOver:
			t.shadow = v
		}
		out[k] = t
	}
	return out
}

// readLatency adds up sluice_decision_duration_seconds over the endpoints.
func readLatency(c *prometheus.HistogramVec) latTally {
	t := latTally{buckets: make([]uint64, len(latBounds))}
	for _, m := range collect(c) {
		h := m.GetHistogram()
		t.count += h.GetSampleCount()
		t.sum += h.GetSampleSum()
		for i, b := range h.GetBucket() {
			if i < len(t.buckets) {
				t.buckets[i] += b.GetCumulativeCount()
			}
		}
	}
	return t
}

func readCounter(c prometheus.Counter) uint64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}

// StatsReport is GET /v1/stats.
type StatsReport struct {
	Note    string    `json:"note"`
	Now     int64     `json:"now"`     // Unix seconds
	Started time.Time `json:"started"` // when this process's server was made
	Window  int       `json:"window_seconds"`
	// Seconds are the sampled seconds, oldest first (Unix seconds); each
	// array below has one value per second.
	Seconds []int64 `json:"seconds"`
	// Requests are the requests of each domain, each counted once; Rules
	// the decisions of each limit, so that a request that met two limits
	// counts under both.
	Requests []RuleReport `json:"requests"`
	Rules    []RuleReport `json:"rules"`
	Latency  struct {
		Decisions []uint64   `json:"decisions"`
		MeanMs    []float64  `json:"mean_ms"`
		P50Ms     []*float64 `json:"p50_ms"` // null past the last bucket
		P99Ms     []*float64 `json:"p99_ms"`
	} `json:"latency"`
	Store  storeReport `json:"store"`
	Shadow bool        `json:"shadow"`
	Lookup bool        `json:"lookup"`
	UI     bool        `json:"ui"`
}

// RuleReport is one domain and rule, or one domain's requests (no rule):
// per second, and in total since the process started.
type RuleReport struct {
	Domain     string   `json:"domain"`
	Rule       string   `json:"rule,omitempty"`
	Within     []uint32 `json:"within"`
	Over       []uint32 `json:"over"`
	ShadowOver []uint32 `json:"shadow_over"`
	Total      struct {
		Within     uint64 `json:"within"`
		Over       uint64 `json:"over"`
		ShadowOver uint64 `json:"shadow_over"`
	} `json:"total"`
}

type storeReport struct {
	Name        string   `json:"name"`
	Errors      []uint64 `json:"errors"` // per second: requests the failure modes decided
	ErrorsTotal uint64   `json:"errors_total"`
	// Health: "ok"; "errors" when the store failed in the last ten
	// seconds; for Redis, "down" while its circuit breaker is open.
	Health  string      `json:"health"`
	Breaker string      `json:"breaker,omitempty"` // Redis: closed, open, half-open
	Keys    *int        `json:"keys,omitempty"`    // memory: keys held
	Bytes   *int64      `json:"bytes,omitempty"`   // memory: what they hold
	Memory  *memoryRoom `json:"memory,omitempty"`  // memory: evictions and refusals
	// Redis: its counts by name (redis.Stats).
	Redis map[string]int64 `json:"redis,omitempty"`
}

// memoryStore is a store that counts what it holds, evicts and refuses:
// the memory store.
type memoryStore interface{ Stats() memory.Stats }

// memoryRoom is what the memory store did to make room, since it started.
type memoryRoom struct {
	EvictedIdle uint64 `json:"evicted_idle"`
	EvictedLive uint64 `json:"evicted_live"`
	Refused     uint64 `json:"refused"`
}

const statsNote = "This process only: with several replicas, each shows its own decisions."

// report is GET /v1/stats.
func (r *statsRing) report(c *Console, opts Options) *StatsReport {
	out := &StatsReport{Note: statsNote, Now: c.svc.Clock.Now().Unix(), Started: c.started,
		Window: statsSeconds, Shadow: c.svc.Shadow, Lookup: opts.Lookup, UI: opts.UI}
	r.mu.Lock()
	defer r.mu.Unlock()
	out.Seconds = make([]int64, r.n)
	out.Rules = []RuleReport{} // [], not null, before the first decision
	out.Requests = []RuleReport{}
	rows := make([]*RuleReport, len(r.series))
	row := func(i int32) *RuleReport {
		if rows[i] == nil {
			rows[i] = &RuleReport{Domain: r.series[i].domain, Rule: r.series[i].rule,
				Within: make([]uint32, r.n), Over: make([]uint32, r.n), ShadowOver: make([]uint32, r.n)}
		}
		return rows[i]
	}
	out.Latency.Decisions = make([]uint64, r.n)
	out.Latency.MeanMs = make([]float64, r.n)
	out.Latency.P50Ms = make([]*float64, r.n)
	out.Latency.P99Ms = make([]*float64, r.n)
	out.Store.Errors = make([]uint64, r.n)
	recentErrors := false
	for j := range r.n {
		sec := &r.secs[(r.head+j)%statsSeconds]
		out.Seconds[j] = sec.at
		for _, c := range sec.cells {
			rr := row(c.series)
			rr.Within[j], rr.Over[j], rr.ShadowOver[j] = c.within, c.over, c.shadow
		}
		out.Latency.Decisions[j] = sec.decisions
		if sec.decisions > 0 {
			out.Latency.MeanMs[j] = sec.latSum / float64(sec.decisions) * 1e3
			out.Latency.P50Ms[j] = ms(sec.p50)
			out.Latency.P99Ms[j] = ms(sec.p99)
		}
		out.Store.Errors[j] = sec.storeErrors
		if sec.storeErrors > 0 && out.Now-sec.at < 10 {
			recentErrors = true
		}
	}
	// Every series seen, with its total, even when quiet in the window.
	for i := range r.series {
		rr := row(int32(i))
		rr.Total.Within, rr.Total.Over, rr.Total.ShadowOver = r.last[i].within, r.last[i].over, r.last[i].shadow
		if r.series[i].request {
			out.Requests = append(out.Requests, *rr)
		} else {
			out.Rules = append(out.Rules, *rr)
		}
	}
	byName := func(a, b RuleReport) int {
		return cmp.Or(strings.Compare(a.Domain, b.Domain), strings.Compare(a.Rule, b.Rule))
	}
	slices.SortFunc(out.Requests, byName)
	slices.SortFunc(out.Rules, byName)
	out.Store.Name = c.svc.StoreName
	out.Store.ErrorsTotal = r.errs
	out.Store.Health = "ok"
	if recentErrors {
		out.Store.Health = "errors"
	}
	switch st := c.svc.Store.(type) {
	case StatsStore:
		out.Store.Redis, out.Store.Breaker = st.Counters()
		if out.Store.Breaker == "open" {
			out.Store.Health = "down"
		}
	case memoryStore:
		ms := st.Stats()
		out.Store.Keys, out.Store.Bytes = &ms.Keys, &ms.Bytes
		out.Store.Memory = &memoryRoom{EvictedIdle: ms.EvictedIdle, EvictedLive: ms.EvictedLive, Refused: ms.Refused}
	}
	return out
}

func ms(sec float64) *float64 {
	if math.IsInf(sec, 1) {
		return nil
	}
	v := sec * 1e3
	return &v
}

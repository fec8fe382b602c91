package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/protocol"
)

// seriesKey is a series of sluice_decisions_total: a domain and a rule
// label.
type seriesKey struct{ domain, rule string }

// Label values that stand for what the config does not name, so that a
// request can never add a series: every other domain and rule label comes
// from the config.
const (
	labelUnknownDomain = "(unknown)" // a domain no config file defines
	labelNoRule        = "(none)"    // a descriptor no limit applies to
	labelOther         = "(other)"   // value_to_metric labels past MaxLabelValues
)

// MaxLabelValues is how many distinct descriptors (value_to_metric's
// labels, config.Match.MetricLabel) one rule counts apart in
// sluice_value_decisions_total. Past it, a descriptor not yet seen is
// counted under descriptor "(other)": a flood of values adds no series.
// A rule's series go when a reload drops or changes the rule.
const MaxLabelValues = 100

// Results of sluice_decisions_total, which the console reads too.
const (
	resultWithin     = decide.ResultWithin
	resultOver       = decide.ResultOver
	resultShadowOver = decide.ResultShadowOver
)

// endpointNames are the labels of sluice_decision_duration_seconds, by
// the endpoint a request came in at: metrics.endpoints is indexed the
// same, so that a request's observation looks nothing up by name.
var endpointNames = [protocol.NumEndpoints]string{protocol.GRPC: "grpc", protocol.JSON: "json", protocol.Auth: "auth"}

// metrics are the server's Prometheus collectors, on a registry of its
// own so that two servers in one process (tests) do not collide.
type metrics struct {
	reg         *prometheus.Registry
	decisions   *prometheus.CounterVec
	requests    *prometheus.CounterVec // one per request, by domain and result
	values      *prometheus.CounterVec // value_to_metric
	storeErrors prometheus.Counter
	shed        *prometheus.CounterVec // by domain
	lost        *prometheus.CounterVec // usage charges the store did not record
	duration    *prometheus.HistogramVec
	reloads     *prometheus.CounterVec
	rules       prometheus.Gauge
	// connsRefused and streamsRefused count what the bounds on
	// connections and gRPC streams turned away (conns.go).
	connsRefused   *prometheus.CounterVec
	streamsRefused prometheus.Counter
	endpoints      [protocol.NumEndpoints]prometheus.Observer // duration, by endpoint
	// unruled are the series of sluice_decisions_total of descriptors
	// that no limit applies to or that are unlimited, by domain and rule
	// label (seriesKey), looked up once each. Their labels come from the
	// configs served, so there are as few as the other series.
	unruled sync.Map
	// byDomain are the series of sluice_requests_total, a *ruleCounters
	// per domain label, looked up once each.
	byDomain sync.Map
	// shared are the *ruleCounters of rules used in several domains (the
	// limit overrides, one rule per rate whatever the domain), by domain
	// and rule label (seriesKey).
	shared sync.Map
}

// countUnruled counts a decision, within, of a descriptor that no limit
// applies to (rule labelNoRule) or that is unlimited.
func (m *metrics) countUnruled(domain, rule string) {
	k := seriesKey{domain, rule}
	c, ok := m.unruled.Load(k)
	if !ok {
		c, _ = m.unruled.LoadOrStore(k, m.decisions.WithLabelValues(domain, rule, resultWithin))
	}
	c.(prometheus.Counter).Inc()
}

// breakerStore is a store behind a circuit breaker, as the Redis store
// is: its counts by name, and the breaker's state ("closed", "open",
// "half-open"). It is console.StatsStore, named here so that the metrics
// need nothing of the console.
type breakerStore interface {
	Counters() (counts map[string]int64, breaker string)
}

// watchStore adds the Redis store's circuit breaker to the metrics, if
// store is one (a Store or a Pair): its state and how often it opened.
func (m *metrics) watchStore(store sluice.Store) {
	rs, ok := store.(breakerStore)
	if !ok {
		return
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_store_breaker_opens_total",
		Help: "Times the Redis store's circuit breaker opened: over 10s, at least 20 calls reached Redis and half of them failed (a timeout counts only from a Redis silent for a second). " +
			"While it is open, the rules' failure modes decide.",
	}, func() float64 {
		counts, _ := rs.Counters()
		return float64(counts["BreakerOpens"])
	}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_store_breaker_open",
		Help: "1 while the Redis store's circuit breaker is open or half-open, else 0.",
	}, func() float64 {
		if _, state := rs.Counters(); state == "closed" {
			return 0
		}
		return 1
	}))
}

// countRequest counts one request decided in domain (a label the config
// names, or labelUnknownDomain) in sluice_requests_total: within, over,
// or shadow_over for one allowed that a limit in shadow mode would have
// denied. A request counts once, however many limits it met.
func (m *metrics) countRequest(domain, result string) {
	c, ok := m.byDomain.Load(domain)
	if !ok {
		c, _ = m.byDomain.LoadOrStore(domain, &ruleCounters{
			domain:     domain,
			within:     m.requests.WithLabelValues(domain, resultWithin),
			over:       m.requests.WithLabelValues(domain, resultOver),
			shadowOver: m.requests.WithLabelValues(domain, resultShadowOver),
		})
	}
	c.(*ruleCounters).inc(result)
}

// countShed counts a request shed in domain, a label the config names
// (or labelUnknownDomain).
func (m *metrics) countShed(domain string) { m.shed.WithLabelValues(domain).Inc() }

// ruleCounters are one rule's series of sluice_decisions_total in one
// domain, looked up once.
type ruleCounters struct {
	domain                   string
	within, over, shadowOver prometheus.Counter
}

// count counts one decision of li's rule in domain. A config's rule is
// matched only in its own domain, and keeps its series; a limit
// override's rule serves every domain, and its series in the domains
// after the first are looked up by domain.
func (m *metrics) count(li *decide.Limit, domain, result string) {
	a := asideOf(li)
	rc := a.counters.Load()
	if rc == nil {
		rc = m.ruleSeries(domain, li.Label)
		if !a.counters.CompareAndSwap(nil, rc) {
			rc = a.counters.Load()
		}
	}
	if rc.domain != domain {
		k := seriesKey{domain, li.Label}
		c, ok := m.shared.Load(k)
		if !ok {
			c, _ = m.shared.LoadOrStore(k, m.ruleSeries(domain, li.Label))
		}
		rc = c.(*ruleCounters)
	}
	rc.inc(result)
}

// ruleSeries returns the series of rule label in domain.
func (m *metrics) ruleSeries(domain, label string) *ruleCounters {
	return &ruleCounters{
		domain:     domain,
		within:     m.decisions.WithLabelValues(domain, label, resultWithin),
		over:       m.decisions.WithLabelValues(domain, label, resultOver),
		shadowOver: m.decisions.WithLabelValues(domain, label, resultShadowOver),
	}
}

func (rc *ruleCounters) inc(result string) {
	switch result {
	case resultWithin:
		rc.within.Inc()
	case resultOver:
		rc.over.Inc()
	default:
		rc.shadowOver.Inc()
	}
}

// countValue counts one decision of li's rule in domain, for a descriptor
// that value_to_metric labels label, in sluice_value_decisions_total.
func (m *metrics) countValue(li *decide.Limit, domain, label, result string) {
	if rc := asideOf(li).values.counters(m.values, domain, li.Rule.Name(), label); rc != nil {
		rc.inc(result)
	}
}

// labelSeries are one rule's series of sluice_value_decisions_total: at
// most MaxLabelValues labels and "(other)".
type labelSeries struct {
	mu      sync.Mutex
	vec     *prometheus.CounterVec // set on first use, with domain
	domain  string
	byLabel map[string]*ruleCounters
	other   *ruleCounters
	dropped bool
}

// counters returns the series of label, or of "(other)" when the rule
// already has MaxLabelValues others; nil once the rule is dropped.
func (ls *labelSeries) counters(vec *prometheus.CounterVec, domain, rule, label string) *ruleCounters {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.dropped {
		return nil
	}
	if rc := ls.byLabel[label]; rc != nil {
		return rc
	}
	if ls.vec == nil {
		ls.vec, ls.domain, ls.byLabel = vec, domain, make(map[string]*ruleCounters)
	}
	with := func(label string) *ruleCounters {
		return &ruleCounters{
			domain:     domain,
			within:     vec.WithLabelValues(domain, rule, label, resultWithin),
			over:       vec.WithLabelValues(domain, rule, label, resultOver),
			shadowOver: vec.WithLabelValues(domain, rule, label, resultShadowOver),
		}
	}
	if len(ls.byLabel) < MaxLabelValues {
		rc := with(label)
		ls.byLabel[label] = rc
		return rc
	}
	if ls.other == nil {
		ls.other = with(labelOther)
	}
	return ls.other
}

// drop deletes the rule's series, for a rule a reload dropped or changed,
// and stops it making more: requests still in flight with the old config
// count nowhere.
func (ls *labelSeries) drop(rule string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.dropped = true
	if ls.vec == nil {
		return
	}
	labels := make([]string, 0, len(ls.byLabel)+1)
	for l := range ls.byLabel {
		labels = append(labels, l)
	}
	if ls.other != nil {
		labels = append(labels, labelOther)
	}
	for _, l := range labels {
		for _, r := range []string{resultWithin, resultOver, resultShadowOver} {
			ls.vec.DeleteLabelValues(ls.domain, rule, l, r)
		}
	}
	ls.byLabel, ls.other = nil, nil
}

// observe records how long a request to e took.
func (m *metrics) observe(e protocol.Endpoint, d time.Duration) {
	m.endpoints[e].Observe(d.Seconds())
}

// Listeners of sluice_connections_refused_total.
const (
	listenerGRPC = "grpc"
	listenerHTTP = "http"
)

// refusedConn returns the func that counts a connection the listener l
// refused.
func (m *metrics) refusedConn(l string) func() { return m.connsRefused.WithLabelValues(l).Inc }

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions, one per limit applied to a request descriptor, by domain, rule and result " +
				"(within, over, or shadow_over for a denial not enforced). " +
				`Descriptors no limit applies to count under rule "(none)", domains the config lacks under domain "(unknown)".`,
		}, []string{"domain", "rule", "result"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total",
			Help: "Rate-limit requests, each counted once whatever the limits it met, by domain and result: " +
				"within (allowed), over (denied), or shadow_over (allowed, but a limit in shadow mode would have denied it). " +
				`Domains the config lacks count under "(unknown)".`,
		}, []string{"domain", "result"}),
		values: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_value_decisions_total",
			Help: "Rate-limit decisions of the limits whose descriptor sets value_to_metric, by domain, rule, " +
				"the request descriptor with the values value_to_metric asks for, and result, as in sluice_decisions_total. " +
				`At most 100 descriptors per rule are counted apart; the rest count under descriptor "(other)".`,
		}, []string{"domain", "rule", "descriptor", "result"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Requests the store could not decide, which the rules' failure modes decided instead.",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_shed_total",
			Help: "Requests shed, by domain: their turn, or the store's answer, did not come in time. " +
				"Each was denied (OVER_LIMIT, 429 with Retry-After: 1), whatever the rules' failure modes.",
		}, []string{"domain"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_usage_charges_lost_total",
			Help: "Charges of limits charged by usage (charge: usage, or every limit under -charge-per-descriptor) " +
				"that the store did not record, by domain and rule: it failed, and the rules' failure modes decided those requests instead, or it shed them.",
		}, []string{"domain", "rule"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_decision_duration_seconds",
			Help: "Time to decide one rate-limit request, from its arrival to its answer, by endpoint (grpc, json, auth).",
			// 25µs to about 0.8s: an in-memory decision takes microseconds,
			// a Redis one a network round trip.
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}, []string{"endpoint"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Config reloads by result: success (the new config serves) or failure (the last good one keeps serving).",
		}, []string{"result"}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_rules",
			Help: "Rules in the config being served.",
		}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_connections_refused_total",
			Help: "Connections closed as soon as accepted, past the bound on connections open at once, by listener (grpc, http).",
		}, []string{"listener"}),
		streamsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grpc_streams_refused_total",
			Help: "gRPC calls refused with UNAVAILABLE, past the bound on calls in flight across all connections.",
		}),
	}
	m.reg.MustRegister(m.decisions, m.requests, m.values, m.storeErrors, m.shed, m.lost, m.duration, m.reloads, m.rules, m.connsRefused, m.streamsRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Both results exist from the start, so that a rate() over them is
	// defined before the first reload.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	for _, l := range []string{listenerGRPC, listenerHTTP} {
		m.connsRefused.WithLabelValues(l)
	}
	for e, name := range endpointNames {
		m.endpoints[e] = m.duration.WithLabelValues(name)
	}
	return m
}

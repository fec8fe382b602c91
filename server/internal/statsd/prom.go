package statsd

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A Prom keeps counters and timings as a Sink does, and shows them as
// Prometheus series under the names envoyproxy/ratelimit's default
// statsd_exporter mapping (src/stats/prom/default_mapper.yaml) gives
// them, rather than sending them. It is a prometheus.Collector.
type Prom struct {
	// Millis observes timings in milliseconds; the default is seconds.
	Millis bool

	counters sync.Map // name -> *Counter
	mu       sync.Mutex
	series   map[string]*promSeries // by statsd name, in first-use order below
	order    []string
	families map[string][]string // a family's label names, fixed by its first series
	timings  map[string]prometheus.Histogram
}

// promSeries is where one statsd name shows, or nothing when its family
// already has other label names (statsd_exporter keeps the first too).
type promSeries struct {
	name   string
	labels prometheus.Labels
	keys   []string
	drop   bool
}

// NewProm returns an empty Prom.
func NewProm(millis bool) *Prom {
	return &Prom{Millis: millis, series: map[string]*promSeries{}, families: map[string][]string{}, timings: map[string]prometheus.Histogram{}}
}

// The default mapper's rules: globs, whose "*" takes one dot-separated
// part, and, for names no glob takes, regular expressions in order.
var (
	rateLimitStats = []string{"near_limit", "over_limit", "total_hits", "within_limit", "shadow_mode"}
	rateLimitRegex = func() []*regexp.Regexp {
		rs := make([]*regexp.Regexp, len(rateLimitStats))
		for i, s := range rateLimitStats {
			rs[i] = regexp.MustCompile(`ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)(\..*)\.` + s)
		}
		return rs
	}()
)

// promName maps a statsd name as the default mapper does: a name no
// rule takes shows under itself with every byte outside [a-zA-Z0-9_]
// made "_", and no labels.
func promName(name string) (string, prometheus.Labels) {
	p := strings.Split(name, ".")
	switch {
	case len(p) == 6 && p[0] == "ratelimit" && p[1] == "service" && p[2] == "rate_limit":
		for _, s := range rateLimitStats {
			if p[5] == s {
				return "ratelimit_service_rate_limit_" + s, prometheus.Labels{"domain": p[3], "key1": p[4]}
			}
		}
	case len(p) == 5 && p[0] == "ratelimit" && p[1] == "service" && p[2] == "call" && p[3] == "should_rate_limit":
		return "ratelimit_service_should_rate_limit_error", prometheus.Labels{"err_type": p[4]}
	case len(p) == 3 && p[0] == "ratelimit_server" && p[2] == "total_requests":
		return "ratelimit_service_total_requests", prometheus.Labels{"grpc_method": p[1]}
	case len(p) == 3 && p[0] == "ratelimit_server" && p[2] == "response_time":
		return "ratelimit_service_response_time_seconds", prometheus.Labels{"grpc_method": p[1]}
	case name == "ratelimit.service.config_load_success", name == "ratelimit.service.config_load_error":
		return "ratelimit_service_" + p[2], nil
	}
	for i, re := range rateLimitRegex {
		if m := re.FindStringSubmatch(name); m != nil {
			return "ratelimit_service_rate_limit_" + rateLimitStats[i], prometheus.Labels{"domain": m[1], "key1": m[2], "key2": m[3]}
		}
	}
	return escape(name), nil
}

// escape makes name a Prometheus metric name as statsd_exporter does.
func escape(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && '0' <= b[0] && b[0] <= '9' {
		return "_" + string(b)
	}
	return string(b)
}

// seriesOf returns where name shows, fixing its family's label names on
// first use.
func (p *Prom) seriesOf(name string) *promSeries {
	if s, ok := p.series[name]; ok {
		return s
	}
	n, labels := promName(name)
	s := &promSeries{name: n, labels: labels}
	for k := range labels {
		s.keys = append(s.keys, k)
	}
	sortStrings(s.keys)
	if keys, ok := p.families[n]; !ok {
		p.families[n] = s.keys
	} else if strings.Join(keys, ",") != strings.Join(s.keys, ",") {
		s.drop = true
	}
	p.series[name] = s
	p.order = append(p.order, name)
	return s
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Counter returns the counter called name, made on first use. Callers
// bound the names they make, as for a Sink.
func (p *Prom) Counter(name string) *Counter {
	if c, ok := p.counters.Load(name); ok {
		return c.(*Counter)
	}
	p.mu.Lock()
	p.seriesOf(name)
	p.mu.Unlock()
	c, _ := p.counters.LoadOrStore(name, &Counter{name: name})
	return c.(*Counter)
}

// Timing observes d under name, in a histogram with Prometheus's
// default buckets as statsd_exporter's.
func (p *Prom) Timing(name string, d time.Duration) {
	p.mu.Lock()
	h, ok := p.timings[name]
	if !ok {
		s := p.seriesOf(name)
		if !s.drop {
			h = prometheus.NewHistogram(prometheus.HistogramOpts{Name: s.name, Help: "envoyproxy/ratelimit's " + name + ".", ConstLabels: s.labels})
		}
		p.timings[name] = h
	}
	p.mu.Unlock()
	if h == nil {
		return
	}
	if p.Millis {
		h.Observe(float64(d) / float64(time.Millisecond))
	} else {
		h.Observe(d.Seconds())
	}
}

// Run waits for ctx: a Prom sends nothing.
func (p *Prom) Run(ctx context.Context) { <-ctx.Done() }

// Describe describes nothing: the series are made as names are used.
func (p *Prom) Describe(chan<- *prometheus.Desc) {}

// Collect sends each series, the counters of the statsd names that map
// to the same series summed.
func (p *Prom) Collect(ch chan<- prometheus.Metric) {
	type key struct{ name, labels string }
	sums := map[key]float64{}
	var keys []key
	var descs []*promSeries
	p.mu.Lock()
	for _, name := range p.order {
		s := p.series[name]
		if s.drop {
			continue
		}
		if h := p.timings[name]; h != nil {
			ch <- h
			continue
		}
		c, ok := p.counters.Load(name)
		if !ok {
			continue
		}
		var lv []string
		for _, k := range s.keys {
			lv = append(lv, s.labels[k])
		}
		k := key{s.name, strings.Join(lv, "\xff")}
		if _, seen := sums[k]; !seen {
			keys = append(keys, k)
			descs = append(descs, s)
		}
		sums[k] += float64(c.(*Counter).n.Load())
	}
	p.mu.Unlock()
	for i, k := range keys {
		s := descs[i]
		d := prometheus.NewDesc(s.name, "envoyproxy/ratelimit's statistic, as its default Prometheus mapping names it.", nil, s.labels)
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, sums[k])
	}
}

package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/keys"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/protocol"
	"github.com/sluicehq/sluice/server/internal/statsd"
)

// Statsd sends the server's statistics as envoyproxy/ratelimit does, to
// a statsd over TCP or a DogStatsD over UDP, under its names:
//
//	ratelimit.service.rate_limit.<domain>.<path>.{total_hits,over_limit,near_limit,within_limit,shadow_mode,over_limit_with_local_cache}
//	ratelimit.service.rate_limit.<domain>.domain_not_found
//	ratelimit.service.call.should_rate_limit.{redis_error,service_error}
//	ratelimit.service.{config_load_success,config_load_error,global_shadow_mode}
//	ratelimit_server.ShouldRateLimit.{total_requests,response_time}
//
// where the path is the config's key, or key_value, at each level of the
// descriptor (config.Match.StatPath), or the request's, under
// detailed_metric, value_to_metric or a limit override. A statsd that is
// slow or gone never holds up a decision: what cannot be sent is dropped.
type Statsd struct {
	// Addr is the statsd's host:port. Required.
	Addr string
	// Dog sends DogStatsD over UDP, with Tags as "|#k:v"; the default is
	// statsd over TCP, Tags appended to each name as ".__k=v".
	Dog bool
	// Tags are added to every statistic, sorted by name:
	// envoyproxy/ratelimit's EXTRA_TAGS.
	Tags []StatsdTag
	// FlushInterval is how often the counts are sent. The default is 10s.
	FlushInterval time.Duration
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit. The default is 0.8; it must be in (0, 1].
	NearLimitRatio float64
	// Mogrifiers rename and tag the statistics for DogStatsD (Dog only),
	// as envoyproxy/ratelimit's USE_DOG_STATSD_MOGRIFIERS: a name takes
	// the first whose pattern matches it. The default renames nothing.
	Mogrifiers []StatsdMogrifier
	// Envoy sends, beside the rate-limit statistics, what else
	// envoyproxy/ratelimit sends: the Go runtime's (goRuntimeStats) and
	// the Redis pools' (Settings.StatsPools), read once a flush; and
	// times response_time in whole milliseconds, rounded down, as it
	// does. The default keeps response_time's fractions and sends no
	// runtime or pool statistics, which sluice's own Prometheus series
	// carry.
	Envoy bool
}

// A StatsdMogrifier renames the statistics whose names Pattern matches,
// and tags them: one of envoyproxy/ratelimit's DogStatsD mogrifiers
// (DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS).
type StatsdMogrifier struct {
	// Pattern is a regular expression in Go's syntax, matched anywhere
	// in a statistic's name. Required.
	Pattern string
	// Name is the new name, in which $N stands for the pattern's Nth
	// submatch ($0 the whole match); a $N past the pattern's groups is
	// left as written. Required.
	Name string
	// Tags are added after Statsd.Tags; $N in a value as in Name. Each
	// needs a name and a value.
	Tags []StatsdTag
}

// EnvoyPrometheus shows envoyproxy/ratelimit's statistics (those Statsd
// sends) on the Prometheus endpoint, beside sluice's own series, under
// the names and labels envoyproxy/ratelimit's default statsd_exporter
// mapping gives them: for instance
//
//	ratelimit_service_rate_limit_total_hits{domain,key1}      (a one-level descriptor)
//	ratelimit_service_rate_limit_total_hits{domain,key1,key2} (two levels or more, the deeper summed)
//	ratelimit_service_response_time_seconds{grpc_method}
//
// A name the mapping does not take (domain_not_found, global_shadow_mode)
// shows as itself with its dots made "_", without
// labels; a series whose name already shows with other labels is left
// out, as statsd_exporter leaves it.
type EnvoyPrometheus struct {
	// NearLimitRatio is as Statsd's. The default is 0.8.
	NearLimitRatio float64
	// ResponseTimeMillis observes response_time in milliseconds, as
	// envoyproxy/ratelimit's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS;
	// the default is seconds.
	ResponseTimeMillis bool
	// Mapper, when not empty, is a statsd_exporter mapping (YAML) that
	// names the series in place of the default mapping, as
	// envoyproxy/ratelimit's PROMETHEUS_MAPPER_YAML: read by
	// statsd_exporter's own mapper, with its globs, regular expressions,
	// labels, drop action, scale, help and timer types (histogram or, its
	// default, summary). A series' ttl is not honoured: the names are
	// bounded (maxStatNames), so that none is dropped for its age. A
	// mapping statsd_exporter refuses makes New fail with its error.
	Mapper string
	// Envoy is as Statsd's: the Go runtime's and the Redis pools'
	// statistics, read once a scrape, and response_time in whole
	// milliseconds.
	Envoy bool
}

// CheckEnvoyMapper reports what New would refuse in yaml as
// EnvoyPrometheus.Mapper: nil, or statsd_exporter's error, so that a
// command can name the file it read.
func CheckEnvoyMapper(yaml string) error {
	_, err := statsd.NewPromMapped(false, yaml)
	return err
}

// A StatsdTag is a name and value that Statsd adds to every statistic.
type StatsdTag struct{ Key, Value string }

// maxStatNames bounds the names a request's values make (detailed_metric,
// value_to_metric, limit overrides, unknown domains), as MaxLabelValues
// bounds the Prometheus series: past it, a limit's hits count under its
// config path, and what has no config path is dropped.
const maxStatNames = 1000

// maxStatPath bounds, in bytes, a statistic's path made of a request's
// values, as maxStatNames bounds their number: a client's value of many
// KiB would otherwise be kept in each of the path's counters, and sent at
// every flush or scrape.
const maxStatPath = 256

// boundPath returns path, or past maxStatPath bytes the start of it and
// the digest of the whole: names stay distinct and bounded.
func boundPath(path string) string {
	if len(path) <= maxStatPath {
		return path
	}
	d := keys.Digest(path)[1:] // without its '#', which statsd names do not hold
	return strings.ToValidUTF8(path[:maxStatPath-len(d)-1], "") + "_" + d
}

// Statistic names, as envoyproxy/ratelimit's.
const (
	statRateLimit   = "ratelimit.service.rate_limit."
	statService     = "ratelimit.service."
	statCall        = "ratelimit.service.call.should_rate_limit."
	statGRPC        = "ratelimit_server.ShouldRateLimit."
	statTotalHits   = ".total_hits"
	statOverLimit   = ".over_limit"
	statNearLimit   = ".near_limit"
	statWithinLimit = ".within_limit"
	statShadowMode  = ".shadow_mode"
	statLocalCache  = ".over_limit_with_local_cache"
)

// stats are the server's statsd statistics, nil when Settings.Statsd is.
type stats struct {
	sink      statSink
	nearRatio float64
	// wholeMs times response_time in whole milliseconds, rounded down.
	wholeMs bool
	requests, redisErr, serviceErr,
	loadOK, loadErr, globalShadow *statsd.Counter
	// byPath are the limits' counters by name prefix; named counts those
	// a request's values made, against maxStatNames; domains are the
	// domain_not_found counters, by domain.
	byPath  sync.Map // string -> *limitStats
	domains sync.Map // string -> *statsd.Counter
	named   atomic.Int64
}

// statSink is where the statistics go: a statsd.Sink sends them, a
// statsd.Prom shows them on the Prometheus endpoint.
type statSink interface {
	Counter(name string) *statsd.Counter
	Gauge(name string) *statsd.Gauge
	Timing(name string, d time.Duration)
	// Generate has f called once a flush (or scrape), before the values
	// are read.
	Generate(f func())
	Run(ctx context.Context)
}

// limitStats are the counters of one statistics path.
type limitStats struct {
	total, over, near, within, shadow, local *statsd.Counter
}

func newStats(c *Statsd, pools []StatsPool) (*stats, error) {
	tags := make([]statsd.Tag, len(c.Tags))
	for i, t := range c.Tags {
		tags[i] = statsd.Tag{Key: t.Key, Value: t.Value}
	}
	mogs := make([]statsd.Mogrifier, len(c.Mogrifiers))
	for i, m := range c.Mogrifiers {
		if m.Pattern == "" {
			return nil, fmt.Errorf("Statsd.Mogrifiers[%d]: no pattern", i)
		}
		re, err := regexp.Compile(m.Pattern)
		if err != nil {
			return nil, fmt.Errorf("Statsd.Mogrifiers[%d]: pattern: %w", i, err)
		}
		mogs[i] = statsd.Mogrifier{Pattern: re, Name: m.Name}
		for _, t := range m.Tags {
			mogs[i].Tags = append(mogs[i].Tags, statsd.Tag{Key: t.Key, Value: t.Value})
		}
	}
	sink, err := statsd.New(statsd.Config{Addr: c.Addr, Dog: c.Dog, Tags: tags, FlushInterval: c.FlushInterval, Mogrifiers: mogs})
	if err != nil {
		return nil, err
	}
	return newStatsOn(sink, c.NearLimitRatio, c.Envoy, pools), nil
}

// newStatsOn returns the statistics kept in sink; envoy adds the Go
// runtime's, the pools' and whole-millisecond timings (Statsd.Envoy).
func newStatsOn(sink statSink, nearRatio float64, envoy bool, pools []StatsPool) *stats {
	if envoy {
		goStats, poolStats := goRuntimeStats(sink), poolStats(sink, pools)
		sink.Generate(func() {
			goStats()
			poolStats()
		})
	}
	return &stats{
		sink:         sink,
		nearRatio:    nearRatio,
		wholeMs:      envoy,
		requests:     sink.Counter(statGRPC + "total_requests"),
		redisErr:     sink.Counter(statCall + "redis_error"),
		serviceErr:   sink.Counter(statCall + "service_error"),
		loadOK:       sink.Counter(statService + "config_load_success"),
		loadErr:      sink.Counter(statService + "config_load_error"),
		globalShadow: sink.Counter(statService + "global_shadow_mode"),
	}
}

// run sends the statistics until ctx ends.
func (st *stats) run(ctx context.Context) {
	if st != nil {
		st.sink.Run(ctx)
	}
}

// configLoaded counts a config load, failed if err is not nil.
func (st *stats) configLoaded(err error) {
	switch {
	case st == nil:
	case err != nil:
		st.loadErr.Add(1)
	default:
		st.loadOK.Add(1)
	}
}

// notFound returns the domain_not_found counter of domain, a request's
// value (bounded by boundPath): nil past maxStatNames.
func (st *stats) notFound(domain string) *statsd.Counter {
	domain = boundPath(domain)
	if c, ok := st.domains.Load(domain); ok {
		return c.(*statsd.Counter)
	}
	if !st.admit() {
		return nil
	}
	c, loaded := st.domains.LoadOrStore(domain, st.sink.Counter(statRateLimit+domain+".domain_not_found"))
	if loaded {
		st.named.Add(-1)
	}
	return c.(*statsd.Counter)
}

// admit takes one of the maxStatNames names a request's values may make,
// if one is left.
func (st *stats) admit() bool {
	if st.named.Add(1) > maxStatNames {
		st.named.Add(-1)
		return false
	}
	return true
}

// path returns the counters of path, made on first use; bounded says the
// path comes from a request's values, is cut by boundPath, and is made
// only while there are fewer than maxStatNames such: nil past them.
func (st *stats) path(path string, bounded bool) *limitStats {
	if bounded {
		path = boundPath(path)
	}
	if ls, ok := st.byPath.Load(path); ok {
		return ls.(*limitStats)
	}
	if bounded && !st.admit() {
		return nil
	}
	p := statRateLimit + path
	ls, loaded := st.byPath.LoadOrStore(path, &limitStats{
		total:  st.sink.Counter(p + statTotalHits),
		over:   st.sink.Counter(p + statOverLimit),
		near:   st.sink.Counter(p + statNearLimit),
		within: st.sink.Counter(p + statWithinLimit),
		shadow: st.sink.Counter(p + statShadowMode),
		local:  st.sink.Counter(p + statLocalCache),
	})
	if loaded && bounded {
		st.named.Add(-1)
	}
	return ls.(*limitStats)
}

// decided counts one request's outcome, or the error that refused it.
func (st *stats) decided(e protocol.Endpoint, req *decide.Request, out *decide.Outcome, err error, took time.Duration, globalShadow bool) {
	if st == nil {
		return
	}
	if e == protocol.GRPC {
		// As envoyproxy/ratelimit's gRPC interceptor counts: its
		// HTTP endpoint is not counted here.
		st.requests.Add(1)
		if st.wholeMs {
			// As its interceptor times: Duration.Milliseconds.
			took = took.Truncate(time.Millisecond)
		}
		st.sink.Timing(statGRPC+"response_time", took)
	}
	if err != nil {
		var bad *decide.BadRequest
		if errors.As(err, &bad) {
			st.serviceErr.Add(1)
		}
		return
	}
	if out.UnknownDomain {
		if c := st.notFound(req.Domain); c != nil {
			c.Add(1)
		}
		return
	}
	if out.StoreErr != nil {
		st.redisErr.Add(1)
	}
	overEnforced := false
	for j := range out.Checks {
		c, d := &out.Checks[j], &out.Decisions[j]
		if c.Hits <= 0 {
			continue
		}
		ls := st.limitPath(req, out, c)
		if ls == nil {
			continue
		}
		st.count(ls, c, d)
		if !d.Allowed && !c.Limit.Declared.Shadow {
			overEnforced = true
		}
	}
	if globalShadow && overEnforced {
		st.globalShadow.Add(1)
	}
}

// limitPath returns the counters a check counts under: its config path,
// or the request's under detailed_metric, value_to_metric or an override.
func (st *stats) limitPath(req *decide.Request, out *decide.Outcome, c *decide.Check) *limitStats {
	switch {
	case c.Detailed || c.StatPath == "":
		if ls := st.path(requestPath(req, out, c.Desc), true); ls != nil || c.StatPath == "" {
			return ls
		}
	case c.Label != "":
		if ls := st.path(req.Domain+"."+labelPath(c.Label), true); ls != nil {
			return ls
		}
	}
	return st.path(c.StatPath, false)
}

// requestPath names descriptor i of req as envoyproxy/ratelimit names a
// detailed_metric or a limit override: the domain and each entry's
// key_value, a secret value as its digest.
func requestPath(req *decide.Request, out *decide.Outcome, i int) string {
	var b strings.Builder
	b.WriteString(req.Domain)
	secret := out.Statuses[i].Secret
	for k, e := range req.Descs[i].Entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value == "" {
			continue
		}
		b.WriteByte('_')
		if k < 64 && secret&(1<<k) != 0 {
			b.WriteString(config.SecretLabel(e.Value))
		} else {
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// labelPath turns a config.Match.MetricLabel ("route=/v1|user") into a
// statistics path ("route_/v1.user").
func labelPath(label string) string { return labelPathReplacer.Replace(label) }

// labelPathReplacer is labelPath's, made once rather than at each check
// that counts under a label.
var labelPathReplacer = strings.NewReplacer("=", "_", "|", ".")

// count counts one check's hits as envoyproxy/ratelimit does: every hit
// in total_hits; those past the limit in over_limit, the others in
// within_limit; those past floor(limit × NearLimitRatio) but not over in
// near_limit; for a limit in shadow mode, the hits of a denial in
// shadow_mode; and the hits of a denial the store answered from its deny
// cache (sluice.Decision.Cached) all in over_limit and in
// over_limit_with_local_cache, as its local cache's are.
func (st *stats) count(ls *limitStats, c *decide.Check, d *sluice.Decision) {
	hits, limit := c.Hits, d.Limit
	if d.Cached && !d.Allowed {
		ls.total.Add(uint64(hits))
		ls.over.Add(uint64(hits))
		ls.local.Add(uint64(hits))
		if c.Limit.Declared.Shadow {
			ls.shadow.Add(uint64(hits))
		}
		return
	}
	near := int64(math.Floor(float64(limit) * st.nearRatio))
	// The count before and after this request's hits: a denial charged
	// nothing, and left Remaining as it was.
	after := limit - d.Remaining
	if !d.Allowed {
		after += hits
	}
	before := after - hits
	ls.total.Add(uint64(hits))
	if after > limit {
		if before >= limit {
			ls.over.Add(uint64(hits))
		} else {
			ls.over.Add(uint64(after - limit))
			ls.near.Add(uint64(limit - max(near, before)))
		}
		if c.Limit.Declared.Shadow {
			ls.shadow.Add(uint64(hits))
		}
		return
	}
	if after > near {
		ls.near.Add(uint64(min(hits, after-near)))
	}
	ls.within.Add(uint64(hits))
}

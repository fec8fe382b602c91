package main

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/server"
)

// statsdFlags are the flags that send envoyproxy/ratelimit's statistics
// to a statsd (server.Statsd).
type statsdFlags struct {
	addr      string // host:port; "" sends none
	dog       bool   // DogStatsD over UDP rather than statsd over TCP
	tags      string // k:v,k2:v2, as EXTRA_TAGS
	flush     time.Duration
	nearRatio float64
	prom      bool   // envoyproxy/ratelimit's statistics on the metrics endpoint instead
	promMs    bool   // their response time in milliseconds
	mapper    string // a statsd_exporter mapping file for them, as PROMETHEUS_MAPPER_YAML
	mogs      mogrifierFlag
	envoy     bool // the Go runtime's statistics too, and whole-millisecond timings
}

// promSettings are the server.EnvoyPrometheus the flags name, nil for
// none.
func (f statsdFlags) promSettings() (*server.EnvoyPrometheus, error) {
	switch {
	case !f.prom && f.promMs:
		return nil, fmt.Errorf("-envoy-metrics-ms needs -envoy-metrics")
	case !f.prom && f.mapper != "":
		return nil, fmt.Errorf("-envoy-metrics-mapper needs -envoy-metrics")
	case !f.prom:
		return nil, nil
	case f.addr != "":
		return nil, fmt.Errorf("-envoy-metrics and -statsd %q: set one, not both", f.addr)
	}
	return &server.EnvoyPrometheus{NearLimitRatio: f.nearRatio, ResponseTimeMillis: f.promMs, Envoy: f.envoy}, nil
}

// readMapper reads the -envoy-metrics-mapper file, and refuses a mapping
// statsd_exporter's mapper refuses, with its error: "" for none.
func (f statsdFlags) readMapper() (string, error) {
	if f.mapper == "" {
		return "", nil
	}
	b, err := os.ReadFile(f.mapper)
	if err != nil {
		return "", fmt.Errorf("-envoy-metrics-mapper: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		// An empty mapping would map nothing, silently: as likely a file
		// not yet written as a wish.
		return "", fmt.Errorf("-envoy-metrics-mapper %s: the file is empty", f.mapper)
	}
	if err := server.CheckEnvoyMapper(string(b)); err != nil {
		return "", fmt.Errorf("-envoy-metrics-mapper %s: %v", f.mapper, err)
	}
	return string(b), nil
}

// settings are the server.Statsd the flags name, nil for none.
func (f statsdFlags) settings() (*server.Statsd, error) {
	switch {
	case f.flush <= 0:
		return nil, fmt.Errorf("-statsd-flush %v must be positive", f.flush)
	case !(f.nearRatio > 0 && f.nearRatio <= 1):
		return nil, fmt.Errorf("-near-limit-ratio %v: want a number in (0, 1]", f.nearRatio)
	case f.addr == "" && len(f.mogs) > 0:
		return nil, fmt.Errorf("-statsd-mogrifier needs -statsd and -statsd-dog")
	case f.addr == "":
		return nil, nil
	case len(f.mogs) > 0 && !f.dog:
		return nil, fmt.Errorf("-statsd-mogrifier needs -statsd-dog: mogrifiers rename DogStatsD's statistics only")
	}
	if _, _, err := net.SplitHostPort(f.addr); err != nil {
		return nil, fmt.Errorf("-statsd %q: want HOST:PORT", f.addr)
	}
	tags, err := parseTags(f.tags)
	if err != nil {
		return nil, fmt.Errorf("-statsd-tags: %v", err)
	}
	return &server.Statsd{Addr: f.addr, Dog: f.dog, Tags: tags, FlushInterval: f.flush, NearLimitRatio: f.nearRatio, Mogrifiers: f.mogs, Envoy: f.envoy}, nil
}

// mogrifierFlag is the repeatable -statsd-mogrifier PATTERN|NAME|TAGS:
// one of envoyproxy/ratelimit's DogStatsD mogrifiers each.
type mogrifierFlag []server.StatsdMogrifier

func (f *mogrifierFlag) String() string {
	parts := make([]string, len(*f))
	for i, m := range *f {
		parts[i] = strconv.Quote(formatMogrifier(m))
	}
	return strings.Join(parts, " ")
}

func (f *mogrifierFlag) Set(s string) error {
	m, err := parseMogrifier(s)
	if err != nil {
		return err
	}
	*f = append(*f, m)
	return nil
}

// formatMogrifier writes m as parseMogrifier reads it.
func formatMogrifier(m server.StatsdMogrifier) string {
	tags := make([]string, len(m.Tags))
	for i, t := range m.Tags {
		tags[i] = t.Key + ":" + t.Value
	}
	return m.Pattern + "|" + m.Name + "|" + strings.Join(tags, ",")
}

// parseMogrifier reads PATTERN|NAME|TAGS. A name or a tag cannot hold a
// "|", which ends it in the line protocol, so the last two split the
// three and the pattern may hold any.
func parseMogrifier(s string) (server.StatsdMogrifier, error) {
	var m server.StatsdMogrifier
	i := strings.LastIndexByte(s, '|')
	j := -1
	if i > 0 {
		j = strings.LastIndexByte(s[:i], '|')
	}
	if j < 0 {
		return m, fmt.Errorf("%q: want PATTERN|NAME|TAGS, TAGS name:value pairs separated by commas, or empty", s)
	}
	m.Pattern, m.Name = s[:j], s[j+1:i]
	if err := checkMogrifierPattern(m.Pattern); err != nil {
		return m, fmt.Errorf("%q: %v", s, err)
	}
	if m.Name == "" {
		return m, fmt.Errorf("%q: no NAME", s)
	}
	tags, err := parseMogrifierTags(s[i+1:])
	if err != nil {
		return m, fmt.Errorf("%q: %v", s, err)
	}
	m.Tags = tags
	return m, nil
}

// checkMogrifierPattern refuses an empty pattern or one Go's regexp does
// not read, as envoyproxy/ratelimit does at start.
func checkMogrifierPattern(p string) error {
	if p == "" {
		return fmt.Errorf("no PATTERN")
	}
	if _, err := regexp.Compile(p); err != nil {
		return fmt.Errorf("PATTERN %q: %v", p, err)
	}
	return nil
}

// parseMogrifierTags reads a mogrifier's tags as envoyproxy/ratelimit
// reads DOG_STATSD_MOGRIFIER_<NAME>_TAGS: name:value pairs separated by
// commas, each with a name and a value; empty for none.
func parseMogrifierTags(s string) ([]server.StatsdTag, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tags []server.StatsdTag
	for kv := range strings.SplitSeq(s, ",") {
		parts := strings.Split(kv, ":")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("tag %q: want name:value, both not empty, pairs separated by commas", kv)
		}
		tags = append(tags, server.StatsdTag{Key: parts[0], Value: parts[1]})
	}
	return tags, nil
}

// parseTags reads tags as envoyproxy/ratelimit's EXTRA_TAGS gives them:
// name:value pairs separated by commas.
func parseTags(s string) ([]server.StatsdTag, error) {
	if s == "" {
		return nil, nil
	}
	var tags []server.StatsdTag
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want name:value pairs separated by commas", kv)
		}
		tags = append(tags, server.StatsdTag{Key: k, Value: v})
	}
	return tags, nil
}

package main

import (
	"fmt"
	"net"
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
	prom      bool // envoyproxy/ratelimit's statistics on the metrics endpoint instead
	promMs    bool // their response time in milliseconds
}

// promSettings are the server.EnvoyPrometheus the flags name, nil for
// none.
func (f statsdFlags) promSettings() (*server.EnvoyPrometheus, error) {
	switch {
	case !f.prom && f.promMs:
		return nil, fmt.Errorf("-envoy-metrics-ms needs -envoy-metrics")
	case !f.prom:
		return nil, nil
	case f.addr != "":
		return nil, fmt.Errorf("-envoy-metrics and -statsd %q: set one, not both", f.addr)
	}
	return &server.EnvoyPrometheus{NearLimitRatio: f.nearRatio, ResponseTimeMillis: f.promMs}, nil
}

// settings are the server.Statsd the flags name, nil for none.
func (f statsdFlags) settings() (*server.Statsd, error) {
	switch {
	case f.flush <= 0:
		return nil, fmt.Errorf("-statsd-flush %v must be positive", f.flush)
	case !(f.nearRatio > 0 && f.nearRatio <= 1):
		return nil, fmt.Errorf("-near-limit-ratio %v: want a number in (0, 1]", f.nearRatio)
	case f.addr == "":
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(f.addr); err != nil {
		return nil, fmt.Errorf("-statsd %q: want HOST:PORT", f.addr)
	}
	tags, err := parseTags(f.tags)
	if err != nil {
		return nil, fmt.Errorf("-statsd-tags: %v", err)
	}
	return &server.Statsd{Addr: f.addr, Dog: f.dog, Tags: tags, FlushInterval: f.flush, NearLimitRatio: f.nearRatio}, nil
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

package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/server/console"
	"github.com/sluicehq/sluice/server/internal/protocol"
)

// RLQS configures Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService), which the
// server serves on the gRPC port beside RLS. It is experimental, as the
// protocol is in Envoy; see docs/rlqs.md.
//
// Each stream is one client, and a holder of the authority's shares:
// for each bucket it reports, the server sends a token_bucket assignment
// sized from the bucket's limits and the stream's share of the demand
// reported (lease.Allocate), renewed at the limit's lease interval, with a
// time to live of its lease TTL.
//
// The streams' shares are kept by Settings.Authority, which the leased
// rules use too (under keys of their own): replicas that share one Redis
// share each limit among all their streams. Without one, each server
// divides its limits among its own streams, with a memory authority.
type RLQS struct {
	// AbandonAfter is how long a bucket may go without a usage report
	// before the stream is told to abandon it (AbandonAction) and its
	// shares go back; and how long a stream may hold no bucket and send
	// nothing before it is ended, its place given back. The default is
	// DefaultRLQSAbandonAfter.
	AbandonAfter time.Duration
	// MaxStreams bounds the RLQS streams open at once; a stream past it
	// is refused with RESOURCE_EXHAUSTED. The streams count against
	// GRPCMaxStreams too. The default is DefaultRLQSMaxStreams.
	// MaxStreamsPerPeer bounds those of one peer (an IP address, IPv6
	// grouped by /64; a Unix socket's peers are not bounded apart), so
	// that one client cannot take every place: Envoy opens a stream per
	// rate-limit-quota filter config. The default is
	// DefaultRLQSMaxStreamsPerPeer.
	MaxStreams        int
	MaxStreamsPerPeer int
	// MaxBuckets bounds the buckets one stream may subscribe to,
	// MaxTotalBuckets those of all the streams together (each holds its
	// bucket id, up to 4 KiB), and MaxBucketsPerPeer those of one peer's
	// streams, so that one client cannot take every place: a bucket past
	// any gets no assignment (the client's no_assignment_behavior),
	// counted. The defaults are DefaultRLQSMaxBuckets,
	// DefaultRLQSMaxTotalBuckets and DefaultRLQSMaxBucketsPerPeer.
	MaxBuckets        int
	MaxTotalBuckets   int
	MaxBucketsPerPeer int
}

// Defaults of RLQS.
const (
	DefaultRLQSAbandonAfter = 5 * time.Minute
	DefaultRLQSMaxStreams   = 1024
	// DefaultRLQSMaxStreamsPerPeer leaves a peer a sixteenth of the
	// default MaxStreams.
	DefaultRLQSMaxStreamsPerPeer = 64
	DefaultRLQSMaxBuckets        = 1024
	// DefaultRLQSMaxTotalBuckets keeps the buckets' ids within about
	// 256 MiB at their largest, a few MiB as Envoy names buckets.
	DefaultRLQSMaxTotalBuckets = 1 << 16
	// DefaultRLQSMaxBucketsPerPeer leaves a peer a sixteenth of the
	// default MaxTotalBuckets.
	DefaultRLQSMaxBucketsPerPeer = DefaultRLQSMaxTotalBuckets / 16
)

func (q RLQS) withDefaults() (RLQS, error) {
	switch {
	case q.AbandonAfter < 0:
		return q, settingsError("RLQS.AbandonAfter %v must not be negative", q.AbandonAfter)
	case q.AbandonAfter == 0:
		q.AbandonAfter = DefaultRLQSAbandonAfter
	}
	for _, n := range []struct {
		name string
		v    *int
		def  int
	}{{"RLQS.MaxStreams", &q.MaxStreams, DefaultRLQSMaxStreams}, {"RLQS.MaxStreamsPerPeer", &q.MaxStreamsPerPeer, DefaultRLQSMaxStreamsPerPeer},
		{"RLQS.MaxBuckets", &q.MaxBuckets, DefaultRLQSMaxBuckets},
		{"RLQS.MaxTotalBuckets", &q.MaxTotalBuckets, DefaultRLQSMaxTotalBuckets},
		{"RLQS.MaxBucketsPerPeer", &q.MaxBucketsPerPeer, DefaultRLQSMaxBucketsPerPeer}} {
		switch {
		case *n.v < 0 || *n.v > MaxGRPCStreams:
			return q, settingsError("%s %d must be between 1 and %d", n.name, *n.v, MaxGRPCStreams)
		case *n.v == 0:
			*n.v = n.def
		}
	}
	return q, nil
}

// rlqsSettings are the adapter's settings of s's RLQS, counting its
// outcomes in sluice_rlqs_buckets_total.
func (s *Server) rlqsSettings() protocol.RLQSSettings {
	buckets := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rlqs_buckets_total",
		Help: "RLQS buckets by outcome: subscriptions assigned a token bucket (assigned), ALLOW_ALL for an unlimited limit (allow_all) or one in shadow mode (shadow), " +
			"DENY_ALL for a limit of 0 (deny_all), given no assignment for want of a limit (unknown) or past a stream's bound on buckets (refused); and renewals the authority failed (error).",
	}, []string{"result"})
	for _, r := range []string{protocol.RLQSAssigned, protocol.RLQSAllowAll, protocol.RLQSDenyAll, protocol.RLQSShadow,
		protocol.RLQSUnknown, protocol.RLQSRefused, protocol.RLQSError} {
		buckets.WithLabelValues(r)
	}
	s.m.reg.MustRegister(buckets)
	auth := s.cfg.Authority
	if auth == nil {
		auth = lease.NewMemoryAuthority()
	}
	return protocol.RLQSSettings{
		Authority:         auth,
		AbandonAfter:      s.cfg.RLQS.AbandonAfter,
		MaxStreams:        s.cfg.RLQS.MaxStreams,
		MaxStreamsPerPeer: s.cfg.RLQS.MaxStreamsPerPeer,
		MaxBuckets:        s.cfg.RLQS.MaxBuckets,
		MaxTotalBuckets:   s.cfg.RLQS.MaxTotalBuckets,
		MaxBucketsPerPeer: s.cfg.RLQS.MaxBucketsPerPeer,
		Now:               s.cfg.Clock.Now,
		Count:             func(result string) { buckets.WithLabelValues(result).Inc() },
	}
}

// rlqsAssignments are the RLQS streams' assignments, for the console.
func (s *Server) rlqsAssignments() []console.RLQSAssignment {
	as := s.adapters.RLQSAssignments()
	out := make([]console.RLQSAssignment, len(as))
	for i, a := range as {
		out[i] = console.RLQSAssignment{Stream: a.Stream, Domain: a.Domain, Bucket: a.Bucket, Result: a.Result,
			Share: a.Share, Burst: a.Burst, PeriodSeconds: a.Period.Seconds(), Demand: a.Demand,
			Holders: a.Holders, TotalDemand: a.TotalDemand, TTLSeconds: a.TTL.Seconds(), Renewed: a.Renewed}
	}
	return out
}

// Package console is the admin console of the service: its listener's API
// (the recent decisions, the config served, the key lookup, the
// playground's simulator) and the page that shows them, from ui/.
//
// What belongs here is what a person looking at one running service reads
// of it. A new panel of the console is a handler in this package and its
// part of ui/app.js; what it shows comes from the Service package server
// gives it, never from the decision path: the statistics are sampled from
// the metrics the decisions already count in, and a store's own counts
// are read through the small interfaces the stores implement (see
// StatsStore).
//
// Package server makes the console of each Server: a program serves it
// with Server.ServeAdmin or Server.AdminHandler.
package console

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// A Service is the running service the console shows, as package server
// gives it. Every field is set.
type Service struct {
	Clock  sluice.Clock
	Shadow bool     // every rule in shadow mode
	Paths  []string // the config files served; none for a config given in code
	Policy *config.Config
	// XDS, for a config pushed over xDS, is the control plane's address
	// and the version of the push in force ("" before the first).
	XDS       func() (addr, version string)
	StoreName string
	Store     sluice.Store // for its own counts: see StatsStore
	Log       *slog.Logger
	// ReadTimeout, IdleTimeout and MaxHeaderBytes bound the admin
	// listener's connections as the service's own.
	ReadTimeout, IdleTimeout time.Duration
	MaxHeaderBytes           int
	// Current is the config being served, its rules prepared (by
	// config.Match.ID), and when it loaded.
	Current func() (cfg *config.Config, limits []*decide.Limit, loaded time.Time)
	// Take decides checks as the service does (decide.Decider.Take); the
	// lookup's are peeks, which charge nothing.
	Take func(ctx context.Context, checks []decide.Check, ds []sluice.Decision) (sluice.Result, error)
	// DecideError answers a request Take refused, as the service does.
	DecideError func(ctx context.Context, w http.ResponseWriter, err error)
	// Requests, Decisions, Duration and StoreErrors are the service's
	// collectors of sluice_requests_total, sluice_decisions_total,
	// sluice_decision_duration_seconds and sluice_store_errors_total,
	// which the statistics sample.
	Requests    *prometheus.CounterVec
	Decisions   *prometheus.CounterVec
	Duration    *prometheus.HistogramVec
	StoreErrors prometheus.Counter
	// Leases, for a service that decides leased rules, are its leases
	// (GET /v1/leases); nil for one without a lease authority.
	Leases *Leases
	// RLQS lists the assignments of the RLQS streams open.
	RLQS func() []RLQSAssignment
}

// StatsStore is a store that counts what it does behind a circuit breaker
// (the Redis store, and a Pair of them): its counts by name, BreakerOpens
// among them, and the breaker's state, "closed", "open" or "half-open".
// Plain types, so that neither package need import the other.
type StatsStore interface {
	Counters() (counts map[string]int64, breaker string)
}

// A Console is the admin listener's state: the statistics' ring, the last
// reload, the simulations running. It is safe for concurrent use.
type Console struct {
	svc     Service
	started time.Time
	stats   statsRing
	reload  reloadRecord // policyview.go

	simOnce sync.Once
	sims    chan struct{} // a token per simulation running
}

// New returns the console of svc.
func New(svc Service) *Console {
	return &Console{svc: svc, started: svc.Clock.Now()}
}

// Reloaded notes a reload at now that failed with err, or succeeded, for
// GET /v1/policy.
func (c *Console) Reloaded(now time.Time, err error) { c.reload.record(now, err) }

// Sample records what the decisions added since the last sample as the
// second now falls in; Serve samples every second. The first sample only
// primes.
func (c *Console) Sample(now time.Time) { c.stats.sample(&c.svc, now) }

// simSlots is the semaphore of POST /v1/simulate.
func (c *Console) simSlots() chan struct{} {
	c.simOnce.Do(func() { c.sims = make(chan struct{}, simulateConcurrency) })
	return c.sims
}

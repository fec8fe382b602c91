package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/server/console"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// AdminOptions configure the admin listener (ServeAdmin, AdminHandler).
// The zero value serves only GET /v1/stats, GET /v1/policy, GET /v1/leases
// and GET /v1/rlqs.
type AdminOptions = console.Options

// Bounds of POST /v1/simulate, so that no simulation costs more than a
// fixed amount of time and memory: see package console.
const (
	MaxSimArrivals   = console.MaxSimArrivals
	MaxSimAlgorithms = console.MaxSimAlgorithms
	MaxSimStateBytes = console.MaxSimStateBytes
)

// AdminHandler returns the admin API and, with opts.UI, the console
// (package console):
//
//   - GET /v1/stats: the decisions of the last minutes, per second, per
//     domain and rule, as JSON (see ServeAdmin);
//   - GET /v1/policy: the config being served, and the last reload;
//   - GET /v1/leases: the leases this process holds (Settings.Authority),
//     each key's holders at the authority; keys shown with Lookup, else
//     as a digest;
//   - GET /v1/rlqs: the RLQS streams' assignments, per bucket and stream;
//   - POST /v1/simulate (with UI): replays arrivals through the exact
//     algorithms (the playground);
//   - GET /v1/algorithms (with UI): the algorithms it replays, from
//     sluice's registry;
//   - POST /v1/lookup (with Lookup): a key's state, charging nothing;
//   - GET /ui/ (with UI): the console;
//   - GET /debug/pprof/ (with Profile): the Go profiles.
//
// The statistics are sampled only while ServeAdmin runs.
func (s *Server) AdminHandler(opts AdminOptions) http.Handler { return s.admin.Handler(opts) }

// ServeAdmin serves the admin handler on ln, and samples the statistics
// GET /v1/stats reports, until ctx ends; then it lets the requests in
// flight finish, for a few seconds at most, and returns nil. It returns
// early with an error if the listener fails. ServeAdmin closes ln.
//
// The statistics are this process's own: with several replicas, each
// reports its own decisions. They hold the last five minutes, per second,
// per domain and rule: allowed, denied, and denied in shadow mode; the
// decision latency; the store's errors. No key, descriptor value or
// client address is kept.
func (s *Server) ServeAdmin(ctx context.Context, ln net.Listener, opts AdminOptions) error {
	return s.admin.Serve(ctx, ln, opts)
}

// newConsole is the console of s, which reads s only through what it is
// given here.
func (s *Server) newConsole() *console.Console {
	return console.New(console.Service{
		Clock:          s.cfg.Clock,
		Shadow:         s.cfg.Shadow,
		Paths:          s.cfg.Paths,
		Policy:         s.cfg.Policy,
		XDS:            s.xdsVersion(),
		StoreName:      s.cfg.StoreName,
		Store:          s.cfg.Store,
		Log:            s.log,
		ReadTimeout:    s.cfg.ReadTimeout,
		IdleTimeout:    s.cfg.IdleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		Current: func() (*config.Config, []*decide.Limit, time.Time) {
			snap := s.cur.Load()
			return snap.Config, snap.Rules, snap.loaded
		},
		Take: func(ctx context.Context, checks []decide.Check, ds []sluice.Decision) (sluice.Result, error) {
			return s.decider.Take(ctx, checks, ds)
		},
		DecideError: s.adapters.WriteDecideError,
		Requests:    s.m.requests,
		Decisions:   s.m.decisions,
		Duration:    s.m.duration,
		StoreErrors: s.m.storeErrors,
		Leases:      s.consoleLeases(),
		RLQS:        s.rlqsAssignments, // rlqs.go
	})
}

// consoleLeases is the console's view of the leases; nil without a lease
// authority.
func (s *Server) consoleLeases() *console.Leases {
	if s.leases == nil {
		return nil
	}
	return &console.Leases{
		Holder: s.leaseHolder(),
		Held: func() []console.HeldLease {
			held := s.leases.Leases()
			out := make([]console.HeldLease, len(held))
			for i, h := range held {
				out[i] = console.HeldLease{Rule: h.Rule, Key: h.Key, AuthorityKey: h.AuthorityKey,
					Share: h.Share, Burst: h.Burst, Demand: h.Demand, Expires: h.Expires}
			}
			return out
		},
		Holdings: func(ctx context.Context, h console.HeldLease) ([]lease.Holding, error) {
			return s.cfg.Authority.Holdings(ctx, h.AuthorityKey)
		},
	}
}

// xdsVersion is the console's view of a config pushed over xDS: the
// control plane's address and the version in force; nil without xDS.
func (s *Server) xdsVersion() func() (addr, version string) {
	if s.cfg.XDS == nil {
		return nil
	}
	return func() (string, string) { return s.cfg.XDS.Addr, s.cur.Load().version }
}

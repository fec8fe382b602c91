package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"

	"github.com/sluicehq/sluice/config"
)

// newLeaseHolder names this process to the lease authority: the host, for
// whoever reads the console, and random bytes, so that two processes of
// one host (or two containers of one name) are never taken for one
// holder, which would let them spend one share twice.
func newLeaseHolder() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r >= 0x7f {
			return -1
		}
		return r
	}, host)
	if len(host) > 64 {
		host = host[:64]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	if host == "" {
		host = "sluice"
	}
	return host + "-" + hex.EncodeToString(b)
}

// leaseHolder is this process's name to the lease authority, "" without
// one.
func (s *Server) leaseHolder() string {
	if s.leases == nil {
		return ""
	}
	return s.leases.Holder()
}

// closeLeases gives back the leases this process holds, once the
// requests are over, so that the other replicas take their quota at once
// rather than at the leases' expiry.
func (s *Server) closeLeases(ctx context.Context) {
	if s.leases == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.leases.Close(cctx); err != nil {
		s.log.WarnContext(ctx, "leases: not all given back at the shutdown; the others lapse at their TTL", "err", err)
	}
}

// noteLeases warns when c leases rules that the server decides exactly,
// having no lease authority.
func (s *Server) noteLeases(ctx context.Context, c *config.Config) {
	if s.leases != nil {
		return
	}
	var names []string
	for _, r := range c.Rules() {
		if r.Lease.Enabled {
			names = append(names, r.Name)
		}
	}
	if len(names) > 0 {
		s.log.WarnContext(ctx, "leased limits decided exactly: the server has no lease authority (Settings.Authority)", "limits", names)
	}
}

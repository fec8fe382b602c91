package server

import (
	"context"
	"time"
)

// Reload loads the config files again now, whether or not they changed,
// as SIGHUP does in the command. A config that loads takes effect at once
// for every request that starts after; requests in flight finish with the
// config they started with. One that does not load is logged and
// returned, and the last good config keeps serving. Reload of a server
// given Config.Policy instead of Paths is an error and changes nothing.
func (s *Server) Reload(ctx context.Context) error {
	if len(s.cfg.Paths) == 0 {
		return errNoPaths
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.reload(ctx, hashFiles(s.cfg.Paths))
}

// watch polls the config files' content every ReloadInterval and reloads
// when it changed, until ctx ends.
func (s *Server) watch(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.poll(ctx)
		}
	}
}

// poll reloads if the files' content differs from both the config being
// served and the last one that failed.
func (s *Server) poll(ctx context.Context) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	h := hashFiles(s.cfg.Paths)
	if h == s.cur.Load().hash || h == s.badHash {
		return
	}
	_ = s.reload(ctx, h) // logged and counted
}

// reload loads the files, whose content hashed to h, and installs the
// result if it loads. s.reloadMu is held.
func (s *Server) reload(ctx context.Context, h string) error {
	old := s.cur.Load()
	c, err := old.cfg.Reload(s.cfg.Paths...)
	if err == nil {
		err = s.checkRules(c)
	}
	if err != nil {
		s.badHash = h
		s.m.reloads.WithLabelValues("failure").Inc()
		s.log.ErrorContext(ctx, "config reload failed; the last good config keeps serving",
			"paths", s.cfg.Paths, "err", err)
		return err
	}
	s.badHash = ""
	snap := compile(c, old, s.cfg.Shadow, h, s.cfg.Clock.Now())
	s.install(snap)
	s.m.reloads.WithLabelValues("success").Inc()
	s.log.InfoContext(ctx, "config reloaded", "paths", s.cfg.Paths, "domains", c.Domains(), "rules", len(snap.rules))
	return nil
}

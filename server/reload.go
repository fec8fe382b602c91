package server

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// Reload loads the config files again now, whether or not they changed,
// as SIGHUP does in the command. A config that loads takes effect at once
// for every request that starts after; requests in flight finish with the
// config they started with. One that does not load is logged and
// returned, and the last good config keeps serving. Reload of a server
// given Settings.Policy instead of Paths is an error and changes nothing.
//
// If ctx ends before the files are read (a network file system that
// stopped answering, say), Reload returns ctx's error and changes
// nothing; the read it started is abandoned, and no other starts until it
// returns.
func (s *Server) Reload(ctx context.Context) error {
	if s.cfg.XDS != nil {
		return errXDSReload
	}
	if len(s.cfg.Paths) == 0 {
		return errNoPaths
	}
	if err := s.reloadMu.lock(ctx); err != nil {
		return err
	}
	return s.reload(ctx, true)
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
// served and the last one that failed. While a read is still in flight
// (one abandoned by a Reload whose context ended), it waits for the next
// tick rather than start another.
func (s *Server) poll(ctx context.Context) {
	if !s.reloadMu.tryLock() {
		return
	}
	_ = s.reload(ctx, false) // logged and counted
}

// reload reads the config files and installs what they hold if it loads;
// unless force, only if their content differs from both the config being
// served and the last that failed. The caller holds s.reloadMu, and
// reload releases it.
//
// The files are read on a goroutine of its own, so that a read that
// blocks holds up neither the caller nor, through it, the server's
// shutdown: when ctx ends first, reload returns ctx's error at once, and
// the read's outcome, when it comes, is dropped. The lock goes with the
// read: no other starts until it returns.
func (s *Server) reload(ctx context.Context, force bool) error {
	if err := ctx.Err(); err != nil {
		s.reloadMu.unlock()
		return err
	}
	old := s.cur.Load()
	results := make(chan readResult) // unbuffered: handed over, or dropped when ctx ends
	go func(bad string) {
		r := s.read(old, bad, force)
		select {
		case results <- r:
		case <-ctx.Done():
			s.reloadMu.unlock()
		}
	}(s.badHash)
	select {
	case r := <-results:
		defer s.reloadMu.unlock()
		return s.apply(ctx, old, r)
	case <-ctx.Done():
		s.log.WarnContext(ctx, "config reload abandoned: the config files are still being read", "paths", s.cfg.Paths)
		return ctx.Err()
	}
}

// readResult is what a read of the config files found.
type readResult struct {
	hash string // of the files' names and content
	same bool   // the content is that of the config being served or of the last that failed
	cfg  *config.Config
	// rules are cfg's rules prepared, by config.Match.ID.
	rules []*decide.Limit
	err   error
}

// read hashes the config files and, if force or they changed since old
// and since the last failure, bad, loads them. It touches nothing of s
// that a reload changes: it runs on a goroutine that may be abandoned.
func (s *Server) read(old *snapshot, bad string, force bool) readResult {
	h := s.hashFiles(s.cfg.Paths)
	if !force && (h == old.hash || h == bad) {
		return readResult{hash: h, same: true}
	}
	var c *config.Config
	var err error
	if old.hash == "" {
		// Started without its config (Settings.StartWithoutConfig): no
		// rule to keep, and the options are the Server's.
		c, err = config.Options{MergeDomains: s.cfg.MergeDomains, EnvoyKeys: s.cfg.EnvoyKeys}.Load(s.cfg.Paths...)
	} else {
		c, err = old.Config.Reload(s.cfg.Paths...) // with the options it was loaded with
	}
	var rules []*decide.Limit
	if err == nil {
		rules, err = s.prepare(c)
	}
	return readResult{hash: h, cfg: c, rules: rules, err: err}
}

// apply installs what read found, if it loaded. s.reloadMu is held.
func (s *Server) apply(ctx context.Context, old *snapshot, r readResult) error {
	if r.same {
		return nil
	}
	s.admin.Reloaded(s.cfg.Clock.Now(), r.err)
	s.st.configLoaded(r.err)
	if r.err != nil {
		s.badHash = r.hash
		s.m.reloads.WithLabelValues("failure").Inc()
		s.log.ErrorContext(ctx, "config reload failed; the last good config keeps serving",
			"paths", s.cfg.Paths, "err", r.err)
		return r.err
	}
	s.badHash = ""
	s.noteLeases(ctx, r.cfg)
	snap := newSnapshot(r.cfg, r.rules, old, r.hash, s.cfg.Clock.Now())
	s.install(snap)
	s.m.reloads.WithLabelValues("success").Inc()
	s.log.InfoContext(ctx, "config reloaded", "paths", s.cfg.Paths, "domains", r.cfg.Domains(), "rules", len(snap.Rules))
	return nil
}

// reloadLock lets one reload run at a time. Unlike a sync.Mutex, a wait
// for it ends with a context, and it may be released by another goroutine
// than the one that took it: the one that reads the files. The zero
// value is unlocked.
type reloadLock struct {
	once sync.Once
	c    chan struct{} // holds a token while locked
}

func (l *reloadLock) ch() chan struct{} {
	l.once.Do(func() { l.c = make(chan struct{}, 1) })
	return l.c
}

// lock takes the lock, or returns ctx's error if ctx ends first.
func (l *reloadLock) lock(ctx context.Context) error {
	select {
	case l.ch() <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryLock takes the lock if it is free.
func (l *reloadLock) tryLock() bool {
	select {
	case l.ch() <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *reloadLock) unlock() { <-l.ch() }

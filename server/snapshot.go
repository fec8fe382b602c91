package server

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server/internal/decide"
	"github.com/sluicehq/sluice/server/internal/protocol"
)

// snapshot is one loaded config made ready to serve. It never changes; a
// reload swaps the Server's pointer to a new one.
type snapshot struct {
	// Snapshot is what the protocol adapters decide a request against.
	protocol.Snapshot
	hash   string // of the config files' names and bytes; "" for a Policy
	loaded time.Time
	// version is the xDS version_info of the push it came from
	// (Settings.XDS); "" for files and a Policy.
	version string
}

// limitAside is what the server keeps beside each decide.Limit, as its
// Aside: the limit as RLS reports it, and its metric series.
type limitAside struct {
	// rls is the rule as the RLS adapter reports it.
	rls protocol.RLSLimit
	// counters are the rule's metric series, set on first use.
	counters atomic.Pointer[ruleCounters]
	// values are its value_to_metric series, made as descriptors come.
	values labelSeries
}

// asideOf is what the server keeps beside l.
func asideOf(l *decide.Limit) *limitAside { return l.Aside.(*limitAside) }

func (c *Settings) checkedAs() decide.CheckedAs {
	return decide.CheckedAs{Shadow: c.Shadow, Count: c.ChargePerDescriptor}
}

// prepare prepares every rule of c with the Limiter (Limiter.Prepare),
// as the server checks it (checkedAs), by config.Match.ID: an invalid
// rule, or one the store would refuse at every request (a limit outside
// the Redis store's exact range), is a config error, found when the
// config loads rather than as an error on every request. Under
// Settings.QuotaMode a domain with forward_auth is one too
// (config.Config.CheckQuotaMode).
func (s *Server) prepare(c *config.Config) ([]*decide.Limit, error) {
	if s.cfg.QuotaMode {
		if err := c.CheckQuotaMode(); err != nil {
			return nil, err
		}
	}
	lis := make([]*decide.Limit, len(c.Rules()))
	err := c.CheckRules(func(id int, r sluice.Rule) error {
		li, err := s.newLimit(r)
		lis[id] = li
		return err
	})
	if err != nil {
		return nil, err
	}
	return lis, nil
}

// newSnapshot makes cfg, its rules prepared as lis (by config.Match.ID),
// ready to serve. Rules unchanged since old keep old's Limit, and so
// their metric series.
func newSnapshot(cfg *config.Config, lis []*decide.Limit, old *snapshot, hash string, now time.Time) *snapshot {
	s := &snapshot{Snapshot: protocol.Snapshot{Config: cfg, Rules: lis}, hash: hash, loaded: now}
	// By the domain and the config's rule: equal rules are checked alike,
	// and a limit's metric series are its domain's. Two limits of a
	// domain may declare equal rules; each keeps one of old's.
	type ident struct {
		domain string
		rule   sluice.Rule
	}
	var kept map[ident][]*decide.Limit
	if old != nil {
		kept = make(map[ident][]*decide.Limit, len(old.Rules))
		for i, d := range ruleDomains(old.Config) {
			k := ident{d, old.Rules[i].Declared}
			kept[k] = append(kept[k], old.Rules[i])
		}
	}
	for i, d := range ruleDomains(cfg) {
		k := ident{d, lis[i].Declared}
		if l := kept[k]; len(l) > 0 {
			s.Rules[i], kept[k] = l[0], l[1:]
		}
	}
	// What is left of old is gone from the config: so are its
	// value_to_metric series, which would otherwise pile up reload after
	// reload.
	for _, left := range kept {
		for _, li := range left {
			asideOf(li).values.drop(li.Rule.Name())
		}
	}
	n := 0
	for _, d := range cfg.Domains() {
		if cfg.ForwardAuth(d) != nil {
			s.AuthDomain, n = d, n+1
		}
	}
	if n != 1 {
		s.AuthDomain = ""
	}
	return s
}

// ruleDomains is the domain of each rule of cfg, by config.Match.ID.
func ruleDomains(cfg *config.Config) []string {
	var ds []string
	for _, l := range cfg.Limits() {
		if !l.Unlimited {
			ds = append(ds, l.Domain)
		}
	}
	return ds
}

// newLimit prepares r with the Limiter as the server checks every rule
// (Settings.Shadow, Settings.ChargePerDescriptor), with what the server
// keeps beside it.
func (s *Server) newLimit(r sluice.Rule) (*decide.Limit, error) {
	l, err := decide.NewLimit(r, s.cfg.checkedAs(), s.limiter.Prepare)
	if err != nil {
		return nil, err
	}
	l.Aside = &limitAside{rls: protocol.NewRLSLimit(r)}
	return l, nil
}

// hashFiles hashes the names and bytes of the files paths stand for, as
// config.Load lists and opens them: a file, or a directory's *.yaml and
// *.yml files that do not start with a dot, symlinks followed, each a
// regular file (a named pipe is refused, not waited on). A path or file
// that cannot be read hashes as its error, so that a broken path is
// reported once, not at every poll.
func hashFiles(paths []string) string {
	h := sha256.New()
	for _, p := range paths {
		files, err := config.Files(p)
		if err != nil {
			fmt.Fprintf(h, "error %s\x00", err)
			continue
		}
		for _, f := range files {
			fmt.Fprintf(h, "file %s\x00", f)
			if err := hashFile(h, f); err != nil {
				fmt.Fprintf(h, "error %s\x00", err)
			}
		}
	}
	return string(h.Sum(nil))
}

func hashFile(w io.Writer, name string) error {
	f, err := config.OpenFile(name)
	if err != nil {
		return err
	}
	defer f.Close()
	// Past the cap, config.Load refuses the file; hashing further tells
	// no more.
	_, err = io.Copy(w, io.LimitReader(f, config.MaxFileSize+1))
	return err
}

// errNoPaths is Reload's error for a server that serves a Policy.
var errNoPaths = errors.New("server: no config files to reload: the server serves a config given in code")

// errXDSReload is Reload's error for a server fed over xDS.
var errXDSReload = errors.New("server: no config files to reload: the config comes over xDS, and each push takes effect as it comes")

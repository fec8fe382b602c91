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
	"github.com/sluicehq/sluice/internal/fields"
)

// snapshot is one loaded config made ready to serve. It never changes; a
// reload swaps the Server's pointer to a new one.
type snapshot struct {
	cfg   *config.Config
	rules []*limitInfo // by config.Match.ID
	// authDomain is the domain GET /v1/auth serves when the request
	// names none: the only domain with a forward_auth section, or "".
	authDomain string
	hash       string // of the config files' names and bytes; "" for a Policy
	loaded     time.Time
}

// limitInfo is what a response says about one rule, made once per rule.
type limitInfo struct {
	// rule is what is checked: the config's rule, or a copy as checkedAs
	// says (in shadow mode, charged as envoyproxy/ratelimit counts),
	// prepared by the Limiter when the config is loaded. A copy keeps
	// the config's rule's state: neither shadow mode nor the charge is
	// part of a state's identity.
	rule *sluice.PreparedRule
	// cfgRule is the config's rule, with the config's own shadow_mode,
	// by which a descriptor's status is decided: rule itself when rule
	// is not a copy.
	cfgRule  *sluice.PreparedRule
	sf       string // the name as an RFC 8941 string
	jsonName string // the name as a JSON string, for a denial's body
	policy   string // the RateLimit-Policy member
	// label is the rule's label in the metrics: its name, or for a
	// request's limit override labelOverride.
	label string
	// current is the rule as RLS reports it, with its name; unnamed the
	// same without, for a limit the config leaves unnamed, which
	// envoyproxy/ratelimit reports without a name (the rule's name is then
	// a generated one).
	current, unnamed *rlsLimit
	// counters are the rule's metric series, set on first use.
	counters atomic.Pointer[ruleCounters]
	// values are its value_to_metric series, made as descriptors come.
	values labelSeries
}

// checkedAs is how the server checks every rule, whatever the config says
// of it.
type checkedAs struct {
	shadow bool // every rule in shadow mode: Settings.Shadow
	// count charges every gate rule as envoyproxy/ratelimit counts,
	// sluice.ChargeCount: Settings.ChargePerDescriptor.
	count bool
}

func (c *Settings) checkedAs() checkedAs {
	return checkedAs{shadow: c.Shadow, count: c.ChargePerDescriptor}
}

// prepare prepares every rule of c with the Limiter (Limiter.Prepare),
// as the server checks it (checkedAs), by config.Match.ID: an invalid
// rule, or one the store would refuse at every request (a limit outside
// the Redis store's exact range), is a config error, found when the
// config loads rather than as an error on every request. Under
// Settings.QuotaMode a domain with forward_auth is one too
// (config.Config.CheckQuotaMode).
func (s *Server) prepare(c *config.Config) ([]*limitInfo, error) {
	if s.cfg.QuotaMode {
		if err := c.CheckQuotaMode(); err != nil {
			return nil, err
		}
	}
	lis := make([]*limitInfo, len(c.Rules()))
	err := c.CheckRules(func(id int, r sluice.Rule) error {
		li, err := newLimitInfo(r, s.cfg.checkedAs(), s.limiter.Prepare)
		lis[id] = li
		return err
	})
	if err != nil {
		return nil, err
	}
	return lis, nil
}

// newSnapshot makes cfg, its rules prepared as lis (by config.Match.ID),
// ready to serve. Rules unchanged since old keep old's limitInfo, and so
// their metric series.
func newSnapshot(cfg *config.Config, lis []*limitInfo, old *snapshot, hash string, now time.Time) *snapshot {
	s := &snapshot{cfg: cfg, rules: lis, hash: hash, loaded: now}
	// By the config's rule: equal rules are checked alike. Two limits
	// may declare equal rules; each keeps one of old's.
	var kept map[sluice.Rule][]*limitInfo
	if old != nil {
		kept = make(map[sluice.Rule][]*limitInfo, len(old.rules))
		for _, li := range old.rules {
			r := li.cfgRule.Rule()
			kept[r] = append(kept[r], li)
		}
	}
	for i, li := range lis {
		r := li.cfgRule.Rule()
		if k := kept[r]; len(k) > 0 {
			s.rules[i], kept[r] = k[0], k[1:]
		}
	}
	// What is left of old is gone from the config: so are its
	// value_to_metric series, which would otherwise pile up reload after
	// reload.
	for _, left := range kept {
		for _, li := range left {
			li.values.drop(li.rule.Name())
		}
	}
	n := 0
	for _, d := range cfg.Domains() {
		if cfg.ForwardAuth(d) != nil {
			s.authDomain, n = d, n+1
		}
	}
	if n != 1 {
		s.authDomain = ""
	}
	return s
}

// newLimitInfo prepares r, as checkedAs says, with prepare, and what a
// response says of it.
func newLimitInfo(r sluice.Rule, as checkedAs, prepare func(sluice.Rule) (*sluice.PreparedRule, error)) (*limitInfo, error) {
	checked := r
	checked.Shadow = r.Shadow || as.shadow
	if as.count && r.Charge == sluice.ChargeGate {
		checked.Charge = sluice.ChargeCount
	}
	p, err := prepare(checked)
	if err != nil {
		return nil, err
	}
	li := &limitInfo{rule: p, cfgRule: p}
	if checked != r {
		// The config's own rule only decides statuses (sluice.Combine);
		// it differs from checked in shadow mode and charge, which no
		// store's check depends on.
		if li.cfgRule, err = r.Prepare(); err != nil {
			return nil, err
		}
	}
	li.sf, li.policy = policyOf(r)
	li.jsonName = fields.JSONString(r.Name)
	li.label = r.Name
	li.current = currentLimit(r)
	li.unnamed = currentLimit(r)
	li.unnamed.Name = ""
	return li, nil
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

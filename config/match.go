package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/keys"
)

// Entry is one key and value of a request descriptor, such as
// ("remote_address", "203.0.113.7").
type Entry struct {
	Key   string
	Value string
}

// Match is one limit that applies to a request descriptor.
type Match struct {
	// Rule is the rule to check, with Key, as the config declares it: a
	// caller prepares it once, when the config is loaded (ID indexes
	// what it prepared). For an unlimited match it carries only Name and
	// Shadow, and is not to be checked.
	Rule sluice.Rule
	// Key is the counting key: the domain and the descriptor's entries,
	// escaped so that different descriptors never share a key; the value
	// of an entry landing on a descriptor marked secret is its digest. It holds
	// only printable ASCII and no braces, so a store may wrap it in a
	// Redis Cluster hash tag. A store counts per (Rule, Key).
	Key string
	// Name is the limit's name as the config gives it, "" if none;
	// Rule.Name is Name or a generated one. Only a named limit can be
	// replaced, as in envoyproxy/ratelimit.
	Name string
	// Unlimited means the descriptor is explicitly not limited: answer OK
	// without asking the store (envoyproxy/ratelimit reports the
	// remaining quota as the largest uint32).
	Unlimited bool
	// QuotaMode is envoyproxy/ratelimit's quota_mode, set on the
	// descriptor the request descriptor lands on: a request descriptor
	// over such a limit fails the request only when every request
	// descriptor in quota mode is over its limits. Deciding that is the
	// caller's (package server does, and has a global quota mode too).
	QuotaMode bool
	// Metadata is the metadata of the descriptor the request descriptor
	// lands on, nil if it has none: envoyproxy/ratelimit's, which its
	// server returns as the response's dynamic metadata. It holds what
	// JSON does: map[string]any, []any, string, int64, float64, bool and
	// nil. Shared: do not modify.
	Metadata map[string]any
	// DetailedMetric asks for metrics per descriptor value rather than per
	// rule; it can make for many series.
	DetailedMetric bool
	// MetricLabel is the request descriptor as a metric label, when the
	// config sets value_to_metric on the descriptor it lands on or on one
	// above: "" otherwise. Each level is written as envoyproxy/ratelimit
	// names it in its statistics, here as "key=value" or "key", joined with
	// "|": the request's value at a level with value_to_metric (unless it
	// shares a threshold, where the wildcard stands), the config's value at
	// a level that gives one, and the key alone at the others, as in
	//
	//	route=/api/v1/orders|method=GET|user
	//
	// It holds only printable ASCII, escaped as Key is, and at most
	// MaxMetricLabel bytes. A request's value reaches no other label:
	// bound how many distinct ones are kept (the server keeps
	// server.MaxLabelValues per rule).
	MetricLabel string
	// StatPath is the descriptor's path in the config as
	// envoyproxy/ratelimit names its statistics: the domain, then each
	// level's key, or key_value where the config gives a value (a secret
	// one as its digest), joined with "." ("domain.route_/api.user"). It
	// comes from the config alone, so there are as many as descriptors.
	StatPath string
	// ID is the index of Rule in Config.Rules, so that a caller can keep
	// what it prepares for each rule in a slice rather than a map; -1 for
	// an unlimited match.
	ID int
	// Replaces names the limits this one replaces; see ApplyReplaces.
	// Shared: do not modify.
	Replaces []string
}

// Match returns the limits that apply to one request descriptor of
// domain, none if no limit does. The domain's descriptors are walked
// level by level, one level per entry: at each level an entry takes the
// descriptor with its key and value, else the first one (in file order)
// with its key and a wildcard value that matches it ("foo*",
// "/api/*/users", "svc*ep*rpc": each * stands for any run of bytes, the
// empty one too), else the one with its key and no value, which stands
// for any value. The limits of
// the descriptor the last entry lands on apply; if the walk stops early,
// or lands on a descriptor without limits, nothing applies. This is
// envoyproxy/ratelimit's matching.
//
// Replaces are not applied here: see ApplyReplaces. The error is for an
// unknown domain only, and wraps ErrUnknownDomain.
func (c *Config) Match(domain string, entries []Entry) ([]Match, error) {
	ms, _, err := c.MatchSecrets(domain, entries)
	return ms, err
}

// MaxSecretEntries is how many entries of a request descriptor
// MatchSecrets and KeySecrets tell apart.
const MaxSecretEntries = 64

// MatchSecrets is Match, and which entries land on a descriptor marked
// secret, those whose value Redacted replaces by its digest: bit i for
// entries[i], of the first MaxSecretEntries. It walks the config once for
// both, for a caller that shows the descriptor (a response's metadata) as
// well as deciding it. The bits are set whether or not a limit applies.
func (c *Config) MatchSecrets(domain string, entries []Entry) (ms []Match, secret uint64, err error) {
	var d *domainConfig
	if c != nil {
		d = c.domains[domain]
	}
	if d == nil {
		return nil, 0, fmt.Errorf("%w %q", ErrUnknownDomain, domain)
	}
	// One allocation for the key, unless escapes lengthen it.
	size := len(domain)
	for _, e := range entries {
		size += 2 + len(e.Key) + len(e.Value)
	}
	var key strings.Builder
	key.Grow(size)
	escape(&key, domain)
	// The descriptors the entries land on, for the metric label: the
	// walk is not made again for it.
	var pathBuf [MaxSecretEntries]*node
	path := pathBuf[:0]
	cur, last := d.root, (*node)(nil)
	for i, e := range entries {
		next := cur.child(e)
		if next == nil {
			return nil, secret, nil
		}
		if next.secret && i < MaxSecretEntries {
			secret |= 1 << i
		}
		if i < len(pathBuf) {
			path = append(path, next)
		}
		key.WriteByte('|')
		escape(&key, e.Key)
		key.WriteByte('=')
		switch {
		case next.pattern != "":
			escape(&key, next.pattern) // share_threshold: one count for every value
		case next.secret:
			escape(&key, keys.Digest(e.Value)) // an API key never reaches a store
		default:
			escape(&key, e.Value)
		}
		if i == len(entries)-1 {
			last = next
		} else if !next.hasChildren() {
			return nil, secret, nil // the descriptor is deeper than the config
		}
		cur = next
	}
	if last == nil || len(last.limits) == 0 {
		return nil, secret, nil
	}
	k := key.String()
	if c.opts.EnvoyKeys {
		if ek, ok := envoyKey(domain, entries, d.root, last); ok {
			k = ek
		}
	}
	var label string
	if last.labelled {
		if len(path) < len(entries) {
			path = nil // too long to have kept: walked again
		}
		label = d.root.metricLabel(entries, path)
	}
	ms = make([]Match, len(last.limits))
	for i, l := range last.limits {
		ms[i] = Match{
			Rule:           l.rule,
			ID:             l.id,
			Key:            k,
			Name:           l.name,
			Unlimited:      l.unlimited,
			DetailedMetric: last.detailed,
			MetricLabel:    label,
			StatPath:       last.path,
			QuotaMode:      last.quota,
			Metadata:       last.metadata,
			Replaces:       l.replaces,
		}
	}
	return ms, secret, nil
}

// Key returns the counting key of a request descriptor taken as it is,
// for a limit the request brings rather than the config (Envoy's
// per-request limit override, which envoyproxy/ratelimit keys by the
// domain and the descriptor's entries): the domain and every entry,
// escaped as in Match.Key, with the value of each entry that lands on a
// descriptor marked secret replaced by its digest (see Redacted). No
// wildcard is shared here: each value keys apart. The key equals Match.Key
// where the descriptor lands on a limit without share_threshold, so the
// caller keeps the two apart by its rule. The error is for an unknown
// domain only, and wraps ErrUnknownDomain.
func (c *Config) Key(domain string, entries []Entry) (string, error) {
	k, _, err := c.KeySecrets(domain, entries)
	return k, err
}

// KeySecrets is Key, and which entries land on a descriptor marked
// secret, as MatchSecrets tells them: one walk of the config for both.
func (c *Config) KeySecrets(domain string, entries []Entry) (key string, secret uint64, err error) {
	if c == nil || c.domains[domain] == nil {
		return "", 0, fmt.Errorf("%w %q", ErrUnknownDomain, domain)
	}
	// One allocation for the key, unless escapes lengthen it.
	size := len(domain)
	for _, e := range entries {
		size += 2 + len(e.Key) + len(e.Value)
	}
	var b strings.Builder
	b.Grow(size)
	escape(&b, domain)
	// Redacted's walk: an entry past where it stops lands on nothing.
	cur := c.domains[domain].root
	for i, e := range entries {
		if cur != nil {
			cur = cur.child(e)
		}
		v := e.Value
		if cur != nil && cur.secret {
			v = keys.Digest(e.Value)
			if i < MaxSecretEntries {
				secret |= 1 << i
			}
		}
		b.WriteByte('|')
		escape(&b, e.Key)
		b.WriteByte('=')
		escape(&b, v)
	}
	return b.String(), secret, nil
}

// Redacted returns entries with the value of each entry that lands on a
// descriptor marked secret replaced by its digest, as in Match.Key: for
// showing a request descriptor where a secret must not go (a log line, a
// response's metadata). The entries past where the walk stops, and all of
// them for a domain c lacks, land on no descriptor and are returned as
// they are. entries is not modified.
func (c *Config) Redacted(domain string, entries []Entry) []Entry {
	out, copied := entries, false
	var cur *node
	if c != nil && c.domains[domain] != nil {
		cur = c.domains[domain].root
	}
	for i, e := range entries {
		if cur == nil {
			break
		}
		cur = cur.child(e)
		if cur != nil && cur.secret {
			if !copied {
				out, copied = append([]Entry(nil), entries...), true
			}
			out[i].Value = keys.Digest(e.Value)
		}
	}
	return out
}

// MaxMetricLabel is the most bytes of a Match.MetricLabel. A longer one
// keeps its first bytes and ends in "%#" and a digest of the whole, so
// that two long labels stay apart.
const MaxMetricLabel = 256

// metricLabel writes the Match.MetricLabel of entries, which land, from
// n, on a descriptor with value_to_metric on its path: entries[i] on
// path[i], or when path is nil on the descriptors it walks to again.
func (n *node) metricLabel(entries []Entry, path []*node) string {
	var b strings.Builder
	for i, e := range entries {
		var next *node
		if path != nil {
			next = path[i]
		} else {
			next = n.child(e)
		}
		if i > 0 {
			b.WriteByte('|')
		}
		escape(&b, e.Key)
		switch {
		case next.secret:
			// A secret is in no label, not even one the config spells out.
		case next.pattern != "":
			b.WriteByte('=')
			escape(&b, next.pattern) // shared: the wildcard, as in the key
		case next.valueToMetric || next.value != "" && !next.wildcard:
			b.WriteByte('=')
			escape(&b, e.Value) // the request's value, or the config's own
		case next.wildcard:
			b.WriteByte('=')
			escape(&b, next.value) // the wildcard that matched
		}
		n = next
	}
	s := b.String()
	if len(s) <= MaxMetricLabel {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:MaxMetricLabel-2-16] + "%#" + hex.EncodeToString(sum[:8])
}

// canLand reports whether a request descriptor with these keys could land
// on a descriptor with limits, for some values of the entries whose value
// is not fixed ("" in literals). Each (descriptor, level) is tried once.
func (n *node) canLand(keys, literals []string) bool {
	type at struct {
		n *node
		i int
	}
	tried := make(map[at]bool)
	var land func(n *node, i int) bool
	land = func(n *node, i int) bool {
		if i == len(keys) {
			return len(n.limits) > 0
		}
		if tried[at{n, i}] {
			return false
		}
		tried[at{n, i}] = true
		k, lit := keys[i], literals[i]
		try := func(c *node) bool {
			return c != nil && (i == len(keys)-1 || c.hasChildren()) && land(c, i+1)
		}
		if lit != "" {
			return try(n.child(Entry{k, lit})) // a fixed value goes one way only
		}
		for e, c := range n.exact {
			if e.Key == k && try(c) {
				return true
			}
		}
		for _, w := range n.wild {
			if w.key == k && try(w.node) {
				return true
			}
		}
		return try(n.any[k])
	}
	return land(n, 0)
}

// reach returns the descriptors that a request descriptor's first
// entries, with these keys, can lead to from n, for some values of the
// entries whose value is not fixed ("" in literals).
func (n *node) reach(keys, literals []string) []*node {
	cur := []*node{n}
	for i, k := range keys {
		var next []*node
		for _, c := range cur {
			if literals[i] != "" {
				if x := c.child(Entry{k, literals[i]}); x != nil {
					next = append(next, x)
				}
				continue
			}
			for e, x := range c.exact {
				if e.Key == k {
					next = append(next, x)
				}
			}
			for _, w := range c.wild {
				if w.key == k {
					next = append(next, w.node)
				}
			}
			if x := c.any[k]; x != nil {
				next = append(next, x)
			}
		}
		cur = next
	}
	return cur
}

// child returns the descriptor entry e lands on among n's children.
func (n *node) child(e Entry) *node {
	if e.Value != "" {
		if c := n.exact[e]; c != nil {
			return c
		}
	}
	for _, w := range n.wild {
		if w.key == e.Key && w.glob.match(e.Value) {
			return w.node
		}
	}
	return n.any[e.Key]
}

// ApplyReplaces drops, in place, every limit that another limit matched by
// the same request replaces: descriptors holds the matches of each request
// descriptor, as Match returns them. As in envoyproxy/ratelimit, every
// match's replaces count (an unlimited one's too, and one that is itself
// replaced), only named limits can be replaced, and unlimited matches are
// never dropped.
func ApplyReplaces(descriptors [][]Match) {
	var replaced map[string]bool
	for _, ms := range descriptors {
		for k := range ms {
			for _, name := range ms[k].Replaces {
				if replaced == nil {
					replaced = make(map[string]bool)
				}
				replaced[name] = true
			}
		}
	}
	if replaced == nil {
		return
	}
	for i, ms := range descriptors {
		kept := ms[:0]
		for _, m := range ms {
			if m.Unlimited || m.Name == "" || !replaced[m.Name] {
				kept = append(kept, m)
			}
		}
		clear(ms[len(kept):])
		descriptors[i] = kept
	}
}

// escape writes s with every byte that is not printable ASCII, and each of
// % | = { }, as %XX: the key stays one readable line, and the separators
// and Redis hash-tag braces appear only where Match puts them.
func escape(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '|' || c == '=' || c == '{' || c == '}' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// envoyKey is the key of a request descriptor (entries, landing on last)
// as envoyproxy/ratelimit names its cache key less the window's start,
// after EnvoyKeyMark, if a store can count it as envoyproxy/ratelimit
// does (see Options.EnvoyKeys): one limit, a fixed window of whole
// seconds, no secret, and no value holding '_', which could pose as
// another descriptor's entries, or "%#", which could pose as a long key's
// digest.
func envoyKey(domain string, entries []Entry, root, last *node) (string, bool) {
	if len(last.limits) != 1 {
		return "", false
	}
	l := last.limits[0]
	if l.unlimited || l.rule.Algorithm != sluice.AlgoFixedWindow || l.rule.Limit.Period%time.Second != 0 {
		return "", false
	}
	size := len(EnvoyKeyMark) + len(domain) + 1
	for _, e := range entries {
		size += len(e.Key) + len(e.Value) + 2
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(EnvoyKeyMark)
	b.WriteString(domain)
	b.WriteByte('_')
	cur := root
	for _, e := range entries {
		cur = cur.child(e)
		if cur.secret {
			return "", false
		}
		b.WriteString(e.Key)
		b.WriteByte('_')
		switch {
		case cur.pattern != "":
			b.WriteString(cur.pattern)
		case strings.IndexByte(e.Value, '_') >= 0:
			// envoyproxy/ratelimit's key would be ambiguous: a client's
			// "alice_path_/x" would count as (alice, /x) does.
			return "", false
		case strings.Contains(e.Value, "%#"):
			// A short key holding it could spell the digest a long key
			// is cut to (decide.BoundKey), and count against it.
			return "", false
		default:
			b.WriteString(e.Value)
		}
		b.WriteByte('_')
	}
	return b.String(), true
}

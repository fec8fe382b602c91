package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// domainConfig is one file's worth of config.
type domainConfig struct {
	name   string
	file   string
	line   int
	root   *node
	limits []*limit // every limit in file order, for Rules and Reload
	auth   *ForwardAuth
	rlqs   *RLQS
}

// node is a descriptor of the config: where a request descriptor's entry
// can land, and the limits that apply when the whole descriptor lands here.
type node struct {
	path     string           // envoy's full key: domain.key_value.key
	exact    map[Entry]*node  // children with a literal value
	wild     []wildcard       // children with a value holding *, in file order
	any      map[string]*node // children with no value: any value
	limits   []limit
	detailed bool   // detailed_metric
	pattern  string // share_threshold: the wildcard value that all matching values count under
	secret   bool   // the value is keyed by its digest: it never reaches a store
	// valueToMetric is the descriptor's value_to_metric: a request's
	// value at this level goes into the metric label (Match.MetricLabel).
	// labelled is valueToMetric here or at a level above, so that Match
	// knows at once whether a descriptor it lands on has a label.
	valueToMetric, labelled bool
	value                   string // as written: "" for any value
	wildcard                bool   // value holds a *
	quota                   bool   // quota_mode: see Match.QuotaMode
	metadata                map[string]any
	// where it is written, for the errors of a domain merged from
	// several files
	file, field string
	line        int
}

type wildcard struct {
	key  string
	glob glob // node.value's
	node *node
}

// glob is a value with wildcards, each * standing for any run of bytes,
// the empty one included: "/api/*/users", "svc*ep*rpc", "files/*". It is
// split at each * once, when the config loads, so that matching a request
// value allocates nothing.
type glob struct {
	parts []string // the value split at each *: at least two
	fixed int      // the bytes of parts together
}

func newGlob(pattern string) glob {
	g := glob{parts: strings.Split(pattern, "*")}
	g.fixed = len(pattern) - (len(g.parts) - 1)
	return g
}

// match reports whether s is one of the values g stands for: it starts
// with the first part, ends with the last, and holds the others in order
// between them, without overlap. Taking each middle part at its first
// place leaves the most room for the rest, so that is the only place to
// try.
func (g glob) match(s string) bool {
	first, last := g.parts[0], g.parts[len(g.parts)-1]
	if len(s) < g.fixed || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range g.parts[1 : len(g.parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

func (n *node) hasChildren() bool { return len(n.exact)+len(n.wild)+len(n.any) > 0 }

// walk calls f for each descriptor under n, in no set order.
func (n *node) walk(f func(*node)) {
	for _, c := range n.exact {
		f(c)
		c.walk(f)
	}
	for _, w := range n.wild {
		f(w.node)
		w.node.walk(f)
	}
	for _, c := range n.any {
		f(c)
		c.walk(f)
	}
}

// limit is one rate limit of a node.
type limit struct {
	rule      sluice.Rule // for unlimited, only Name and Shadow are set
	name      string      // as written in the config; "" if none
	unlimited bool
	replaces  []string
	id        int // its index in Config.Rules; -1 for an unlimited one
	// where it is written, for errors found after parsing (CheckRules)
	file  string
	line  int
	field string
}

// The keys each level allows.
var (
	rootKeys       = []string{"domain", "descriptors", "shadow_mode", "failure", "forward_auth", "rlqs"}
	descriptorKeys = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "secret", "metadata"}
	limitKeys      = []string{"name", "replaces", "unit", "unit_multiplier", "requests_per_unit", "unlimited", "algorithm", "period", "burst", "failure", "charge", "lease"}
	replacesKeys   = []string{"name"}
	leaseKeys      = []string{"renew", "ttl"}
)

// units are envoyproxy/ratelimit's: a month is 30 days and a year 365, and
// windows are aligned to the Unix epoch, as its cache keys are.
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

const unitList = "second, minute, hour, day, week, month or year"

var failures = map[string]sluice.Failure{"open": sluice.FailOpen, "closed": sluice.FailClosed, "local": sluice.FailLocal}

// charges are the ways a config can charge a limit. sluice.ChargeCount is
// not among them: sluice serve compiles every limit so under
// -charge-per-descriptor (envoy mode's default), not a config.
var charges = map[string]sluice.Charge{"gate": sluice.ChargeGate, "usage": sluice.ChargeUsage}

// parseDomain reads one file.
func parseDomain(file string, data []byte) (*domainConfig, []error) {
	if len(data) > maxFileSize {
		return nil, []error{&Error{File: file, Err: fmt.Errorf("the file is larger than %d bytes", maxFileSize)}}
	}
	doc, err := parseYAML(file, data)
	if err != nil {
		return nil, []error{err}
	}
	top := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		top = doc.Content[0]
	}
	w := newWalker(file, len(data))
	if top.Kind == 0 || top.Kind == yaml.DocumentNode || isNull(top) {
		w.errorf(top, "domain", "missing: the file is empty")
		return nil, w.errs
	}
	d := w.domain(top)
	if len(w.errs) > 0 {
		slices.SortStableFunc(w.errs, func(a, b error) int { return a.(*Error).Line - b.(*Error).Line })
		return nil, w.errs
	}
	return d, nil
}

// defaults are what the top level sets for every limit of the domain.
type defaults struct {
	shadow  bool
	failure sluice.Failure
}

func (w *walker) domain(n *yaml.Node) *domainConfig {
	m := w.mapping(n, "", rootKeys)
	if m == nil {
		return nil // not a mapping: reported
	}
	d := &domainConfig{file: w.file, line: n.Line}
	dn := m["domain"]
	switch name, ok := w.str(dn, "domain"); {
	case dn == nil:
		w.errorf(n, "domain", "missing: every file names its domain")
	case ok && name == "":
		w.errorf(dn, "domain", "must not be empty")
	default:
		d.name, d.line = name, dn.Line
	}
	var def defaults
	def.shadow, _ = w.boolean(m["shadow_mode"], "shadow_mode")
	// open is the config's documented default, set explicitly: a rule left
	// at sluice.FailDefault would decide locally wherever the server has
	// a fallback store.
	def.failure, _ = w.failure(m["failure"], "failure", sluice.FailOpen)
	d.root = &node{path: d.name}
	w.descriptors(m["descriptors"], "descriptors", d, d.root, def, 1)
	if fa := m["forward_auth"]; fa != nil {
		d.auth = w.forwardAuth(fa, "forward_auth") // checked by build
	}
	if q := m["rlqs"]; q != nil {
		d.rlqs = w.rlqs(q, "rlqs")
	}
	return d
}

func (w *walker) failure(n *yaml.Node, field string, def sluice.Failure) (sluice.Failure, bool) {
	if n == nil {
		return def, true
	}
	s, ok := w.str(n, field)
	if !ok {
		return def, false
	}
	f, ok := failures[s]
	if !ok {
		w.errorf(n, field, "unknown failure mode %q (want open, closed or local)", s)
		return def, false
	}
	return f, true
}

// charge reads a limit's charge; the default is gate.
func (w *walker) charge(n *yaml.Node, field string) sluice.Charge {
	if n == nil {
		return sluice.ChargeGate
	}
	s, ok := w.str(n, field)
	if !ok {
		return sluice.ChargeGate
	}
	c, ok := charges[s]
	if !ok {
		w.errorf(n, field, "unknown charge %q (want gate or usage)", s)
	}
	return c
}

// descriptors reads a list of descriptors into parent's children.
func (w *walker) descriptors(n *yaml.Node, field string, d *domainConfig, parent *node, def defaults, depth int) {
	items := w.sequence(n, field)
	if len(items) > 0 && depth > maxDepth {
		w.errorf(n, "descriptors", "nested deeper than %d levels", maxDepth)
		return
	}
	seen := make(map[Entry]int, len(items))
	for i, item := range items {
		f := index(field, i)
		before := len(w.errs)
		m := w.mapping(item, f, descriptorKeys)
		if m == nil {
			continue
		}
		typo := len(w.errs) > before // a misspelt key: "missing" would only repeat it
		line := item.Line
		kn := m["key"]
		key, ok := w.str(kn, join(f, "key"))
		switch {
		case !ok:
		case kn == nil:
			if !typo {
				w.errorf(item, join(f, "key"), "missing: every descriptor has a key")
			}
		case key == "":
			w.errorf(kn, join(f, "key"), "must not be empty")
		case strings.Contains(key, "*"):
			w.errorf(kn, join(f, "key"), "%q: a key cannot be a wildcard, only a value can hold *", key)
		}
		value, _ := w.str(m["value"], join(f, "value"))
		wild := strings.Contains(value, "*")
		secret, _ := w.boolean(m["secret"], join(f, "secret"))
		shown := value // as names, errors and listings show it
		if secret && value != "" {
			shown = secretLabel(value)
		}
		e := Entry{Key: key, Value: value}
		if first, dup := seen[e]; dup && key != "" {
			w.errorf(item, f, "duplicate descriptor key %q value %q: already defined at line %d", key, shown, first)
		}
		seen[e] = line

		shadow, _ := w.boolean(m["shadow_mode"], join(f, "shadow_mode"))
		detailed, _ := w.boolean(m["detailed_metric"], join(f, "detailed_metric"))
		share, _ := w.boolean(m["share_threshold"], join(f, "share_threshold"))
		quota, _ := w.boolean(m["quota_mode"], join(f, "quota_mode"))
		toMetric, _ := w.boolean(m["value_to_metric"], join(f, "value_to_metric"))
		if toMetric && secret {
			w.errorf(m["value_to_metric"], join(f, "value_to_metric"), "a secret value never goes into a metric: give secret or value_to_metric, not both")
		}
		seg := key
		if value != "" {
			seg += "_" + shown
		}
		child := &node{path: parent.path + "." + seg, detailed: detailed, secret: secret,
			valueToMetric: toMetric, labelled: toMetric || parent.labelled, value: value, wildcard: wild, quota: quota,
			metadata: w.metadata(m["metadata"], join(f, "metadata")),
			file:     w.file, field: f, line: line}
		if share {
			if wild {
				child.pattern = value
			} else {
				w.errorf(m["share_threshold"], join(f, "share_threshold"), "only a wildcard value (one holding *) can share its limit")
			}
		}
		w.nodeLimits(m, f, d, child, defaults{shadow: def.shadow || shadow, failure: def.failure})
		switch {
		case value == "":
			if parent.any == nil {
				parent.any = make(map[string]*node)
			}
			parent.any[key] = child
		case wild:
			parent.wild = append(parent.wild, wildcard{key: key, glob: newGlob(value), node: child})
		default:
			if parent.exact == nil {
				parent.exact = make(map[Entry]*node)
			}
			parent.exact[e] = child
		}
		// shadow_mode and quota_mode are the descriptor's own: its children
		// do not inherit them, as in envoyproxy/ratelimit.
		w.descriptors(m["descriptors"], join(f, "descriptors"), d, child, def, depth+1)
	}
}

// nodeLimits reads a descriptor's rate_limit or rate_limits.
func (w *walker) nodeLimits(m map[string]*yaml.Node, f string, d *domainConfig, nd *node, def defaults) {
	single, list := m["rate_limit"], m["rate_limits"]
	if single != nil && list != nil {
		w.errorf(list, join(f, "rate_limits"), "give rate_limit or rate_limits, not both")
		return
	}
	if single != nil {
		if l, ok := w.limit(single, join(f, "rate_limit"), -1, nd, def); ok {
			nd.limits = append(nd.limits, l)
		}
	}
	lf := join(f, "rate_limits")
	items := w.sequence(list, lf)
	names := make(map[string]int, len(items))
	for i, item := range items {
		l, ok := w.limit(item, index(lf, i), i, nd, def)
		if !ok {
			continue
		}
		if first, dup := names[l.rule.Name]; dup {
			w.errorf(item, index(lf, i), "two limits of one descriptor are both named %q (the first at line %d)", l.rule.Name, first)
			continue
		}
		names[l.rule.Name] = item.Line
		if l.unlimited && len(items) > 1 {
			w.errorf(item, index(lf, i), "an unlimited limit must be the descriptor's only one")
			continue
		}
		nd.limits = append(nd.limits, l)
	}
	for i := range nd.limits {
		d.limits = append(d.limits, &nd.limits[i])
	}
}

// limit reads one rate limit. i is its index in rate_limits, or -1 for a
// rate_limit.
func (w *walker) limit(n *yaml.Node, f string, i int, nd *node, def defaults) (limit, bool) {
	nerr := len(w.errs)
	m := w.mapping(n, f, limitKeys)
	if m == nil {
		return limit{}, false
	}
	typo := len(w.errs) > nerr // a misspelt key: "missing" would only repeat it
	l := limit{file: w.file, line: n.Line, field: f}
	l.name, _ = w.str(m["name"], join(f, "name"))
	if l.name != "" && !validName(l.name) {
		w.errorf(m["name"], join(f, "name"), "%q: a name cannot hold control characters, quotes, backslashes or braces", l.name)
	}
	rf := join(f, "replaces")
	for j, item := range w.sequence(m["replaces"], rf) {
		jf := index(rf, j)
		rm := w.mapping(item, jf, replacesKeys)
		if rm == nil {
			continue
		}
		name, _ := w.str(rm["name"], join(jf, "name"))
		switch {
		case name == "":
			w.errorf(item, join(jf, "name"), "missing: a replaces entry names the limit it replaces")
		case name == l.name:
			w.errorf(rm["name"], join(jf, "name"), "%q: a limit cannot replace itself", name)
		default:
			l.replaces = append(l.replaces, name)
		}
	}
	ruleName := l.name
	if ruleName == "" {
		ruleName = generatedName(nd.path, i)
	}
	l.unlimited, _ = w.boolean(m["unlimited"], join(f, "unlimited"))
	if l.unlimited {
		// requests_per_unit is ignored, as envoyproxy/ratelimit ignores it.
		for _, k := range []string{"unit", "unit_multiplier", "period", "algorithm", "burst", "failure", "charge", "lease"} {
			if m[k] != nil {
				w.errorf(m[k], join(f, k), "an unlimited limit takes no %s", k)
			}
		}
		l.rule = sluice.Rule{Name: ruleName, Shadow: def.shadow}
		return l, len(w.errs) == nerr
	}

	r := sluice.Rule{Name: ruleName, Algorithm: sluice.AlgoFixedWindow, Shadow: def.shadow}
	if rn := m["requests_per_unit"]; rn == nil {
		if !typo {
			w.errorf(n, join(f, "requests_per_unit"), "missing: how many requests per unit or period")
		}
	} else if v, ok := w.integer(rn, join(f, "requests_per_unit")); ok {
		if v < 0 {
			w.errorf(rn, join(f, "requests_per_unit"), "%d must not be negative", v)
		}
		r.Limit.Rate = v
	}
	r.Limit.Period = w.period(m, n, f, typo)
	if an := m["algorithm"]; an != nil {
		if s, ok := w.str(an, join(f, "algorithm")); ok {
			a, err := sluice.ParseAlgo(s)
			if err != nil {
				w.error(an, join(f, "algorithm"), err)
			}
			r.Algorithm = a
		}
	}
	if bn := m["burst"]; bn != nil {
		if v, ok := w.integer(bn, join(f, "burst")); ok {
			switch {
			case v < 0:
				w.errorf(bn, join(f, "burst"), "%d must not be negative", v)
			case r.Algorithm != "" && !hasBurst(r.Algorithm):
				w.errorf(bn, join(f, "burst"), "the %s algorithm has no burst; use %s", r.Algorithm, bursty())
			}
			r.Limit.Burst = v
		}
	}
	r.Failure, _ = w.failure(m["failure"], join(f, "failure"), def.failure)
	r.Charge = w.charge(m["charge"], join(f, "charge"))
	r.Lease = w.lease(m["lease"], join(f, "lease"))
	if len(w.errs) > nerr {
		return limit{}, false
	}
	if err := r.Validate(); err != nil {
		// A rule that is valid but for its lease is reported at the
		// lease, which is what to change.
		at, af := n, f
		if exact := r; r.Lease.Enabled {
			if exact.Lease = (sluice.Lease{}); exact.Validate() == nil {
				at, af = m["lease"], join(f, "lease")
			}
		}
		w.error(at, af, err)
		return limit{}, false
	}
	l.rule = r
	return l, true
}

// lease reads a limit's lease: absent, the rule is decided exactly; a
// mapping, even an empty one, leases it, with renew and ttl as given or
// the defaults (sluice.Lease).
func (w *walker) lease(n *yaml.Node, f string) sluice.Lease {
	if n == nil {
		return sluice.Lease{}
	}
	m := w.mapping(n, f, leaseKeys)
	if m == nil {
		return sluice.Lease{}
	}
	l := sluice.Lease{Enabled: true}
	l.Renew, _ = w.duration(m["renew"], join(f, "renew"))
	l.TTL, _ = w.duration(m["ttl"], join(f, "ttl"))
	return l
}

// duration reads a positive Go duration; absent, it is 0, the default.
func (w *walker) duration(n *yaml.Node, f string) (time.Duration, bool) {
	if n == nil {
		return 0, true
	}
	s, ok := w.str(n, f)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		w.errorf(n, f, "%q: want a positive duration such as 100ms or 2s", s)
		return 0, false
	}
	return d, true
}

// period reads unit (with unit_multiplier) or period.
func (w *walker) period(m map[string]*yaml.Node, n *yaml.Node, f string, typo bool) time.Duration {
	un, mn, pn := m["unit"], m["unit_multiplier"], m["period"]
	switch {
	case un != nil && pn != nil:
		w.errorf(pn, join(f, "period"), "give unit or period, not both")
		return 0
	case pn != nil:
		if mn != nil {
			w.errorf(mn, join(f, "unit_multiplier"), "multiplies a unit, not a period")
		}
		s, ok := w.str(pn, join(f, "period"))
		if !ok {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			w.errorf(pn, join(f, "period"), "%q: want a positive duration such as 30s, 5m or 1h", s)
			return 0
		}
		return d
	case un != nil:
		s, ok := w.str(un, join(f, "unit"))
		if !ok {
			return 0
		}
		u, ok := units[strings.ToLower(s)]
		if !ok {
			w.errorf(un, join(f, "unit"), "unknown unit %q (want %s, or a period such as 30s)", s, unitList)
			return 0
		}
		if mn == nil {
			return u
		}
		k, ok := w.integer(mn, join(f, "unit_multiplier"))
		switch {
		case !ok:
			return 0
		case k < 1:
			w.errorf(mn, join(f, "unit_multiplier"), "%d: must be at least 1", k)
			return 0
		case k > math.MaxInt64/int64(u):
			w.errorf(mn, join(f, "unit_multiplier"), "%d %ss is too long a period", k, strings.ToLower(s))
			return 0
		}
		return u * time.Duration(k)
	}
	if !typo {
		w.errorf(n, f, "missing unit or period: want unit (%s) or period (such as 30s)", unitList)
	}
	return 0
}

// hasBurst reports whether a is a bucket, whose capacity burst sets.
func hasBurst(a sluice.Algo) bool {
	info, ok := a.Info()
	return ok && info.Bucket
}

// bursty lists the algorithms that have a burst: "token_bucket,
// leaky_bucket or gcra".
func bursty() string {
	var ids []string
	for _, info := range sluice.AlgoInfos() {
		if info.Bucket {
			ids = append(ids, string(info.ID))
		}
	}
	if len(ids) < 2 {
		return strings.Join(ids, "")
	}
	return strings.Join(ids[:len(ids)-1], ", ") + " or " + ids[len(ids)-1]
}

// generatedName names a limit the config leaves unnamed: its descriptor's
// path, as envoyproxy/ratelimit names its statistics ("domain.key_value"),
// and its index in rate_limits if it comes from a list. The name changes
// only when the config does, so it is stable across reloads.
func generatedName(path string, i int) string {
	var b strings.Builder
	for j := 0; j < len(path); j++ {
		c := path[j]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`%{}"\`, c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	if i >= 0 {
		fmt.Fprintf(&b, "[%d]", i)
	}
	return b.String()
}

// secretLabel stands for the value a secret descriptor is written with
// wherever the config's values are shown (a generated name, and so the
// metrics, headers and store keys that carry it; an error; a listing):
// '#' and the first 12 hex digits of its SHA-256, which tell a config's
// secrets apart and let whoever holds the value check which one is meant.
func secretLabel(value string) string { return SecretLabel(value) }

// SecretLabel is how a secret value is shown wherever the config's values
// are (a metric name among them): '#' and the first 12 hex digits of its
// SHA-256.
func SecretLabel(value string) string {
	sum := sha256.Sum256([]byte(value))
	return "#" + hex.EncodeToString(sum[:6])
}

// shownValue is n's value as the config writes it, or for a secret its
// secretLabel.
func (n *node) shownValue() string {
	if n.secret && n.value != "" {
		return secretLabel(n.value)
	}
	return n.value
}

// validName reports whether a name given in the config is safe in keys,
// metrics and the RateLimit-Policy header.
func validName(s string) bool {
	for _, c := range []byte(s) {
		if c < ' ' || c == 0x7f || strings.IndexByte(`{}"\`, c) >= 0 {
			return false
		}
	}
	return true
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

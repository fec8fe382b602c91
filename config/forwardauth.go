package config

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ForwardAuth says how the forward-auth endpoint (GET /v1/auth, for nginx
// auth_request, Traefik ForwardAuth and the like) turns an HTTP request
// into request descriptors for its domain, and what it answers on a
// denial. It is read-only and safe for concurrent use.
type ForwardAuth struct {
	proxy       Proxy
	denyStatus  int
	descriptors [][]authEntry
	file        string // where the section is, for errors
	line        int
	lines       []int // of each descriptor
}

// authEntry is one entry of a forward_auth descriptor: its key, and where
// its value comes from: a Source, or the literal value when from.Kind is
// 0.
type authEntry struct {
	key   string
	from  Source
	value string
}

// A Source is where the value of a forward_auth entry comes from: a part
// of the original request, which the server learns from the proxy.
type Source struct {
	Kind SourceKind
	// Name is the header's name (canonical, as http.Header keys it) or
	// the query parameter's, for Header and Query.
	Name string
	// CaseInsensitive, for Path, matches the path with its ASCII letters
	// in lower case (path_match: case_insensitive), for an application
	// that routes /LOGIN as /login.
	CaseInsensitive bool
}

// SourceKind is the kind of a Source.
type SourceKind uint8

// The kinds of Source, as forward_auth's from names them.
const (
	ClientIP SourceKind = iota + 1 // client_ip: the client's address, keyed as package keys keys it
	Method                         // method
	Path                           // path: without the query
	Host                           // host
	Header                         // header:NAME
	Query                          // query:NAME
)

// String is the source as the config writes it.
func (s Source) String() string {
	switch s.Kind {
	case ClientIP:
		return "client_ip"
	case Method:
		return "method"
	case Path:
		if s.CaseInsensitive {
			return "path (case_insensitive)"
		}
		return "path"
	case Host:
		return "host"
	case Header:
		return "header:" + s.Name
	case Query:
		return "query:" + s.Name
	}
	return fmt.Sprintf("Source(%d)", s.Kind)
}

// Proxy is the proxy that calls the forward-auth endpoint for this
// domain. The server believes only that proxy's headers, and only from a
// trusted peer: each proxy passes the client's own headers through, so a
// header another proxy would set is the client's to choose.
type Proxy uint8

// The proxies a forward_auth section can name.
const (
	// Nginx is nginx's auth_request: the client's address in
	// X-Real-IP, the original URI and method in X-Original-URI and
	// X-Original-Method, the host in the subrequest's Host.
	Nginx Proxy = iota + 1
	// Traefik is Traefik's ForwardAuth middleware: X-Forwarded-For,
	// X-Forwarded-Uri, X-Forwarded-Method and X-Forwarded-Host.
	Traefik
	// Envoy is Envoy's ext_authz filter with an HTTP service: the
	// original path after /v1/auth/{domain}, the method and host of the
	// check request itself, the address in X-Forwarded-For.
	Envoy
)

var proxyNames = [...]string{Nginx: "nginx", Traefik: "traefik", Envoy: "envoy"}

const proxyList = "nginx, traefik or envoy"

// String is the proxy's name as the config spells it.
func (p Proxy) String() string {
	if int(p) < len(proxyNames) && proxyNames[p] != "" {
		return proxyNames[p]
	}
	return fmt.Sprintf("Proxy(%d)", uint8(p))
}

// Proxy is the proxy the section names.
func (f *ForwardAuth) Proxy() Proxy { return f.proxy }

// DenyStatus is the status to answer a denied request with: 429 (the
// default), or 403 for nginx auth_request, which passes only 401 and 403
// through to the client and turns anything else into a 500.
func (f *ForwardAuth) DenyStatus() int { return f.denyStatus }

// Descriptors returns the request descriptors, in config order, taking
// each entry's value from value, which tells the original request's part
// a Source names (literal entries have the config's value). A descriptor
// any of whose values is "" (a missing header, query parameter or client
// address) is left out, as Envoy leaves out a descriptor whose request
// header is missing. value is asked for every entry's Source, in config
// order, whether or not its descriptor is left out.
func (f *ForwardAuth) Descriptors(value func(Source) string) [][]Entry {
	out := make([][]Entry, 0, len(f.descriptors))
	for _, d := range f.descriptors {
		es, whole := make([]Entry, len(d)), true
		for i, e := range d {
			v := e.value
			if e.from.Kind != 0 {
				v = value(e.from)
			}
			whole = whole && v != ""
			es[i] = Entry{Key: e.key, Value: v}
		}
		if whole {
			out = append(out, es)
		}
	}
	return out
}

var (
	authKeys           = []string{"proxy", "deny_status", "descriptors"}
	authDescriptorKeys = []string{"entries"}
	authEntryKeys      = []string{"key", "from", "value", "path_match"}
)

const fromList = "client_ip, method, path, host, header:NAME or query:NAME"

func (w *walker) forwardAuth(n *yaml.Node, field string) *ForwardAuth {
	m := w.mapping(n, field, authKeys)
	if m == nil {
		return nil
	}
	fa := &ForwardAuth{denyStatus: http.StatusTooManyRequests, file: w.file, line: n.Line}
	// No default proxy: a wrong guess would believe headers the client
	// chose.
	pf := join(field, "proxy")
	if pn := m["proxy"]; pn == nil {
		w.errorf(n, pf, "missing: name the proxy that calls /v1/auth, %s", proxyList)
	} else if p, ok := w.str(pn, pf); ok {
		if i := slices.Index(proxyNames[:], p); i > 0 {
			fa.proxy = Proxy(i)
		} else {
			w.errorf(pn, pf, "unknown proxy %q (want %s)", p, proxyList)
		}
	}
	if sn := m["deny_status"]; sn != nil {
		if s, ok := w.integer(sn, join(field, "deny_status")); ok {
			if s != http.StatusTooManyRequests && s != http.StatusForbidden {
				w.errorf(sn, join(field, "deny_status"), "%d: want 429, or 403 for nginx auth_request", s)
			}
			fa.denyStatus = int(s)
		}
	}
	df := join(field, "descriptors")
	items := w.sequence(m["descriptors"], df)
	if len(items) == 0 {
		w.errorf(n, df, "missing: forward_auth needs at least one descriptor")
	}
	for i, item := range items {
		f := index(df, i)
		dm := w.mapping(item, f, authDescriptorKeys)
		if dm == nil {
			continue
		}
		ef := join(f, "entries")
		entries := w.sequence(dm["entries"], ef)
		if len(entries) == 0 {
			w.errorf(item, ef, "missing: a descriptor needs at least one entry")
			continue
		}
		d := make([]authEntry, 0, len(entries))
		for j, en := range entries {
			if e, ok := w.authEntry(en, index(ef, j)); ok {
				d = append(d, e)
			}
		}
		fa.descriptors = append(fa.descriptors, d)
		fa.lines = append(fa.lines, item.Line)
	}
	return fa
}

func (w *walker) authEntry(n *yaml.Node, field string) (authEntry, bool) {
	m := w.mapping(n, field, authEntryKeys)
	if m == nil {
		return authEntry{}, false
	}
	var e authEntry
	kn, fn, vn, pm := m["key"], m["from"], m["value"], m["path_match"]
	key, ok := w.str(kn, join(field, "key"))
	switch {
	case !ok:
		return e, false
	case kn == nil:
		w.errorf(n, join(field, "key"), "missing: every entry has a key")
		return e, false
	case key == "":
		w.errorf(kn, join(field, "key"), "must not be empty")
		return e, false
	}
	e.key = key
	switch {
	case fn != nil && vn != nil:
		w.errorf(vn, join(field, "value"), "give from or value, not both")
		return e, false
	case vn != nil && pm != nil:
		w.errorf(pm, join(field, "path_match"), "only an entry from: path has a path_match")
		return e, false
	case vn != nil:
		v, ok := w.str(vn, join(field, "value"))
		if ok && v == "" {
			w.errorf(vn, join(field, "value"), "must not be empty")
			return e, false
		}
		e.value = v
		return e, ok
	case fn == nil:
		w.errorf(n, field, "missing from or value: want from (%s) or a literal value", fromList)
		return e, false
	}
	s, ok := w.str(fn, join(field, "from"))
	if !ok {
		return e, false
	}
	kind, name, _ := strings.Cut(s, ":")
	switch {
	case s == "client_ip":
		e.from.Kind = ClientIP
	case s == "method":
		e.from.Kind = Method
	case s == "path":
		e.from.Kind = Path
	case s == "host":
		e.from.Kind = Host
	case kind == "header" && validToken(name):
		e.from = Source{Kind: Header, Name: textproto.CanonicalMIMEHeaderKey(name)}
	case kind == "query" && name != "":
		e.from = Source{Kind: Query, Name: name}
	case kind == "header" || kind == "query":
		w.errorf(fn, join(field, "from"), "%q: want %s:NAME with a valid name", s, kind)
		return e, false
	default:
		w.errorf(fn, join(field, "from"), "unknown source %q (want %s)", s, fromList)
		return e, false
	}
	if pm != nil {
		p, ok := w.str(pm, join(field, "path_match"))
		switch {
		case !ok:
			return e, false
		case e.from.Kind != Path:
			w.errorf(pm, join(field, "path_match"), "only an entry from: path has a path_match")
			return e, false
		case p == "case_insensitive":
			e.from.CaseInsensitive = true
		case p != "exact":
			w.errorf(pm, join(field, "path_match"), "unknown path_match %q (want exact, the default, or case_insensitive)", p)
			return e, false
		}
	}
	return e, true
}

// checkForwardAuth refuses a forward_auth descriptor that can land on no
// limit of the domain, most likely a misspelt key: it would never limit
// anything, silently. It refuses quota_mode on any descriptor of the
// domain too: a request in quota mode is denied only when all its
// descriptors are over, and in forward auth the client chooses which
// descriptors there are (a header of its own, a fresh API key on each
// request), so one it adds would take it past every other limit. It runs
// on sound files only, once the domain is whole: with
// Options.MergeDomains, the descriptors of every file of the domain
// count.
func checkForwardAuth(d *domainConfig) []error {
	if d.auth == nil {
		return nil
	}
	var errs []error
	d.root.walk(func(n *node) {
		if n.quota {
			errs = append(errs, &Error{File: n.file, Line: n.line, Field: join(n.field, "quota_mode"),
				Err: fmt.Errorf("domain %q is served by forward auth (forward_auth at %s:%d), where quota mode would let a client leave its limits by adding a descriptor of its own", d.name, d.auth.file, d.auth.line)})
		}
	})
	slices.SortFunc(errs, func(a, b error) int {
		ea, eb := a.(*Error), b.(*Error)
		return cmp.Or(strings.Compare(ea.File, eb.File), ea.Line-eb.Line)
	})
	for i, es := range d.auth.descriptors {
		keys := make([]string, len(es))
		lits := make([]string, len(es))
		shown := make([]string, len(es))
		for j, e := range es {
			keys[j], lits[j], shown[j] = e.key, e.value, e.key
			if e.from.Kind == 0 {
				shown[j] += "=" + e.value
			}
		}
		if !d.root.canLand(keys, lits) {
			errs = append(errs, &Error{File: d.auth.file, Line: d.auth.lines[i], Field: index("forward_auth.descriptors", i),
				Err: fmt.Errorf("(%s) can reach no limit of domain %q", strings.Join(shown, ", "), d.name)})
		}
		for j, e := range es {
			if e.from.CaseInsensitive {
				errs = append(errs, upperValues(d, d.root.reach(keys[:j], lits[:j]), e.key, d.auth.lines[i])...)
			}
		}
	}
	return errs
}

// upperValues refuses the values with upper-case letters of the
// descriptors with key among the children of parents: a path matched
// with path_match: case_insensitive (forward_auth's descriptor at line)
// comes in lower case, so such a value would never match.
func upperValues(d *domainConfig, parents []*node, key string, line int) []error {
	var errs []error
	check := func(n *node) {
		if strings.ContainsFunc(n.value, func(r rune) bool { return 'A' <= r && r <= 'Z' }) {
			errs = append(errs, &Error{File: n.file, Line: n.line, Field: join(n.field, "value"),
				Err: fmt.Errorf("%q holds upper-case letters, which a path matched with path_match: case_insensitive (forward_auth at %s:%d) never has: write it in lower case", n.shownValue(), d.auth.file, line)})
		}
	}
	for _, p := range parents {
		for e, c := range p.exact {
			if e.Key == key {
				check(c)
			}
		}
		for _, w := range p.wild {
			if w.key == key {
				check(w.node)
			}
		}
	}
	return errs
}

// CheckQuotaMode refuses every domain with a forward_auth section, for a
// server that puts every descriptor in quota mode (envoyproxy/ratelimit's
// QUOTA_MODE, sluice serve's -quota-mode), for the reason Load refuses
// quota_mode on a descriptor of such a domain: a client of forward auth
// would leave its limits by adding a descriptor of its own. The error
// names each domain and where its section is written.
func (c *Config) CheckQuotaMode() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, name := range c.names {
		if fa := c.domains[name].auth; fa != nil {
			errs = append(errs, &Error{File: fa.file, Line: fa.line, Field: "forward_auth",
				Err: fmt.Errorf("domain %q is served by forward auth, where quota mode for every descriptor (-quota-mode, QUOTA_MODE) would let a client leave its limits by adding a descriptor of its own: turn quota mode off, or serve the domain without forward_auth", name)})
		}
	}
	return errors.Join(errs...)
}

// validToken reports whether s is an HTTP header field name (RFC 9110's
// token).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// String describes the forward-auth policy, for logs.
func (f *ForwardAuth) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, deny %d;", f.proxy, f.denyStatus)
	for _, d := range f.descriptors {
		b.WriteString(" [")
		for i, e := range d {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.key + "=" + e.source())
		}
		b.WriteString("]")
	}
	return b.String()
}

func (e *authEntry) source() string {
	if e.from.Kind == 0 {
		return fmt.Sprintf("%q", e.value)
	}
	return e.from.String()
}

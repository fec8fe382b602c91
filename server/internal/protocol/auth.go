package protocol

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/keys"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// authPrefix is the forward-auth endpoint: exactly this path for nginx and
// Traefik, this path, the domain and the original path for Envoy's
// ext_authz.
const authPrefix = "/v1/auth"

// IsAuthPath reports whether the request is for the forward-auth
// endpoint. The router sends such requests to ServeAuth before
// http.ServeMux, which would answer a path holding "//" or ".." (the
// original path Envoy appends) with a redirect.
func IsAuthPath(p string) bool {
	return p == authPrefix || strings.HasPrefix(p, authPrefix+"/")
}

// ServeAuth is the forward-auth endpoint: see the server's documentation.
// It finds the domain in the URL, builds the request descriptors from the
// original request as the domain's forward_auth section says, decides
// them as one request, and answers 200 when allowed, or the section's
// deny_status (429, or 403 for nginx) with Retry-After when not. Both
// carry the RateLimit and RateLimit-Policy fields.
func (a *Adapters) ServeAuth(w http.ResponseWriter, r *http.Request) {
	snap := a.svc.Current()
	t, err := authTargetOf(r, snap.AuthDomain)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	fa := snap.Config.ForwardAuth(t.domain)
	if fa == nil {
		// Names no other domain: the client may be the one asking.
		httpError(w, http.StatusBadRequest, fmt.Sprintf("domain %q has no forward_auth section", keys.Clip(t.domain)))
		return
	}
	if want := fa.Proxy() == config.Envoy; t.envoy != want {
		httpError(w, http.StatusBadRequest, formMismatch(t.domain, fa.Proxy()))
		return
	}
	fr, err := a.authRequest(r, fa.Proxy(), t.original)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	descs := fa.Descriptors(fr.value)
	if fr.twice != "" {
		httpError(w, http.StatusBadRequest, fr.twice+": sent more than once; a limit keyed by it needs one")
		return
	}
	if len(descs) == 0 {
		w.WriteHeader(http.StatusOK) // nothing to limit the request by
		return
	}
	req := decide.NewRequest(t.domain, len(descs))
	for i, es := range descs {
		req.Descs[i] = decide.Descriptor{Entries: es, Hits: 1}
	}
	out, err := a.svc.Decide(r.Context(), snap, req, Auth)
	if err != nil {
		a.WriteDecideError(r.Context(), w, err)
		return
	}
	a.setHeaders(w, a.headersOf(out, true)) // headers.go
	if !out.Allowed {
		writeDenied(w, fa.DenyStatus(), out.Violated) // httplimit's body
		return
	}
	w.WriteHeader(http.StatusOK)
}

// authTarget is what the URL of a forward-auth request says.
type authTarget struct {
	domain string
	// envoy is the form /v1/auth/{domain}/…, the one Envoy's ext_authz
	// calls; else the URL is exactly /v1/auth.
	envoy bool
	// original is, in the envoy form, the original request's target: the
	// path after the domain segment and the query.
	original string
}

// authTargetOf reads the domain from the URL the proxy is configured
// with, never from anything the client sends: in the envoy form it is the
// segment after /v1/auth, and the query is the client's; at exactly
// /v1/auth (nginx and Traefik, whose auth URL the client cannot touch) it
// is the query parameter domain, or else the only domain with a
// forward_auth section (only, when one has one).
func authTargetOf(r *http.Request, only string) (authTarget, error) {
	p := r.URL.EscapedPath()
	if p == authPrefix {
		d := r.URL.Query().Get("domain")
		if d == "" {
			d = only
		}
		if d == "" {
			return authTarget{}, errors.New("domain: name it in the URL, /v1/auth?domain=NAME (nginx, Traefik) or /v1/auth/NAME/ (Envoy)")
		}
		return authTarget{domain: d}, nil
	}
	seg, rest, _ := strings.Cut(strings.TrimPrefix(p, authPrefix+"/"), "/")
	d, err := url.PathUnescape(seg)
	if err != nil || d == "" {
		return authTarget{}, fmt.Errorf("domain: want /v1/auth/DOMAIN/PATH, got an empty or malformed domain segment %q", keys.Clip(seg))
	}
	t := authTarget{domain: d, envoy: true, original: "/" + rest}
	if r.URL.RawQuery != "" {
		t.original += "?" + r.URL.RawQuery
	}
	return t, nil
}

// formMismatch explains a forward-auth URL that does not fit the proxy
// its domain names.
func formMismatch(domain string, p config.Proxy) string {
	if p == config.Envoy {
		return fmt.Sprintf("domain %q is for Envoy's ext_authz: set its http_service path_prefix to /v1/auth/%s", domain, url.PathEscape(domain))
	}
	return fmt.Sprintf("domain %q is for %s: call exactly /v1/auth (with ?domain=%s when several domains have forward_auth)", domain, p, url.QueryEscape(domain))
}

// The headers each proxy sets on the auth request: see authRequest.
const (
	hdrRealIP         = "X-Real-Ip"
	hdrOriginalURI    = "X-Original-Uri"
	hdrOriginalMethod = "X-Original-Method"
	hdrForwardedFor   = "X-Forwarded-For"
	hdrForwardedURI   = "X-Forwarded-Uri"
	hdrForwardedMeth  = "X-Forwarded-Method"
	hdrForwardedHost  = "X-Forwarded-Host"
)

// authRequest is what the forward-auth endpoint knows of the original
// request. Each proxy passes the client's own headers on to the auth
// request, so only the headers that proxy sets are read, and only when the
// peer is a trusted proxy:
//
//	proxy    client address                  method              path                      host
//	nginx    X-Real-IP                       X-Original-Method   X-Original-URI            Host
//	traefik  X-Forwarded-For (right-most)    X-Forwarded-Method  X-Forwarded-Uri           X-Forwarded-Host
//	envoy    X-Forwarded-For (right-most)    the request's       after /v1/auth/{domain}   Host
//
// A trusted peer that leaves out the address header is a misconfigured
// proxy, an error: keyed by the proxy's address, every client would share
// one bucket. From an untrusted peer no header is believed: the client is
// the peer, and the method and path are the auth request's own. The path
// (cleanPath) and the host (canonicalHost) are normalised before they are
// matched.
func (a *Adapters) authRequest(r *http.Request, p config.Proxy, envoyTarget string) (*original, error) {
	peer, ok := clientip.Parse(r.RemoteAddr)
	fr := &original{Method: r.Method, Host: r.Host, Header: r.Header}
	if ok {
		fr.ClientIP = keys.IP(peer)
	}
	target := envoyTarget
	if p != config.Envoy {
		target = r.URL.RequestURI()
	}
	if ok && a.svc.Trust.Contains(peer) {
		switch p {
		case config.Nginx:
			ip, err := realIP(r.Header)
			if err != nil {
				return nil, err
			}
			fr.ClientIP = keys.IP(ip)
			fr.Method = headerOr(r.Header, hdrOriginalMethod, fr.Method)
			target = headerOr(r.Header, hdrOriginalURI, target)
		case config.Traefik, config.Envoy:
			if len(r.Header[hdrForwardedFor]) == 0 {
				return nil, fmt.Errorf("%s: missing; the %s proxy must set it to the client's address", hdrForwardedFor, p)
			}
			fr.ClientIP = keys.IP(a.svc.Trust.Walk(peer, r.Header[hdrForwardedFor]))
			if p == config.Traefik {
				fr.Method = headerOr(r.Header, hdrForwardedMeth, fr.Method)
				target = headerOr(r.Header, hdrForwardedURI, target)
				fr.Host = headerOr(r.Header, hdrForwardedHost, fr.Host)
			}
		}
	}
	fr.Host = canonicalHost(fr.Host)
	path, rawQuery, _ := strings.Cut(target, "?")
	fr.Path = cleanPath(path)
	fr.Query, _ = url.ParseQuery(rawQuery) // what parses is kept
	return fr, nil
}

// original is what forward auth knows of the original request: not the
// auth request itself, but the request the proxy asks about.
type original struct {
	ClientIP string      // the client's address, keyed as keys.IP keys it
	Method   string      // GET, POST, ...
	Host     string      // normalised (canonicalHost)
	Path     string      // normalised (cleanPath), without the query
	Header   http.Header // the auth request's headers: the client's, as the proxy passed them
	Query    url.Values  // the original query's parameters
	// twice names the first header or query parameter forward auth reads
	// (any entry's, config.ForwardAuth.Descriptors asking for each) that
	// the request holds more than once: which one the application takes
	// is its own (the first, the last), so keying by either would let a
	// client count under a value it does not use.
	twice string
}

// value is the part of the request a forward_auth entry reads: the
// credentials of an Authorization or Proxy-Authorization header in one
// spelling (keys.Authorization), so that "bearer  T0K" keys as
// "Bearer T0K" does.
func (o *original) value(src config.Source) string {
	switch src.Kind {
	case config.ClientIP:
		return o.ClientIP
	case config.Method:
		return o.Method
	case config.Path:
		if src.CaseInsensitive {
			return foldPath(o.Path)
		}
		return o.Path
	case config.Host:
		return o.Host
	case config.Header:
		vs, v := o.Header.Values(src.Name), ""
		if len(vs) > 0 {
			v = vs[0]
		}
		if len(vs) > 1 && o.twice == "" {
			o.twice = "header " + src.Name
		}
		if src.Name == "Authorization" || src.Name == "Proxy-Authorization" {
			v = keys.Authorization(v)
		}
		return v
	case config.Query:
		vs := o.Query[src.Name]
		if len(vs) > 1 && o.twice == "" {
			o.twice = "query parameter " + keys.Clip(src.Name)
		}
		if len(vs) == 0 {
			return ""
		}
		return vs[0]
	}
	return ""
}

// realIP is the address in nginx's X-Real-IP, which must be one address.
func realIP(h http.Header) (netip.Addr, error) {
	vs := h[hdrRealIP]
	if len(vs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s: missing; nginx must set it to the client's address (proxy_set_header X-Real-IP $remote_addr)", hdrRealIP)
	}
	a, ok := clientip.Parse(strings.TrimSpace(vs[0]))
	if len(vs) > 1 || !ok {
		return netip.Addr{}, fmt.Errorf("%s: %q is not one address", hdrRealIP, keys.Clip(strings.Join(vs, ", ")))
	}
	return a, nil
}

// headerOr is the header's value, or def when it is absent or empty.
func headerOr(h http.Header, name, def string) string {
	if v := strings.TrimSpace(h.Get(name)); v != "" {
		return v
	}
	return def
}

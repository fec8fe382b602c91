package server

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/keys"
)

// authPrefix is the forward-auth endpoint. Envoy's ext_authz sends the
// original path after it.
const authPrefix = "/v1/auth"

// serveAuth is the forward-auth endpoint: GET /v1/auth for nginx
// auth_request and Traefik ForwardAuth, and any method on /v1/auth/PATH for
// Envoy's ext_authz. It builds the request descriptors from the original
// request as its domain's forward_auth section says, decides them as one
// request, and answers 200 when allowed, or the section's deny_status
// (429, or 403 for nginx) with Retry-After when not. Both carry the
// RateLimit and RateLimit-Policy fields.
//
// The domain is the query parameter "domain", or else the only domain
// with a forward_auth section.
func (s *Server) serveAuth(w http.ResponseWriter, r *http.Request) {
	snap := s.cur.Load()
	domain := r.URL.Query().Get("domain")
	if domain == "" {
		domain = snap.authDomain
	}
	if domain == "" {
		httpError(w, http.StatusBadRequest, fmt.Sprintf(
			"domain: name it with ?domain=; the domains with a forward_auth section are %q", snap.authDomains))
		return
	}
	fa := snap.cfg.ForwardAuth(domain)
	if fa == nil {
		httpError(w, http.StatusBadRequest, fmt.Sprintf(
			"domain %q has no forward_auth section; those that do are %q", domain, snap.authDomains))
		return
	}
	descs := fa.Descriptors(s.authRequest(r))
	if len(descs) == 0 {
		w.WriteHeader(http.StatusOK) // nothing to limit the request by
		return
	}
	req := &rlspb.RateLimitRequest{Domain: domain, Descriptors: make([]*ratelimitpb.RateLimitDescriptor, len(descs))}
	for i, d := range descs {
		es := make([]*ratelimitpb.RateLimitDescriptor_Entry, len(d))
		for k, e := range d {
			es[k] = &ratelimitpb.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		req.Descriptors[i] = &ratelimitpb.RateLimitDescriptor{Entries: es}
	}
	resp, err := s.decide(r.Context(), snap, req, endpointAuth)
	if err != nil {
		s.writeDecideError(r.Context(), w, err)
		return
	}
	h := w.Header()
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h.Set(hv.GetKey(), hv.GetValue())
	}
	if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
		httpError(w, fa.DenyStatus(), "rate limit exceeded")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// authRequest is what the forward-auth endpoint knows of the original
// request. The client's address comes from X-Forwarded-For (its right-most
// untrusted entry) or X-Real-IP, and only when the peer is a trusted
// proxy; else it is the peer. The method, URI and host come from the
// headers nginx (X-Original-Method, X-Original-URI), Traefik
// (X-Forwarded-Method, X-Forwarded-Uri, X-Forwarded-Host) or Envoy (the
// request itself) send.
func (s *Server) authRequest(r *http.Request) *config.Request {
	fr := &config.Request{
		ClientIP: s.clientIP(r),
		Method:   firstHeader(r.Header, "X-Original-Method", "X-Forwarded-Method"),
		Host:     firstHeader(r.Header, "X-Forwarded-Host"),
		Header:   r.Header,
	}
	if fr.Method == "" {
		fr.Method = r.Method
	}
	if fr.Host == "" {
		fr.Host = r.Host
	}
	uri := firstHeader(r.Header, "X-Original-Uri", "X-Forwarded-Uri")
	if uri == "" {
		// Envoy's ext_authz: the original path follows the prefix.
		uri = strings.TrimPrefix(r.URL.RequestURI(), authPrefix)
		if uri == "" || uri[0] == '?' {
			uri = "/" + uri
		}
	}
	path, rawQuery, _ := strings.Cut(uri, "?")
	if u, err := url.ParseRequestURI(uri); err == nil {
		path = u.Path
	}
	fr.Path = path
	fr.Query, _ = url.ParseQuery(rawQuery) // what parses is kept
	return fr
}

// clientIP is the client's address, keyed as httplimit.ClientIP keys it
// (IPv6 by /64), or "" when there is none.
func (s *Server) clientIP(r *http.Request) string {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return ""
	}
	if !s.trusted(peer) {
		return keys.IP(peer)
	}
	if len(r.Header["X-Forwarded-For"]) > 0 {
		if k, err := s.xff(r); err == nil {
			return k
		}
	}
	if a, ok := parseAddr(strings.TrimSpace(r.Header.Get("X-Real-Ip"))); ok {
		return keys.IP(a)
	}
	return keys.IP(peer)
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseAddr parses "ip" or "ip:port" ("[ip]:port" for IPv6) and
// normalises the address.
func parseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return keys.Addr(ap.Addr()), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return keys.Addr(a), true
	}
	return netip.Addr{}, false
}

func firstHeader(h http.Header, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(h.Get(n)); v != "" {
			return v
		}
	}
	return ""
}

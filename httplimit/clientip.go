package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/internal/keys"
)

// Bounds on the X-Forwarded-For walk, so that a hostile header costs a
// fixed amount of work however long it is.
const (
	// maxHops is how many X-Forwarded-For entries ClientIP examines, from
	// the right; a chain of more trusted proxies than this is not real.
	maxHops = 32
	// maxAddrLen is the longest entry parsed as an address: an IPv6
	// address with a zone and a port, in brackets, fits with room.
	maxAddrLen = 96
)

// ClientIP keys a request by the address of the client: IPv4 addresses as
// they are ("203.0.113.7"), IPv6 addresses by their /64 prefix
// ("2001:db8:1:2::/64"), since one host usually holds a whole /64. An
// IPv4-mapped IPv6 address ("::ffff:203.0.113.7") is its IPv4 address and
// zones are dropped.
//
// The client is the socket's peer (Request.RemoteAddr) unless that peer is
// in one of the trusted prefixes: your load balancers and proxies. Then
// ClientIP walks X-Forwarded-For from the right, entry by entry (several
// X-Forwarded-For fields count as one list, in order), skipping trusted
// addresses, and the first untrusted address is the client. Entries to the
// left of it were written by the client and are never read, so a client
// cannot choose its key by sending a forged header. An entry that is not
// an address (ports and brackets are accepted), or the end of the list, or
// more than 32 entries, stops the walk at the last trusted address seen:
// the client is then keyed by the proxy it came through.
//
// With no trusted prefixes, X-Forwarded-For is ignored. A RemoteAddr that
// is not an IP address (a Unix socket) is an error wrapping ErrNoKey. An
// invalid prefix (the zero netip.Prefix) makes every call fail, rather
// than silently leave a proxy untrusted.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	t := make(trustList, 0, len(trusted))
	for i, p := range trusted {
		if !p.IsValid() {
			err := fmt.Errorf("httplimit: ClientIP: trusted prefix %d (%v) is invalid", i, p)
			return func(*http.Request) (string, error) { return "", err }
		}
		t = append(t, normPrefix(p))
	}
	return func(r *http.Request) (string, error) {
		a, err := clientAddr(r, t)
		if err != nil {
			return "", err
		}
		return keys.IP(a), nil
	}
}

type trustList []netip.Prefix

func (t trustList) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr finds the client's address: see ClientIP.
func clientAddr(r *http.Request, trusted trustList) (netip.Addr, error) {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: remote address %q is not an IP address", ErrNoKey, keys.Clip(r.RemoteAddr))
	}
	if !trusted.contains(peer) {
		return peer, nil
	}
	last, hops := peer, 0
	vals := r.Header["X-Forwarded-For"]
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for v != "" {
			entry := v
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				entry, v = v[j+1:], v[:j]
			} else {
				v = ""
			}
			if hops++; hops > maxHops {
				return last, nil
			}
			entry = trimOWS(entry)
			if entry == "" {
				continue // empty list elements are allowed (RFC 9110 §5.6.1)
			}
			a, ok := parseAddr(entry)
			if !ok {
				return last, nil
			}
			if !trusted.contains(a) {
				return a, nil
			}
			last = a
		}
	}
	return last, nil
}

// trimOWS drops the optional whitespace (spaces and tabs) around a list
// element.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseAddr parses "ip", "ip:port", "[ip]" or "[ip]:port" and normalises
// the address (keys.Addr), so that trusted prefixes match it.
func parseAddr(s string) (netip.Addr, bool) {
	if s == "" || len(s) > maxAddrLen {
		return netip.Addr{}, false
	}
	var a netip.Addr
	var err error
	// Choose the form first: a failed parse allocates its error.
	switch {
	case s[0] == '[' && s[len(s)-1] == ']':
		a, err = netip.ParseAddr(s[1 : len(s)-1])
	case s[0] == '[' || strings.Count(s, ":") == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return keys.Addr(a), true
}

// normPrefix makes a trusted prefix comparable with normalised addresses:
// masked, and an IPv4-mapped prefix as IPv4.
func normPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// Package clientip finds a request's client behind trusted proxies: the
// address parsing, the trust check and the X-Forwarded-For walk that
// package httplimit's ClientIP and the service's forward auth share.
package clientip

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/internal/keys"
)

// Bounds on the X-Forwarded-For walk, so that a hostile header costs a
// fixed amount of work however long it is.
const (
	// MaxHops is how many X-Forwarded-For entries are examined, from the
	// right; a chain of more trusted proxies than this is not real.
	MaxHops = 32
	// maxAddrLen is the longest entry parsed as an address: an IPv6
	// address with a zone and a port, in brackets, fits with room.
	maxAddrLen = 96
)

// Trusted is a list of trusted proxies' prefixes, normalised so that they
// match normalised addresses (Parse).
type Trusted []netip.Prefix

// Trust returns the prefixes, normalised: masked, and an IPv4-mapped
// prefix as IPv4. An invalid prefix (the zero netip.Prefix) is an error
// naming its index, rather than a proxy silently left untrusted.
func Trust(prefixes ...netip.Prefix) (Trusted, error) {
	t := make(Trusted, 0, len(prefixes))
	for i, p := range prefixes {
		if !p.IsValid() {
			return nil, fmt.Errorf("trusted prefix %d (%v) is invalid", i, p)
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		t = append(t, p.Masked())
	}
	return t, nil
}

// Contains reports whether a, normalised, is a trusted proxy's.
func (t Trusted) Contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Walk finds the client in X-Forwarded-For (its fields in order, as
// http.Header holds them; several fields count as one list) behind a
// trusted peer: from the right, entry by entry, skipping trusted
// addresses, the first untrusted address is the client. Entries to the
// left of it were written by the client and are never read. An entry that
// is not an address, the end of the list, or more than MaxHops entries
// stop the walk at the last trusted address seen, starting with peer.
func (t Trusted) Walk(peer netip.Addr, xff []string) netip.Addr {
	last, hops := peer, 0
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			entry := v
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				entry, v = v[j+1:], v[:j]
			} else {
				v = ""
			}
			if hops++; hops > MaxHops {
				return last
			}
			entry = trimOWS(entry)
			if entry == "" {
				continue // empty list elements are allowed (RFC 9110 §5.6.1)
			}
			a, ok := Parse(entry)
			if !ok {
				return last
			}
			if !t.Contains(a) {
				return a
			}
			last = a
		}
	}
	return last
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

// Parse parses "ip", "ip:port", "[ip]" or "[ip]:port" and normalises the
// address (keys.Addr), so that trusted prefixes match it.
func Parse(s string) (netip.Addr, bool) {
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

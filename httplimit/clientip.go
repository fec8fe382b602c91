package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/keys"
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
	t, err := clientip.Trust(trusted...)
	if err != nil {
		err = fmt.Errorf("httplimit: ClientIP: %w", err)
		return func(*http.Request) (string, error) { return "", err }
	}
	return func(r *http.Request) (string, error) {
		a, err := clientAddr(r, t)
		if err != nil {
			return "", err
		}
		return keys.IP(a), nil
	}
}

// clientAddr finds the client's address: see ClientIP.
func clientAddr(r *http.Request, trusted clientip.Trusted) (netip.Addr, error) {
	peer, ok := clientip.Parse(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: remote address %q is not an IP address", ErrNoKey, keys.Clip(r.RemoteAddr))
	}
	if !trusted.Contains(peer) {
		return peer, nil
	}
	return trusted.Walk(peer, r.Header["X-Forwarded-For"]), nil
}

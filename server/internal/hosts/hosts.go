// Package hosts reads the Host of an HTTP request: which names a listener
// answers to, against DNS rebinding, for the service's HTTP endpoints and
// the admin console alike.
package hosts

import (
	"net"
	"strings"
)

// Set is a set of host names, lower-cased, for Allowed.
func Set(names []string) map[string]bool {
	hosts := make(map[string]bool, len(names))
	for _, h := range names {
		hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	return hosts
}

// Allowed reports whether a request's Host is one a listener answers
// to: an IP address, localhost, or one of hosts. DNS rebinding cannot
// send an IP address or localhost as Host: the browser sends the name of
// the page's own site.
func Allowed(hostport string, hosts map[string]bool) bool {
	host, _ := Split(hostport)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || hosts[host] {
		return true
	}
	return net.ParseIP(host) != nil
}

// Split splits a Host value into the host, lower-cased, without the
// brackets of an IPv6 address or the trailing dot of a fully qualified
// name (or dots), and the port, "" if none. It allocates nothing for a host in
// lower case, as net.SplitHostPort's error would for one without a port.
func Split(hostport string) (host, port string) {
	host = hostport
	// The last ':' begins a port unless it is inside brackets, or one
	// of a bare IPv6 address's.
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && strings.IndexByte(hostport[i:], ']') < 0 &&
		(hostport[0] == '[' || strings.IndexByte(hostport[:i], ':') < 0) {
		host, port = hostport[:i], hostport[i+1:]
	}
	host = strings.TrimRight(host, ".")
	if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return strings.ToLower(host), port
}

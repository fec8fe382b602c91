package protocol

import (
	"strings"

	"github.com/sluicehq/sluice/server/internal/hosts"
)

// canonicalHost is a Host value in one spelling for the ways a client may
// write one site's name, for forward auth to key by: lower-cased, without
// the trailing dot, and without a port. The port in a Host header is the
// client's to write: a proxy listens where it listens, and its host
// rules (nginx's $host, Traefik's Host, Envoy's domains "*") route
// "api.example.com:1" as "api.example.com", so a port kept would give the
// client a new key, and a new limit, with each. "API.example.com.:8443" is
// "api.example.com"; "[::1]:8443" is "[::1]".
func canonicalHost(hostport string) string {
	host, _ := hosts.Split(hostport)
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host
}

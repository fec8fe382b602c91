package protocol

import (
	"strings"

	"github.com/sluicehq/sluice/server/internal/hosts"
)

// canonicalHost is a Host value in one spelling for the ways a client may
// write one site's name, for forward auth to key by: lower-cased, without
// the trailing dot, and without the port when it is the default of http
// or https (80, 443), which the proxy routes as no port. "API.example.com.:443"
// is "api.example.com"; "[::1]:8443" keeps its brackets and port.
func canonicalHost(hostport string) string {
	host, port := hosts.Split(hostport)
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" || port == "80" || port == "443" {
		return host
	}
	return host + ":" + port
}

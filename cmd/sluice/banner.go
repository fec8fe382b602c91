package main

import (
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/sluicehq/sluice/server"
)

// banner is what printBanner says.
type banner struct {
	http, grpc net.Addr
	configs    []string
	domains    []string
	store      string
	shadow     bool
	o          *serveFlags
	mode       envoyMode
	ls         *listeners
	headers    server.HeaderStyle
}

func printBanner(w io.Writer, b banner) {
	cfg := "the built-in policy"
	switch {
	case b.o.xds.addr != "":
		cfg = b.o.xds.String() + " (each push takes effect as it comes)"
	case len(b.configs) > 0:
		cfg = strings.Join(b.configs, ", ") + " (reloaded on change and on SIGHUP)"
	}
	shadow := "off"
	if b.shadow {
		shadow = "on: every rule decides and counts, none denies"
	}
	admin := ""
	if b.ls.admin != nil {
		admin = adminBanner(b.ls.admin.Addr(), b.o.ui, b.o.keyLookup)
	}
	fmt.Fprintf(w, `sluice serve: the rate-limit service is up
  grpc     %s  envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1.Health, reflection
  http     %s  POST /json, GET /v1/auth, /metrics, /healthz, /readyz, /healthcheck
%s  config   %s
  domains  %s
  store    %s
  headers  %s
`, b.grpc, b.http, admin, cfg, strings.Join(b.domains, ", "), b.store, b.headers)
	if b.o.grpcTLS.cert != "" || b.o.httpTLS.cert != "" {
		fmt.Fprintf(w, "  tls      grpc %s, http %s\n", b.o.grpcTLS, b.o.httpTLS)
	}
	if b.ls.metrics != nil {
		fmt.Fprintf(w, "  metrics  %s  %s\n", b.ls.metrics.Addr(), b.o.metricsPath)
	}
	if t := &b.o.tracing; t.on {
		fmt.Fprintf(w, "  tracing  OTLP over %s to %s, service.name %s, sampling rate %v\n", t.via, t.endpoint, t.name, t.rate)
	}
	if b.mode.on {
		fmt.Fprintf(w, "  mode     envoy: envoyproxy/ratelimit's variables read (%s)\n", b.mode.why)
	}
	fmt.Fprintf(w, "  shadow   %s\n", shadow) // the banner's last line
}

// adminBanner is the banner's admin line.
func adminBanner(addr net.Addr, ui, lookup bool) string {
	what := "GET /v1/stats, GET /v1/policy, GET /v1/leases, GET /v1/rlqs"
	if ui {
		host, port, _ := net.SplitHostPort(addr.String())
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = "localhost"
		}
		what = "console http://" + net.JoinHostPort(host, port) + "/ui/, " + what + ", POST /v1/simulate"
	}
	if lookup {
		what += ", POST /v1/lookup (key lookup on)"
	}
	return fmt.Sprintf("  admin    %s  %s\n", addr, what)
}

package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/server"
)

// tracingFlags are the flags that trace the decisions with OpenTelemetry
// (server.Tracing). Where the spans go is the OpenTelemetry SDK's own
// business: the OTEL_EXPORTER_OTLP_* variables, which checkOTLPEnv checks
// at start.
type tracingFlags struct {
	on                             bool
	name, namespace, instance, via string
	rate                           float64
	// endpoint is where the spans go, as the variables say, for the
	// banner; set by settings.
	endpoint string
}

func (f *tracingFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "tracing", false, "")
	fs.StringVar(&f.name, "tracing-service-name", server.DefaultTracingServiceName, "")
	fs.StringVar(&f.namespace, "tracing-service-namespace", "", "")
	fs.StringVar(&f.instance, "tracing-service-instance-id", "", "")
	fs.Float64Var(&f.rate, "tracing-sampling-rate", 1, "")
	fs.StringVar(&f.via, "tracing-protocol", server.TracingHTTP, "")
}

// settings are the server.Tracing the flags name, nil for none. The
// OTEL_EXPORTER_OTLP_* variables are read through lookup, and checked
// only when tracing is on: they configure nothing else.
func (f *tracingFlags) settings(lookup func(string) (string, bool)) (*server.Tracing, error) {
	switch {
	case math.IsNaN(f.rate) || f.rate < 0 || f.rate > 1:
		return nil, fmt.Errorf("-tracing-sampling-rate %v: want a number from 0 to 1", f.rate)
	case f.via != server.TracingHTTP && f.via != server.TracingGRPC:
		return nil, fmt.Errorf("-tracing-protocol %q: want http or grpc", f.via)
	case !f.on:
		return nil, nil
	}
	if err := checkOTLPEnv(lookup); err != nil {
		return nil, err
	}
	f.endpoint = otlpEndpoint(lookup, f.via)
	return &server.Tracing{ServiceName: f.name, ServiceNamespace: f.namespace, ServiceInstanceID: f.instance,
		SamplingRate: f.rate, Protocol: f.via}, nil
}

// otlpEndpoint is where the SDK's exporter over protocol sends the spans,
// as the variables say: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is,
// OTEL_EXPORTER_OTLP_ENDPOINT with the traces' path for HTTP, or the
// SDK's default.
func otlpEndpoint(lookup func(string) (string, bool), protocol string) string {
	if v, ok := lookup("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); ok && v != "" {
		return v
	}
	v, ok := lookup("OTEL_EXPORTER_OTLP_ENDPOINT")
	switch {
	case protocol == server.TracingGRPC && ok && v != "":
		return v
	case protocol == server.TracingGRPC:
		return "localhost:4317 (TLS unless OTEL_EXPORTER_OTLP_INSECURE=true)"
	case ok && v != "":
		return strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	return "http://localhost:4318/v1/traces"
}

// otlpProtocol is the protocol the standard variables ask for,
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL's or else OTEL_EXPORTER_OTLP_PROTOCOL's,
// as -tracing-protocol names it, and the variable it came from; "" when
// neither is set.
func otlpProtocol(lookup func(string) (string, bool)) (protocol, name string, err error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v, ok := lookup(name)
		if !ok || v == "" {
			continue
		}
		switch strings.ToLower(v) {
		case "grpc":
			return server.TracingGRPC, name, nil
		case "http/protobuf":
			return server.TracingHTTP, name, nil
		}
		return "", name, fmt.Errorf("%s=%q: want grpc or http/protobuf (http/json is not implemented)", name, v)
	}
	return "", "", nil
}

// checkOTLPEnv refuses the OTEL_EXPORTER_OTLP_* values that the
// OpenTelemetry SDK's OTLP trace exporters would not use: the SDK logs
// such a value and goes on without it, so that a typo would send the
// spans nowhere, or in the clear, unnoticed. Each is checked as the SDK
// reads it, the per-signal OTEL_EXPORTER_OTLP_TRACES_* form as the general
// one.
func checkOTLPEnv(lookup func(string) (string, bool)) error {
	var errs []string
	for _, p := range []string{"OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_"} {
		for _, c := range otlpChecks {
			if v, ok := lookup(p + c.suffix); ok && !c.ok(v) {
				errs = append(errs, fmt.Sprintf("%s%s=%q: %s", p, c.suffix, v, c.want))
			}
		}
		if v, ok := lookup(p + "CERTIFICATE"); ok {
			if b, err := os.ReadFile(v); err != nil {
				errs = append(errs, fmt.Sprintf("%sCERTIFICATE=%q: %v", p, v, err))
			} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
				errs = append(errs, fmt.Sprintf("%sCERTIFICATE=%q: no PEM certificate in it", p, v))
			}
		}
		cert, certOK := lookup(p + "CLIENT_CERTIFICATE")
		key, keyOK := lookup(p + "CLIENT_KEY")
		switch {
		case certOK != keyOK:
			errs = append(errs, fmt.Sprintf("%sCLIENT_CERTIFICATE and %sCLIENT_KEY: set both or neither", p, p))
		case certOK:
			if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
				errs = append(errs, fmt.Sprintf("%sCLIENT_CERTIFICATE=%q and %sCLIENT_KEY=%q: %v", p, cert, p, key, err))
			}
		}
	}
	if v, ok := lookup("OTEL_RESOURCE_ATTRIBUTES"); ok && !validPairs(v) {
		errs = append(errs, fmt.Sprintf("OTEL_RESOURCE_ATTRIBUTES=%q: want name=value pairs separated by commas, URL-encoded", v))
	}
	if len(errs) > 0 {
		return fmt.Errorf("tracing: the OpenTelemetry variables:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// otlpChecks are checkOTLPEnv's checks of the variables whose value
// alone says whether it is good, by the name after OTEL_EXPORTER_OTLP_
// (or OTEL_EXPORTER_OTLP_TRACES_).
var otlpChecks = []struct {
	suffix string
	ok     func(string) bool
	want   string
}{
	{"ENDPOINT", func(v string) bool {
		u, err := url.Parse(v)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
	}, "want a URL such as http://collector:4318 (https:// for TLS)"},
	// The SDK reads "true" in any case as true, and anything else as false.
	{"INSECURE", func(v string) bool { return strings.EqualFold(v, "true") || strings.EqualFold(v, "false") }, "want true or false"},
	{"TIMEOUT", func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= 0 }, "want milliseconds, a whole number"},
	{"COMPRESSION", func(v string) bool { return v == "gzip" || v == "none" }, "want gzip or none"},
	{"HEADERS", validPairs, "want name=value pairs separated by commas, URL-encoded"},
}

// validPairs says whether s is name=value pairs separated by commas, each
// part URL-encoded, as the SDK reads OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES.
func validPairs(s string) bool {
	if strings.TrimSpace(s) == "" {
		return true
	}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return false
		}
		if _, err := url.PathUnescape(k); err != nil {
			return false
		}
		if _, err := url.PathUnescape(v); err != nil {
			return false
		}
	}
	return true
}

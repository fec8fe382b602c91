package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/server"
)

// xdsFlags are the flags of the config over xDS (server.XDS).
type xdsFlags struct {
	addr, nodeID, nodeMeta, headers          string
	connectRetry, backoffInitial, backoffMax time.Duration
	backoffRandom                            float64
	backoffJitter                            bool
	maxMsg                                   bytesFlag
	tls                                      bool
	tlsCA, tlsCert, tlsKey, tlsServerName    string
}

func (x *xdsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&x.addr, "xds", "", "")
	fs.StringVar(&x.nodeID, "xds-node-id", server.DefaultXDSNodeID, "")
	fs.StringVar(&x.nodeMeta, "xds-node-metadata", "", "")
	fs.StringVar(&x.headers, "xds-headers", "", "")
	fs.DurationVar(&x.connectRetry, "xds-connect-retry", server.DefaultXDSConnectRetry, "")
	fs.DurationVar(&x.backoffInitial, "xds-backoff-initial", server.DefaultXDSBackoffInitial, "")
	fs.DurationVar(&x.backoffMax, "xds-backoff-max", server.DefaultXDSBackoffMax, "")
	fs.Float64Var(&x.backoffRandom, "xds-backoff-random-factor", server.DefaultXDSBackoffRandom, "")
	fs.BoolVar(&x.backoffJitter, "xds-backoff-jitter", true, "")
	x.maxMsg = bytesFlag(server.DefaultXDSMaxMessageBytes)
	fs.Var(&x.maxMsg, "xds-max-msg-size", "")
	fs.BoolVar(&x.tls, "xds-tls", false, "")
	fs.StringVar(&x.tlsCA, "xds-tls-ca", "", "")
	fs.StringVar(&x.tlsCert, "xds-tls-cert", "", "")
	fs.StringVar(&x.tlsKey, "xds-tls-key", "", "")
	fs.StringVar(&x.tlsServerName, "xds-tls-server-name", "", "")
}

// settings are the server.XDS the flags name, nil without -xds.
func (x *xdsFlags) settings() (*server.XDS, error) {
	tlsFiles := x.tlsCA != "" || x.tlsCert != "" || x.tlsKey != "" || x.tlsServerName != ""
	switch {
	case x.addr == "":
		return nil, nil
	case x.connectRetry <= 0:
		return nil, fmt.Errorf("-xds-connect-retry %v must be positive", x.connectRetry)
	case x.backoffInitial <= 0 || x.backoffMax < x.backoffInitial:
		return nil, fmt.Errorf("-xds-backoff-initial %v must be positive and at most -xds-backoff-max %v", x.backoffInitial, x.backoffMax)
	case !(x.backoffRandom >= 0 && x.backoffRandom <= 1):
		return nil, fmt.Errorf("-xds-backoff-random-factor %v: want a number in [0, 1]", x.backoffRandom)
	case int64(x.maxMsg) > server.MaxXDSMessageBytes:
		return nil, fmt.Errorf("-xds-max-msg-size %d: at most %d (%d MiB)", x.maxMsg, server.MaxXDSMessageBytes, server.MaxXDSMessageBytes>>20)
	case (x.tlsCert == "") != (x.tlsKey == ""):
		return nil, errors.New("-xds-tls-cert and -xds-tls-key: a client certificate needs both")
	case tlsFiles && !x.tls:
		return nil, errors.New("-xds-tls-ca, -xds-tls-cert, -xds-tls-key and -xds-tls-server-name need -xds-tls")
	}
	meta, err := pairs(x.nodeMeta, "=")
	if err != nil {
		return nil, fmt.Errorf("-xds-node-metadata: %v", err)
	}
	headers, err := pairs(x.headers, ":")
	if err != nil {
		return nil, fmt.Errorf("-xds-headers: %v", err)
	}
	s := &server.XDS{
		Addr: x.addr, NodeID: x.nodeID, NodeMetadata: meta, Headers: headers,
		ConnectRetry:    x.connectRetry,
		Backoff:         &server.XDSBackoff{Initial: x.backoffInitial, Max: x.backoffMax, RandomFactor: x.backoffRandom, Jitter: x.backoffJitter},
		MaxMessageBytes: int(x.maxMsg),
	}
	if x.tls {
		s.TLS = &server.XDSTLS{CAFile: x.tlsCA, CertFile: x.tlsCert, KeyFile: x.tlsKey, ServerName: x.tlsServerName}
	}
	return s, nil
}

// String describes the source, for the banner.
func (x *xdsFlags) String() string {
	s := "xDS " + x.addr + " as node " + x.nodeID
	switch {
	case x.tlsCert != "":
		s += ", mTLS"
	case x.tls:
		s += ", TLS"
	}
	return s
}

// pairs reads KEY<sep>VALUE pairs separated by commas, as
// envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA (sep "=") and
// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS (sep ":") give them.
func pairs(s, sep string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, sep)
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("%q: want KEY%sVALUE pairs separated by commas", kv, sep)
		}
		m[k] = v
	}
	return m, nil
}

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/testredis"
)

// issue makes a certificate for the DNS name or IP, signed by parent
// (itself when nil), and returns it with its key and PEM.
func issue(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string, ca, client bool) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	switch {
	case ca:
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage, tmpl.ExtKeyUsage = true, true, x509.KeyUsageCertSign, nil
	case client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else if !ca {
		tmpl.DNSNames = []string{name}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, _ := x509.MarshalECPrivateKey(key)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// envoyproxy/ratelimit's mTLS variables put sluice serve's gRPC port
// under mTLS: Envoy with its client certificate is answered, a client
// without one is refused.
func TestServeMTLSFromEnv(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, caKey, caPEM, _ := issue(t, nil, nil, "test CA", true, false)
	_, _, srvCert, srvKey := issue(t, ca, caKey, "127.0.0.1", false, false)
	_, _, cliCert, cliKey := issue(t, ca, caKey, "envoy.mesh.local", false, true)
	withEnv(t,
		"GRPC_SERVER_USE_TLS", "true",
		"GRPC_SERVER_TLS_CERT", write("tls.crt", srvCert),
		"GRPC_SERVER_TLS_KEY", write("tls.key", srvKey),
		"GRPC_CLIENT_TLS_CACERT", write("ca.crt", caPEM),
		"GRPC_CLIENT_TLS_SAN", "envoy.mesh.local",
		"USE_STATSD", "false",
	)
	// The memory store: the flag wins.
	s := startServe(t, "-config", writeConfig(t, serveYAML), "-redis", "")
	if s.banner["tls"] != "grpc mTLS, SAN envoy.mesh.local, http off" {
		t.Errorf("banner tls %q", s.banner["tls"])
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cert, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	call := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(s.addr("grpc"), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{
			Domain:      "shop",
			Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "tls"}}}},
		})
		return err
	}
	if err := call(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}); err != nil {
		t.Errorf("with Envoy's client certificate: %v", err)
	}
	if err := call(&tls.Config{RootCAs: pool}); err == nil {
		t.Error("without a client certificate: answered, want refused")
	}
}

// tlsRedis is a redis-server that takes only TLS and requires a client
// certificate, with the files a client needs.
type tlsRedis struct{ addr, ca, cert, key string }

// startTLSRedis starts one whose certificate names serverName, with
// redis-server's extra arguments.
func startTLSRedis(t *testing.T, serverName string, extra ...string) tlsRedis {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, caKey, caPEM, _ := issue(t, nil, nil, "redis CA", true, false)
	_, _, srvCert, srvKey := issue(t, ca, caKey, serverName, false, false)
	_, _, cliCert, cliKey := issue(t, ca, caKey, "sluice", false, true)
	r := tlsRedis{ca: write("ca.crt", caPEM), cert: write("client.crt", cliCert), key: write("client.key", cliKey)}
	p := startRedisProc(t, "redis-server", append([]string{"--port", "0", "--tls-port", testredis.PortArg,
		"--tls-cert-file", write("redis.crt", srvCert), "--tls-key-file", write("redis.key", srvKey),
		"--tls-ca-cert-file", r.ca, "--tls-auth-clients", "yes"}, extra...)...)
	r.addr = p.addr
	return r
}

// sluice serve reaches a Redis that takes only TLS and requires a client
// certificate, by REDIS_TLS and REDIS_TLS_* (-redis-tls and its flags).
// A certificate for another name is refused, unless
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, which still checks its chain.
func TestServeRedisTLS(t *testing.T) {
	for _, tt := range []struct {
		name       string
		serverName string
		skip       string
		counts     bool // else Redis fails and the rule fails open
	}{
		{"the right name", "127.0.0.1", "false", true},
		{"another name", "redis.example", "false", false},
		{"another name, skip hostname verification", "redis.example", "true", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := startTLSRedis(t, tt.serverName)
			withEnv(t, "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", r.addr, "REDIS_TLS", "true",
				"REDIS_TLS_CACERT", r.ca, "REDIS_TLS_CLIENT_CERT", r.cert, "REDIS_TLS_CLIENT_KEY", r.key,
				"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", tt.skip, "USE_STATSD", "false")
			s := startServe(t, "-config", writeConfig(t, serveYAML))
			if want := "redis redis://" + r.addr + " (TLS)"; s.banner["store"] != want {
				t.Errorf("banner store %q, want %q", s.banner["store"], want)
			}
			user := fmt.Sprint("tls", time.Now().UnixNano())
			stableWindow(time.Minute, 5*time.Second)
			third := map[bool]int{true: 429, false: 200}[tt.counts]
			for i, want := range []int{200, 200, third} {
				if code, body := s.postJSON(t, "shop", "user", user); code != want {
					t.Errorf("request %d: %d %s, want %d", i+1, code, body, want)
				}
			}
		})
	}
}

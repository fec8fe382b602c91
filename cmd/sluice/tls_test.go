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
	// The memory store and no debug port: the flags win.
	s := startServe(t, "-config", writeConfig(t, serveYAML), "-redis", "", "-debug", "")
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
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
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

package server

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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testCA is a certificate authority the test makes.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a certificate for the names (DNS names or IP addresses),
// for a server or a client, and returns its PEM certificate and key.
func (ca *testCA) issue(t *testing.T, serial int64, client bool, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// clientCert is a client's tls.Certificate from ca for the names.
func (ca *testCA) clientCert(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, 100, true, names...)
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// writeAtomic replaces a file as a rotation does: the new content appears
// whole.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsDir writes a server certificate (with the serial) and the client CA
// into a directory and returns the TLS that names them.
func tlsDir(t *testing.T, ca *testCA, serial int64, clientCA *testCA, san string) *TLS {
	t.Helper()
	dir := t.TempDir()
	c, k := ca.issue(t, serial, false, "localhost", "127.0.0.1")
	tl := &TLS{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientSAN: san}
	writeAtomic(t, tl.CertFile, c)
	writeAtomic(t, tl.KeyFile, k)
	if clientCA != nil {
		tl.ClientCAFile = filepath.Join(dir, "ca.crt")
		writeAtomic(t, tl.ClientCAFile, clientCA.pem)
	}
	return tl
}

// tlsEnv is a server on TLS ports.
type tlsEnv struct {
	srv        *Server
	grpc, http string // addresses
}

func startTLS(t *testing.T, cfg Settings) *tlsEnv {
	t.Helper()
	srv, _ := newServer(t, cfg)
	hl, gl := listen(t), listen(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, hl, gl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return &tlsEnv{srv: srv, grpc: gl.Addr().String(), http: hl.Addr().String()}
}

// call makes one RLS call over a new connection with the client config,
// and returns its error.
func (e *tlsEnv) call(t *testing.T, tc *tls.Config) error {
	t.Helper()
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(e.grpc, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlReq("test", 0, "user=tls"))
	if err == nil && resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Errorf("over TLS: %v, want OK", resp)
	}
	return err
}

func clientTLS(ca *testCA, certs ...tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: certs}
}

// Under mTLS, gRPC and POST /json answer only a client whose certificate
// the client CA signed, and that names the SAN asked for; any other
// client is refused in the handshake.
func TestMTLS(t *testing.T) {
	serverCA, clientCA, otherCA := newCA(t, "server CA"), newCA(t, "client CA"), newCA(t, "another CA")
	tl := tlsDir(t, serverCA, 1, clientCA, "envoy.mesh.local")
	e := startTLS(t, Settings{GRPCTLS: tl, HTTPTLS: tl})

	good := clientCA.clientCert(t, "envoy.mesh.local")
	tests := []struct {
		name string
		tc   *tls.Config
		ok   bool
	}{
		{"the right client", clientTLS(serverCA, good), true},
		{"no client certificate", clientTLS(serverCA), false},
		{"a certificate of another CA", clientTLS(serverCA, otherCA.clientCert(t, "envoy.mesh.local")), false},
		{"the client CA, another SAN", clientTLS(serverCA, clientCA.clientCert(t, "intruder.mesh.local")), false},
		{"plain text", nil, false},
	}
	for _, tt := range tests {
		t.Run("grpc/"+tt.name, func(t *testing.T) {
			if err := e.call(t, tt.tc); (err == nil) != tt.ok {
				t.Errorf("ShouldRateLimit: err = %v, want ok %v", err, tt.ok)
			}
		})
		t.Run("http/"+tt.name, func(t *testing.T) {
			scheme, tr := "https", &http.Transport{TLSClientConfig: tt.tc}
			if tt.tc == nil {
				scheme, tr = "http", &http.Transport{}
			}
			defer tr.CloseIdleConnections()
			body := `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"tls-http"}]}]}`
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post(scheme+"://"+e.http+"/json", "application/json", strings.NewReader(body))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = &net.AddrError{Err: resp.Status}
				}
			}
			if (err == nil) != tt.ok {
				t.Errorf("POST /json: err = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// Plain TLS (no client CA) serves any client that trusts the server.
func TestTLSWithoutClientCerts(t *testing.T) {
	ca := newCA(t, "server CA")
	e := startTLS(t, Settings{GRPCTLS: tlsDir(t, ca, 1, nil, "")})
	if err := e.call(t, clientTLS(ca)); err != nil {
		t.Errorf("TLS without client certificates: %v", err)
	}
	if err := e.call(t, nil); err == nil {
		t.Error("plain text to a TLS port: no error")
	}
}

// A rotated certificate is served to new connections without a restart;
// files that do not load leave the last good certificate serving.
func TestTLSRotation(t *testing.T) {
	ca := newCA(t, "server CA")
	logs := &logBuffer{}
	tl := tlsDir(t, ca, 1, nil, "")
	e := startTLS(t, Settings{GRPCTLS: tl, HTTPTLS: tl, Logger: logs.logger()})
	serial := func(addr string, alpn string) int64 {
		tc := clientTLS(ca)
		tc.NextProtos = []string{alpn}
		c, err := tls.Dial("tcp", addr, tc)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	// waitSerial dials until the server presents the serial, or fails
	// after a deadline far beyond TLSCheckInterval.
	waitSerial := func(addr, alpn string, want int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for serial(addr, alpn) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s still presents serial %d, want %d, after 30s", addr, serial(addr, alpn), want)
			}
			time.Sleep(50 * time.Millisecond) // the server checks its files on its own time
		}
	}
	if s := serial(e.grpc, "h2"); s != 1 {
		t.Fatalf("serial %d at start, want 1", s)
	}
	// An old connection stays up across the rotation.
	conn, err := grpc.NewClient(e.grpc, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(ca))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	if _, err := rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=old")); err != nil {
		t.Fatal(err)
	}

	c2, k2 := ca.issue(t, 2, false, "localhost", "127.0.0.1")
	writeAtomic(t, tl.KeyFile, k2)
	writeAtomic(t, tl.CertFile, c2)
	waitSerial(e.grpc, "h2", 2)
	waitSerial(e.http, "http/1.1", 2)
	if err := e.call(t, clientTLS(ca)); err != nil {
		t.Errorf("a new connection after the rotation: %v", err)
	}
	if _, err := rls.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=old")); err != nil {
		t.Errorf("the connection made before the rotation: %v", err)
	}

	// A key that does not match the certificate: logged at a handshake,
	// and serial 2 stays.
	_, k3 := ca.issue(t, 3, false, "localhost")
	writeAtomic(t, tl.KeyFile, k3)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "do not load") {
		if s := serial(e.grpc, "h2"); s != 2 {
			t.Fatalf("after a bad rotation, serial %d, want the last good one, 2", s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log of the bad files after 30s:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := serial(e.grpc, "h2"); s != 2 {
		t.Errorf("after a bad rotation, serial %d, want the last good one, 2", s)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	ca := newCA(t, "server CA")
	good := tlsDir(t, ca, 1, ca, "")
	tests := []struct {
		name string
		tl   TLS
		want string
	}{
		{"no key", TLS{CertFile: good.CertFile}, "needs both CertFile and KeyFile"},
		{"SAN without CA", TLS{CertFile: good.CertFile, KeyFile: good.KeyFile, ClientSAN: "x"}, "ClientSAN needs ClientCAFile"},
		{"missing file", TLS{CertFile: good.CertFile + ".missing", KeyFile: good.KeyFile}, "no such file"},
		{"key for the CA", TLS{CertFile: good.CertFile, KeyFile: good.ClientCAFile}, "TLS certificate"},
		{"CA not PEM", TLS{CertFile: good.CertFile, KeyFile: good.KeyFile, ClientCAFile: good.KeyFile}, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := tt.tl
			_, err := New(Settings{Store: newStore(t), GRPCTLS: &tl})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

package server

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLS serves a port over TLS. The files are PEM, read when the Server is
// made and checked again for a change at most every TLSCheckInterval, at a
// new connection's handshake: a rotated certificate (a Kubernetes Secret's
// symlink swap, cert-manager's renewal) is served to the connections made
// after it, without a restart, while the connections already open keep
// theirs. Files that change into something that does not load (a
// certificate written before its key) are logged, and the last good ones
// keep serving until they load.
type TLS struct {
	// CertFile and KeyFile are the server's certificate chain and its
	// private key. Both are required.
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, requires every client to present a
	// certificate that one of these CAs signed, for client
	// authentication (mTLS): a client without one is refused in the
	// handshake. Empty asks for no client certificate.
	ClientCAFile string
	// ClientSAN, when set, further requires the client certificate to
	// name it among its subject alternative names: a DNS name (wildcards
	// in the certificate match, as for a server name) or an IP address.
	// It needs ClientCAFile.
	ClientSAN string
}

// TLSCheckInterval is the most often a TLS listener reads its files to
// see whether they changed.
const TLSCheckInterval = time.Second

func (t *TLS) validate() error {
	switch {
	case t == nil:
		return nil
	case t.CertFile == "" || t.KeyFile == "":
		return errors.New("TLS needs both CertFile and KeyFile")
	case t.ClientSAN != "" && t.ClientCAFile == "":
		return errors.New("TLS.ClientSAN needs ClientCAFile: a SAN is checked only on a verified client certificate")
	}
	return nil
}

// tlsFiles is a TLS listener's config, made from its files and made again
// when they change.
type tlsFiles struct {
	t    TLS
	alpn []string // the protocols offered: h2 for gRPC, http/1.1 for HTTP
	log  *slog.Logger

	cur     atomic.Pointer[tlsLoaded]
	checkMu sync.Mutex        // held by the one handshake that reads the files
	badSum  [sha256.Size]byte // of the last content that did not load; under checkMu
	start   time.Time         // for monotonic times
	next    atomic.Int64      // time.Since(start) at which to read the files again
}

// tlsLoaded is one reading of the files that loaded.
type tlsLoaded struct {
	sum  [sha256.Size]byte // of the files' bytes
	conf *tls.Config
}

// newTLSFiles reads t's files: an error names the file that does not
// load.
func newTLSFiles(t TLS, alpn []string, log *slog.Logger) (*tlsFiles, error) {
	f := &tlsFiles{t: t, alpn: alpn, log: log, start: time.Now()}
	sum, data, err := f.read()
	if err != nil {
		return nil, err
	}
	conf, err := f.build(data)
	if err != nil {
		return nil, err
	}
	f.cur.Store(&tlsLoaded{sum: sum, conf: conf})
	f.next.Store(int64(TLSCheckInterval))
	return f, nil
}

// config is the tls.Config to serve with: each handshake gets the
// current one from the files.
func (f *tlsFiles) config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         f.alpn,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.current(), nil },
	}
}

// current returns the config of the files as last loaded, reading them
// first if TLSCheckInterval has passed since the last reading and no other
// handshake is reading them.
func (f *tlsFiles) current() *tls.Config {
	now := int64(time.Since(f.start))
	if now >= f.next.Load() && f.checkMu.TryLock() {
		f.reload(now)
		f.checkMu.Unlock()
	}
	return f.cur.Load().conf
}

// reload reads the files and, if they changed and load, serves them.
// f.checkMu is held.
func (f *tlsFiles) reload(now int64) {
	f.next.Store(now + int64(TLSCheckInterval))
	sum, data, err := f.read()
	if err == nil && (sum == f.cur.Load().sum || sum == f.badSum) {
		return
	}
	var conf *tls.Config
	if err == nil {
		if conf, err = f.build(data); err != nil {
			f.badSum = sum // logged once per content
		}
	}
	if err != nil {
		// A half-written rotation is read again at the next check.
		f.log.Error("TLS files changed but do not load; the last good certificate keeps serving", "cert", f.t.CertFile, "err", err)
		return
	}
	f.cur.Store(&tlsLoaded{sum: sum, conf: conf})
	f.log.Info("TLS certificate reloaded", "cert", f.t.CertFile, "key", f.t.KeyFile, "client_ca", f.t.ClientCAFile)
}

// tlsData is the content of a TLS's files.
type tlsData struct{ cert, key, ca []byte }

// read reads the files and hashes them together.
func (f *tlsFiles) read() ([sha256.Size]byte, tlsData, error) {
	var d tlsData
	var err error
	if d.cert, err = os.ReadFile(f.t.CertFile); err != nil {
		return [sha256.Size]byte{}, d, fmt.Errorf("TLS certificate: %w", err)
	}
	if d.key, err = os.ReadFile(f.t.KeyFile); err != nil {
		return [sha256.Size]byte{}, d, fmt.Errorf("TLS key: %w", err)
	}
	if f.t.ClientCAFile != "" {
		if d.ca, err = os.ReadFile(f.t.ClientCAFile); err != nil {
			return [sha256.Size]byte{}, d, fmt.Errorf("TLS client CA: %w", err)
		}
	}
	h := sha256.New()
	for _, b := range [][]byte{d.cert, d.key, d.ca} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, d, nil
}

// build makes the per-connection config from the files' content.
func (f *tlsFiles) build(d tlsData) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(d.cert, d.key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", f.t.CertFile, f.t.KeyFile, err)
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   f.alpn,
	}
	if f.t.ClientCAFile == "" {
		return c, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(d.ca) {
		return nil, fmt.Errorf("TLS client CA %s: no PEM certificate in it", f.t.ClientCAFile)
	}
	c.ClientCAs = pool
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if san := f.t.ClientSAN; san != "" {
		// Called after the chain is verified against ClientCAs.
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: no client certificate")
			}
			if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
				return fmt.Errorf("tls: the client certificate does not name %q: %w", san, err)
			}
			return nil
		}
	}
	return c, nil
}

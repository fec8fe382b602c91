package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// XDS is a config source: an xDS control plane that pushes
// envoyproxy/ratelimit's RateLimitConfig resources
// (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig),
// state of the world over ADS, as Envoy Gateway's does. Each resource is
// one domain, in the format of a config file (see xdsDocument). Each push
// takes effect as a reload of files does: at once and whole for the
// requests that start after it; one that does not load is refused to the
// control plane (a NACK carrying its errors) and the last good config
// keeps serving. A resource the control plane withdraws takes its domain
// with it. When the connection ends, the server connects again, after
// Backoff, and keeps serving the config it has meanwhile.
//
// Until the first push loads, the server serves no domain, and reports
// itself not ready (/readyz, /healthcheck, gRPC health), as
// envoyproxy/ratelimit, which does not serve until then; with
// Settings.StartWithoutConfig it is ready at once, as
// FORCE_START_WITHOUT_INITIAL_CONFIG makes envoyproxy/ratelimit.
type XDS struct {
	// Addr is the control plane's address, HOST:PORT (or any gRPC
	// target). Required.
	Addr string
	// NodeID names this server to the control plane, which keys the
	// config it sends by it. The default is "default", as
	// envoyproxy/ratelimit's.
	NodeID string
	// NodeMetadata is the node's metadata, each value a string.
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata with the stream (an
	// authorization header, say).
	Headers map[string]string
	// TLS, when set, reaches the control plane over TLS.
	TLS *XDSTLS
	// ConnectRetry is the wait, give or take half, before another
	// attempt after one that got no answer from the control plane. The
	// default is 3s.
	ConnectRetry time.Duration
	// Backoff is the wait before connecting again after a stream that
	// the control plane answered ended. Nil is envoyproxy/ratelimit's
	// defaults.
	Backoff *XDSBackoff
	// MaxMessageBytes bounds one message from the control plane: a
	// larger push is refused by gRPC, and the stream starts again. The
	// default is 4 MiB, gRPC's; at most MaxXDSMessageBytes.
	MaxMessageBytes int
}

// XDSTLS reaches the control plane over TLS, with a client certificate
// when CertFile and KeyFile are set (mTLS). The files are PEM, read at
// each connection, so that a rotated certificate is used from the next
// one on.
type XDSTLS struct {
	// CAFile is the CAs the control plane's certificate must chain to;
	// empty is the system's.
	CAFile string
	// CertFile and KeyFile are this server's client certificate and
	// key: both or neither.
	CertFile, KeyFile string
	// ServerName is the name the control plane's certificate must hold;
	// empty is Addr's host.
	ServerName string
}

// XDSBackoff is the wait before connecting again after a stream ended: it
// starts at Initial and doubles at each attempt up to Max, and, with
// Jitter, is spread by RandomFactor either way (0.5: from half to one and
// a half of it), so that the servers of a fleet do not all call at once.
// It starts over once a stream delivers a push.
type XDSBackoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	Jitter       bool
}

// Defaults of XDS, envoyproxy/ratelimit's.
const (
	DefaultXDSNodeID          = "default"
	DefaultXDSConnectRetry    = 3 * time.Second
	DefaultXDSBackoffInitial  = 10 * time.Second
	DefaultXDSBackoffMax      = 60 * time.Second
	DefaultXDSBackoffRandom   = 0.5
	DefaultXDSMaxMessageBytes = 4 << 20
	// MaxXDSMessageBytes bounds XDS.MaxMessageBytes: a config at the
	// config package's caps fits well within it.
	MaxXDSMessageBytes = 256 << 20
	// MaxXDSResources is the most resources, and so domains, one push
	// may hold (config.MaxDocuments); the caps on a config's
	// descriptors and limits (config.MaxItems) hold for a push as for
	// files.
	MaxXDSResources = config.MaxDocuments
)

// rateLimitConfigType is the type URL of the resources the server asks for.
const rateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// withDefaults checks x and fills in its defaults.
func (x XDS) withDefaults() (*XDS, error) {
	switch {
	case x.Addr == "":
		return nil, errors.New("XDS.Addr: the control plane's address is required")
	case x.ConnectRetry < 0:
		return nil, fmt.Errorf("XDS.ConnectRetry %v must not be negative", x.ConnectRetry)
	case x.MaxMessageBytes < 0 || x.MaxMessageBytes > MaxXDSMessageBytes:
		return nil, fmt.Errorf("XDS.MaxMessageBytes %d must be between 0 (the default, %d) and %d", x.MaxMessageBytes, DefaultXDSMaxMessageBytes, MaxXDSMessageBytes)
	}
	if x.NodeID == "" {
		x.NodeID = DefaultXDSNodeID
	}
	if x.ConnectRetry == 0 {
		x.ConnectRetry = DefaultXDSConnectRetry
	}
	if x.MaxMessageBytes == 0 {
		x.MaxMessageBytes = DefaultXDSMaxMessageBytes
	}
	b := XDSBackoff{Initial: DefaultXDSBackoffInitial, Max: DefaultXDSBackoffMax, RandomFactor: DefaultXDSBackoffRandom, Jitter: true}
	if x.Backoff != nil {
		b = *x.Backoff
	}
	switch {
	case b.Initial <= 0 || b.Max < b.Initial:
		return nil, fmt.Errorf("XDS.Backoff: Initial %v must be positive and at most Max %v", b.Initial, b.Max)
	case b.RandomFactor < 0 || b.RandomFactor > 1:
		return nil, fmt.Errorf("XDS.Backoff.RandomFactor %v must be in [0, 1]", b.RandomFactor)
	}
	x.Backoff = &b
	if t := x.TLS; t != nil {
		if (t.CertFile == "") != (t.KeyFile == "") {
			return nil, errors.New("XDS.TLS: CertFile and KeyFile go together")
		}
		tc := *t
		x.TLS = &tc
		if _, err := tc.config(); err != nil { // read now, to refuse bad files at start
			return nil, fmt.Errorf("XDS.TLS: %w", err)
		}
	}
	return &x, nil
}

// config reads t's files into a client TLS config.
func (t *XDSTLS) config() (*tls.Config, error) {
	c := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in it", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// xdsClient keeps a stream to the control plane open and hands each push
// to the server.
type xdsClient struct {
	s    *Server
	x    *XDS
	node *corepb.Node
	// acked is the version of the config in force, sent again when a
	// stream starts so that a control plane holding the same version
	// sends nothing new.
	acked string
	// refused is the version of the last push refused, and refusedErr
	// why.
	refused    string
	refusedErr error
}

func newXDSClient(s *Server, x *XDS) *xdsClient {
	fields := make(map[string]*structpb.Value, len(x.NodeMetadata))
	for k, v := range x.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	return &xdsClient{s: s, x: x, node: &corepb.Node{Id: x.NodeID, Metadata: &structpb.Struct{Fields: fields}}}
}

// run keeps a stream to the control plane until ctx ends, connecting
// again after ConnectRetry or the backoff whenever one ends.
func (c *xdsClient) run(ctx context.Context) {
	attempt := 0 // since the last stream that delivered a push
	for {
		answered, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		if answered {
			attempt = 0
		}
		if answered || attempt > 0 {
			wait = c.backoff(attempt)
			attempt++
		} else {
			wait = spread(c.x.ConnectRetry, 0.5)
		}
		c.s.log.WarnContext(ctx, "xDS: the stream to the control plane ended; connecting again", "addr", c.x.Addr, "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff is the wait before the attempt-th attempt to connect again.
func (c *xdsClient) backoff(attempt int) time.Duration {
	b := c.x.Backoff
	d := b.Initial
	for range min(attempt, 62) {
		if d >= b.Max/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter {
		d = min(spread(d, b.RandomFactor), b.Max)
	}
	return d
}

// spread is d multiplied by a random factor in [1-f, 1+f].
func spread(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*rand.Float64()))
}

// stream opens one connection and stream to the control plane and
// serves the pushes on it until it ends. answered says a push came.
func (c *xdsClient) stream(ctx context.Context) (answered bool, err error) {
	creds := insecure.NewCredentials()
	if c.x.TLS != nil {
		tc, err := c.x.TLS.config()
		if err != nil {
			return false, fmt.Errorf("TLS: %w", err)
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(c.x.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.x.MaxMessageBytes)))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.x.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.x.Headers))
	}
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(&discoverypb.DiscoveryRequest{Node: c.node, TypeUrl: rateLimitConfigType, VersionInfo: c.acked}); err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return answered, err
		}
		answered = true
		req := &discoverypb.DiscoveryRequest{Node: c.node, TypeUrl: rateLimitConfigType, ResponseNonce: resp.GetNonce()}
		v := resp.GetVersionInfo()
		// A push refused right after a refused one: a snapshot cache
		// answers a NACK by sending what it holds once more, at once,
		// and a control plane without versions cannot be told apart by
		// them. Its NACK waits ConnectRetry so that the two do not spin.
		again := c.refusedErr != nil
		var nack error
		if v != "" && v == c.refused {
			nack = c.refusedErr // the version refused last: not loaded again
		} else if nack = c.s.applyXDS(ctx, resp); nack == nil {
			c.acked, c.refused, c.refusedErr = v, "", nil
		} else {
			c.refused, c.refusedErr = v, nack
		}
		if nack != nil && again {
			t := time.NewTimer(c.x.ConnectRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return answered, ctx.Err()
			case <-t.C:
			}
		}
		if nack != nil {
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: nack.Error()}
		}
		req.VersionInfo = c.acked
		if err := st.Send(req); err != nil {
			return answered, err
		}
	}
}

// applyXDS installs the config a push holds, if it loads, as apply does
// for files; the error, if not, is what the NACK carries.
func (s *Server) applyXDS(ctx context.Context, resp *discoverypb.DiscoveryResponse) error {
	if err := s.reloadMu.lock(ctx); err != nil {
		return err
	}
	defer s.reloadMu.unlock()
	version := resp.GetVersionInfo()
	c, err := s.loadXDS(resp)
	var rules []*decide.Limit
	if err == nil {
		rules, err = s.prepare(c)
	}
	now := s.cfg.Clock.Now()
	s.admin.Reloaded(now, err)
	s.st.configLoaded(err)
	if err != nil {
		s.m.reloads.WithLabelValues("failure").Inc()
		s.log.ErrorContext(ctx, "xDS: the config pushed does not load: refused (NACK); the last good config keeps serving",
			"version", version, "err", err)
		return err
	}
	old := s.cur.Load()
	snap := newSnapshot(c, rules, old, "", now)
	snap.version = version
	s.install(snap)
	s.m.reloads.WithLabelValues("success").Inc()
	s.log.InfoContext(ctx, "xDS: config loaded", "version", version, "domains", c.Domains(), "rules", len(snap.Rules))
	s.setConfigured()
	return nil
}

package httpclient_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// pipeListener is a net.Listener of in-memory connections (net.Pipe), so
// that an httptest.Server and its client run entirely inside a
// testing/synctest bubble: blocked on channels, never on the network, and
// so fake time can pass.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe.test" }

// startServer runs h on a real httptest.Server over a pipe listener and
// returns it with a base transport that dials it. Call it inside the
// bubble; both are closed when the test ends.
func startServer(t *testing.T, h http.Handler) (*httptest.Server, *http.Transport) {
	t.Helper()
	ln := newPipeListener()
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	base := &http.Transport{DialContext: ln.DialContext}
	t.Cleanup(func() {
		base.CloseIdleConnections()
		srv.Close()
	})
	return srv, base
}

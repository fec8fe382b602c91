package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/server"
)

// listeners are the service's sockets: HTTP and gRPC, which the server
// serves, the admin listener, which the server serves beside them, and
// the metrics listener, which the command serves.
type listeners struct {
	http, grpc     net.Listener
	admin, metrics net.Listener // nil when not asked for

	side []*http.Server
	wg   sync.WaitGroup
}

// listenAll opens every listener the flags ask for, or none.
func listenAll(ctx context.Context, o *serveFlags, srv *server.Server) (_ *listeners, err error) {
	var lc net.ListenConfig
	ls := &listeners{}
	defer func() {
		if err != nil {
			for _, ln := range []net.Listener{ls.http, ls.grpc} {
				if ln != nil {
					ln.Close()
				}
			}
			ls.close()
		}
	}()
	if ls.http, err = lc.Listen(ctx, "tcp", o.httpAddr); err != nil {
		return nil, fmt.Errorf("-http: %w", err)
	}
	if o.grpcUDS != "" {
		if ls.grpc, err = lc.Listen(ctx, "unix", o.grpcUDS); err != nil {
			return nil, fmt.Errorf("-grpc-uds: %w", err)
		}
	} else if ls.grpc, err = lc.Listen(ctx, "tcp", o.grpcAddr); err != nil {
		return nil, fmt.Errorf("-grpc: %w", err)
	}
	if o.metricsAddr != "" {
		if ls.metrics, err = lc.Listen(ctx, "tcp", o.metricsAddr); err != nil {
			return nil, fmt.Errorf("-metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET "+o.metricsPath, srv.MetricsHandler())
		ls.side = append(ls.side, sideServer(mux))
	}
	if o.admin != "" {
		if ls.admin, err = lc.Listen(ctx, "tcp", o.admin); err != nil {
			return nil, fmt.Errorf("-admin: %w", err)
		}
	}
	return ls, nil
}

// sideServer is an http.Server for the metrics listener: its clients are
// scrapers, but bounded all the same.
func sideServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
}

// serveSide serves the metrics listener until close.
func (ls *listeners) serveSide(log *slog.Logger) {
	if ls.metrics == nil {
		return
	}
	ln, hs := ls.metrics, ls.side[0]
	ls.wg.Go(func() {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("the metrics listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	})
}

// close closes the listeners the server did not take, and stops the
// metrics server. ServeAdmin closes the admin listener when it ran.
func (ls *listeners) close() {
	for _, hs := range ls.side {
		hs.Close()
	}
	for _, ln := range []net.Listener{ls.metrics, ls.admin} {
		if ln != nil {
			ln.Close()
		}
	}
	ls.wg.Wait()
}

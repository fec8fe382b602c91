package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/sluicehq/sluice/server"
)

// listeners are the service's sockets: HTTP and gRPC, which the server
// serves, and the metrics and debug listeners beside them, which the
// command serves.
type listeners struct {
	http, grpc     net.Listener
	metrics, debug net.Listener // nil when not asked for

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
	if o.debugAddr != "" {
		if ls.debug, err = lc.Listen(ctx, "tcp", o.debugAddr); err != nil {
			return nil, fmt.Errorf("-debug: %w", err)
		}
		ls.side = append(ls.side, sideServer(debugMux(srv)))
	}
	return ls, nil
}

// sideServer is an http.Server for the metrics or debug listener: its
// clients are scrapers and operators, but bounded all the same.
func sideServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
}

// debugMux serves Go's profiler, as envoyproxy/ratelimit's debug port
// does, and the metrics.
func debugMux(srv *server.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("GET /metrics", srv.MetricsHandler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "/debug/pprof/: Go's profiler\n/metrics: the Prometheus metrics\n")
	})
	return mux
}

// serveSide serves the metrics and debug listeners until close.
func (ls *listeners) serveSide(log *slog.Logger) {
	lns := []net.Listener{ls.metrics, ls.debug}
	i := 0
	for _, ln := range lns {
		if ln == nil {
			continue
		}
		hs := ls.side[i]
		i++
		ls.wg.Go(func() {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Error("a side listener stopped", "addr", ln.Addr().String(), "err", err)
			}
		})
	}
}

// close closes the listeners the server did not take, and stops the side
// servers.
func (ls *listeners) close() {
	for _, hs := range ls.side {
		hs.Close()
	}
	for _, ln := range []net.Listener{ls.metrics, ls.debug} {
		if ln != nil {
			ln.Close()
		}
	}
	ls.wg.Wait()
}

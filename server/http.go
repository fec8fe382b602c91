package server

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/server/internal/protocol"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", s.adapters.ServeJSON) // package protocol
	s.metricsHandler = promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{ErrorLog: errorLogger{s}})
	mux.Handle("GET /metrics", s.metricsHandler)
	mux.HandleFunc("/healthcheck", s.serveHealthcheck) // health.go
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	// Forward auth takes any method (Envoy's ext_authz sends the original
	// one) and, for Envoy, any path after the prefix, which it reads as
	// sent: ServeMux would redirect one holding "//" or "..".
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if protocol.IsAuthPath(r.URL.Path) {
			s.adapters.ServeAuth(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	if s.tr != nil {
		h = s.tr.handler(h, s.cfg.TrustedProxies) // tracing.go
	}
	return h
}

// serveReady answers 200 while the server serves, and 503 before Serve
// and once shutdown has begun.
func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready")
		return
	}
	fmt.Fprintln(w, "ready")
}

// errorLogger sends promhttp's errors to the server's log.
type errorLogger struct{ s *Server }

func (l errorLogger) Println(v ...any) { l.s.log.Error(fmt.Sprint(v...)) }

package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/fields"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", s.serveJSON)
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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isAuthPath(r.URL.Path) {
			s.serveAuth(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
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

// writeDecideError answers a request decide refused.
func (s *Server) writeDecideError(ctx context.Context, w http.ResponseWriter, err error) {
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		httpError(w, http.StatusBadRequest, bad.Msg)
	case ctx.Err() != nil:
		// The client has gone; nobody reads this.
		httpError(w, http.StatusServiceUnavailable, "request canceled")
	default:
		s.log.ErrorContext(ctx, "deciding a request", "err", err)
		httpError(w, http.StatusInternalServerError, "internal error")
	}
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// writeDenied answers a denied request with status: the RFC 9457 problem
// of type quota-exceeded that httplimit writes for a 429, naming the
// violated rules (JSON strings) when violated is not nil.
func writeDenied(w http.ResponseWriter, code int, violated []string) {
	fields.WriteProblem(w, code, fields.AppendDenied(nil, code, violated))
}

// grpcError is the status of a request decide refused.
func grpcError(err error) error {
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		return status.Error(codes.InvalidArgument, bad.Msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// errorLogger sends promhttp's errors to the server's log.
type errorLogger struct{ s *Server }

func (l errorLogger) Println(v ...any) { l.s.log.Error(fmt.Sprint(v...)) }

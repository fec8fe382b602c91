package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", s.serveJSON)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{ErrorLog: errorLogger{s}}))
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

var (
	jsonIn  = protojson.UnmarshalOptions{}
	jsonOut = protojson.MarshalOptions{}
)

// serveJSON is POST /json: a RateLimitRequest in proto3 JSON in, the
// RateLimitResponse out, 200 when OK and 429 when over the limit, as
// envoyproxy/ratelimit's /json answers. A malformed or oversized body, or
// a malformed request, is 400 with the reason.
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", tooBig.Limit))
			return
		}
		httpError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	var req rlspb.RateLimitRequest
	if err := jsonIn.Unmarshal(body, &req); err != nil {
		httpError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	resp, err := s.decide(r.Context(), s.cur.Load(), &req, endpointJSON)
	if err != nil {
		s.writeDecideError(r.Context(), w, err)
		return
	}
	out, err := jsonOut.Marshal(resp)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	code := http.StatusOK
	if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(out, '\n'))
}

// writeDecideError answers a request decide refused.
func (s *Server) writeDecideError(ctx context.Context, w http.ResponseWriter, err error) {
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		httpError(w, http.StatusBadRequest, bad.msg)
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

// grpcError is the status of a request decide refused.
func grpcError(err error) error {
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		return status.Error(codes.InvalidArgument, bad.msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// errorLogger sends promhttp's errors to the server's log.
type errorLogger struct{ s *Server }

func (l errorLogger) Println(v ...any) { l.s.log.Error(fmt.Sprint(v...)) }

package protocol

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/fields"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// WriteDecideError answers an HTTP request that Service.Decide refused:
// 400 for a malformed request, 503 for a client gone, else 500, logged.
func (a *Adapters) WriteDecideError(ctx context.Context, w http.ResponseWriter, err error) {
	var bad *decide.BadRequest
	switch {
	case errors.As(err, &bad):
		httpError(w, http.StatusBadRequest, bad.Msg)
	case ctx.Err() != nil:
		// The client has gone; nobody reads this.
		httpError(w, http.StatusServiceUnavailable, "request canceled")
	default:
		a.svc.Log.ErrorContext(ctx, "deciding a request", "err", err)
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

// grpcError is the status of a request Service.Decide refused.
func grpcError(err error) error {
	var bad *decide.BadRequest
	switch {
	case errors.As(err, &bad):
		return status.Error(codes.InvalidArgument, bad.Msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

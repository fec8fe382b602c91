package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// jsonContentType is the Content-Type of POST /json's answers; no one
// modifies it.
var jsonContentType = []string{"application/json"}

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
	// Read to its end, the body closes at once; left open, net/http would
	// look for its end again before the answer (an io.CopyN a request).
	_ = r.Body.Close()
	req, err := parseRLSRequest(body) // rlsjson.go
	if err != nil {
		httpError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	resp, err := s.decideRLS(r.Context(), req, endpointJSON)
	if err != nil {
		s.writeDecideError(r.Context(), w, err)
		return
	}
	out, err := appendRLSResponse(make([]byte, 0, 512), resp)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	// Set as a shared value, not by Set, which allocates it per response.
	w.Header()["Content-Type"] = jsonContentType
	code := http.StatusOK
	if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(out, '\n'))
}

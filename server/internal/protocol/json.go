package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// jsonContentType is the Content-Type of POST /json's answers; no one
// modifies it.
var jsonContentType = []string{"application/json"}

// ServeJSON is POST /json: a RateLimitRequest in proto3 JSON in, the
// RateLimitResponse out, 200 when OK and 429 when over the limit, as
// envoyproxy/ratelimit's /json answers. A malformed or oversized body, or
// a malformed request, is 400 with the reason. A web page's request is
// 403, and one for a Host not in Service.JSONHosts 421, both before
// the body is read (refuseBrowser).
func (a *Adapters) ServeJSON(w http.ResponseWriter, r *http.Request) {
	if a.refuseBrowser(w, r) { // browser.go
		return
	}
	// The body is read into, and the answer written from, one buffer of a
	// pool's: neither outlives the handler (the request's strings are
	// cut from a copy of the body, see fastRLSRequest; protojson copies
	// its own; Write copies the answer out).
	bp := jsonBufs.Get().(*[]byte)
	defer putJSONBuf(bp)
	buf := bytes.NewBuffer((*bp)[:0])
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, a.svc.MaxBodyBytes))
	body := buf.Bytes()
	*bp = body
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
	resp, err := a.decideRLS(r.Context(), req, JSON)
	if err != nil {
		a.WriteDecideError(r.Context(), w, err)
		return
	}
	out, err := appendRLSResponse(body[:0], resp)
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
	out = append(out, '\n')
	*bp = out
	w.WriteHeader(code)
	_, _ = w.Write(out)
}

// jsonBufs are POST /json's buffers, each for one request's body and then
// its answer; putJSONBuf keeps none past jsonBufKeep bytes, so a few huge
// bodies do not pin their memory.
var jsonBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const jsonBufKeep = 16 << 10

// putJSONBuf gives bp back to the pool, emptied, unless it grew past
// jsonBufKeep.
func putJSONBuf(bp *[]byte) {
	if cap(*bp) > jsonBufKeep {
		return
	}
	*bp = (*bp)[:0]
	jsonBufs.Put(bp)
}

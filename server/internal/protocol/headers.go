package protocol

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// HeaderStyle chooses the rate-limit headers of a response, as the
// server's settings say (server.HeaderStyle, whose values these are).
type HeaderStyle uint8

const (
	HeadersIETF  HeaderStyle = iota // the IETF RateLimit fields, Retry-After on a denial
	HeadersEnvoy                    // envoyproxy/ratelimit's three headers
	HeadersNone                     // no rate-limit header
)

// HeaderNames name the headers of HeadersEnvoy: server.HeaderNames, with
// its defaults filled in, converts to it field by field.
type HeaderNames struct {
	Limit     string // the limit: requests_per_unit
	Remaining string // what is left of it
	Reset     string // whole seconds until it resets
}

// headersOf lists the headers of out in the configured style, as name,
// value pairs. Forward auth (auth) keeps Retry-After on a denial in every
// style.
func (a *Adapters) headersOf(out *decide.Outcome, auth bool) [][2]string {
	var h [][2]string
	switch a.svc.Headers {
	case HeadersIETF:
		return out.Fields.Headers()
	case HeadersEnvoy:
		h = envoyHeaders(out.Statuses, a.svc.HeaderNames)
	}
	if auth && out.Fields.RetryAfter != "" {
		h = append(h, [2]string{decide.FieldRetryAfter, out.Fields.RetryAfter})
	}
	return h
}

// envoyHeaders are envoyproxy/ratelimit's headers for statuses: of the
// descriptors a limit applied to, the last one over its limit, or else
// the first with the least remaining.
func envoyHeaders(statuses []decide.Status, names HeaderNames) [][2]string {
	pick := -1
	least := int64(math.MaxInt64)
	for i := range statuses {
		st := &statuses[i]
		if st.Limit == nil {
			continue
		}
		left := remainingOf(st.D)
		switch {
		case st.Over:
			pick, least = i, -1 // a denied descriptor wins; the last one
		case left < least:
			pick, least = i, left
		}
	}
	if pick < 0 {
		return nil
	}
	st := &statuses[pick]
	reset := st.D.ResetAfter
	if reset == sluice.Never { // a limit that never refills: its period
		reset = st.Limit.Declared.Limit.Period
	}
	return [][2]string{
		{names.Limit, strconv.FormatInt(min(max(st.Limit.Declared.Limit.Rate, 0), math.MaxUint32), 10)}, // requests_per_unit, as RLS reports it
		{names.Remaining, strconv.FormatInt(remainingOf(st.D), 10)},
		{names.Reset, strconv.FormatInt(ceilSeconds(reset), 10)},
	}
}

// remainingOf is a decision's remaining as RLS reports it, a uint32.
func remainingOf(d sluice.Decision) int64 { return min(max(d.Remaining, 0), math.MaxUint32) }

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// headerKeys maps the names of the headers the server sets on an HTTP
// response to their canonical form, made once: Header.Set would make it
// per response.
func headerKeys(names HeaderNames) map[string]string {
	m := make(map[string]string)
	for _, n := range []string{decide.FieldPolicy, decide.FieldRateLimit, decide.FieldRetryAfter, names.Limit, names.Remaining, names.Reset} {
		m[n] = http.CanonicalHeaderKey(n)
	}
	return m
}

// setHeaders sets the pairs on an HTTP response, as Header.Set does, but
// with their values in one array.
func (a *Adapters) setHeaders(w http.ResponseWriter, h [][2]string) {
	if len(h) == 0 {
		return
	}
	hdr := w.Header()
	vals := make([]string, len(h))
	for i, kv := range h {
		k, ok := a.headerKeys[kv[0]]
		if !ok {
			k = http.CanonicalHeaderKey(kv[0])
		}
		vals[i] = kv[1]
		hdr[k] = vals[i : i+1 : i+1] // its own capacity: an Add appends elsewhere
	}
}

package fields

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemContentType is the media type of a problem details body in JSON
// (RFC 9457), the body of every 4xx that httplimit and sluice serve write
// about a request's limits.
const ProblemContentType = "application/problem+json"

// The problem type of a denial, draft-ietf-httpapi-ratelimit-headers §5.1:
// one body for a 429 from httplimit and from sluice serve, and the
// message of grpclimit's ResourceExhausted.
const (
	QuotaExceededType  = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	QuotaExceededTitle = "Request cannot be satisfied as assigned quota has been exceeded"
)

// AppendDenied appends the problem+json body of a denial answered with
// status (429; 403 where a proxy passes only that on): the quota-exceeded
// type and title, the status and "violated-policies", the names of the
// enforced rules that denied, each already a JSON string (JSONString, made
// once per rule). violated nil leaves the member out, for a caller that
// does not know them; it never says an empty list.
func AppendDenied(b []byte, status int, violated []string) []byte {
	b = append(b, `{"type":"`+QuotaExceededType+`","title":"`+QuotaExceededTitle+`","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	if violated != nil {
		b = append(b, `,"violated-policies":[`...)
		for i, v := range violated {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, v...)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// AppendProblem appends the problem+json body of a request refused with
// status for what detail says (a key the request lacks, say): type
// about:blank, whose title is the status's own phrase (RFC 9457 §4.2.1).
func AppendProblem(b []byte, status int, detail string) []byte {
	b = append(b, `{"type":"about:blank","title":`...)
	b = append(b, JSONString(http.StatusText(status))...)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":`...)
	b = append(b, JSONString(detail)...)
	return append(b, "}\n"...)
}

// WriteProblem answers with status and a problem+json body (from
// AppendDenied or AppendProblem), marked nosniff.
func WriteProblem(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	// Set in canonical form without http.Header.Set's canonicalising.
	h["Content-Type"] = []string{ProblemContentType}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// JSONString returns s as a JSON string, quoted and escaped; a byte
// sequence that is not UTF-8 becomes U+FFFD, as encoding/json writes it.
func JSONString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

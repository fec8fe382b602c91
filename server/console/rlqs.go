package console

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/config"
)

// RLQSAssignment is one bucket of one RLQS stream: the share of its limit
// the stream holds, as the service last renewed it.
type RLQSAssignment struct {
	Stream string            `json:"stream"` // the stream's holder id
	Domain string            `json:"domain"`
	Bucket map[string]string `json:"bucket"`
	// Result is what the bucket gets: assigned (a token bucket),
	// allow_all, deny_all, shadow or unknown (no assignment).
	Result string `json:"result"`
	// Share is the token bucket's refill per PeriodSeconds, Burst the
	// stream's part of the limit's capacity.
	Share         int64   `json:"share"`
	Burst         int64   `json:"burst"`
	PeriodSeconds float64 `json:"period_seconds"`
	// Demand is the stream's reported demand, per second; Holders and
	// TotalDemand (per period) the limit's among all streams.
	Demand      float64   `json:"demand_per_second"`
	Holders     int       `json:"holders"`
	TotalDemand int64     `json:"total_demand"`
	TTLSeconds  float64   `json:"ttl_seconds"`
	Renewed     time.Time `json:"renewed"`
}

// maxRLQSAssignments bounds GET /v1/rlqs's list: a thousand streams of a
// thousand buckets would be a million rows.
const maxRLQSAssignments = 1000

// rlqsReport is GET /v1/rlqs's answer.
type rlqsReport struct {
	Note string `json:"note"`
	// Total counts the assignments, of which Assignments are the first
	// maxRLQSAssignments. BucketsShown says the bucket ids' values are
	// shown (with Lookup); else each is its digest.
	Total        int              `json:"total"`
	BucketsShown bool             `json:"buckets_shown"`
	Assignments  []RLQSAssignment `json:"assignments"`
}

func (c *Console) serveRLQS(w http.ResponseWriter, r *http.Request, opts Options) {
	rep := rlqsReport{Note: "This process's RLQS streams only: each replica shows its own.", BucketsShown: opts.Lookup, Assignments: []RLQSAssignment{}}
	if c.svc.RLQS != nil {
		as := c.svc.RLQS()
		rep.Total = len(as)
		for _, a := range as[:min(len(as), maxRLQSAssignments)] {
			if !opts.Lookup {
				// A bucket id's values come from requests (a header, a
				// user): only the key lookup shows them.
				b := make(map[string]string, len(a.Bucket))
				for k, v := range a.Bucket {
					b[k] = config.SecretLabel(v)
				}
				a.Bucket = b
			}
			rep.Assignments = append(rep.Assignments, a)
		}
	}
	writeJSON(w, http.StatusOK, rep)
}

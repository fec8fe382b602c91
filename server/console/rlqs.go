package console

import (
	"net/http"
	"time"
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

// rlqsReport is GET /v1/rlqs's answer.
type rlqsReport struct {
	Note        string           `json:"note"`
	Assignments []RLQSAssignment `json:"assignments"`
}

func (c *Console) serveRLQS(w http.ResponseWriter, r *http.Request) {
	rep := rlqsReport{Note: "This process's RLQS streams only: each replica shows its own.", Assignments: []RLQSAssignment{}}
	if c.svc.RLQS != nil {
		rep.Assignments = append(rep.Assignments, c.svc.RLQS()...)
	}
	writeJSON(w, http.StatusOK, rep)
}

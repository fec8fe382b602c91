package console

import (
	"errors"
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// lookupRequest is the body of POST /v1/lookup: a domain and its
// descriptors, as a rate-limit request has them.
type lookupRequest struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []entryJSON `json:"entries"`
	} `json:"descriptors"`
}

// LookupResponse says, for each descriptor, every limit that applies and
// the key's state under it.
type LookupResponse struct {
	Descriptors []lookupDescriptor `json:"descriptors"`
	// StoreError is set when the store did not answer: the numbers are
	// then the failure modes' and tell nothing of the key.
	StoreError string `json:"store_error,omitempty"`
}

type lookupDescriptor struct {
	Limits []lookupLimit `json:"limits"` // none: no limit applies
}

type lookupLimit struct {
	Rule      string `json:"rule"`
	Algorithm string `json:"algorithm,omitempty"`
	Limit     string `json:"limit,omitempty"` // "10/1s burst 20"
	File      string `json:"file"`
	Line      int    `json:"line"`
	Shadow    bool   `json:"shadow,omitempty"`
	Unlimited bool   `json:"unlimited,omitempty"`
	Replaced  bool   `json:"replaced,omitempty"` // by another matched limit's replaces
	Quota     int64  `json:"quota,omitempty"`    // Decision.Limit
	Remaining int64  `json:"remaining"`
	// ResetMs is the wait until the key is back to idle; RetryMs the
	// wait until a request of cost 1 would pass, when RetryExact, else
	// at most that (the windows that slide: a bound, their idle time).
	ResetMs    float64 `json:"reset_ms"`
	RetryMs    float64 `json:"retry_ms"`
	RetryExact bool    `json:"retry_exact"`
}

// serveLookup is POST /v1/lookup: the state of a key under every limit
// its descriptors match, from a request of cost 0 on each descriptor (a
// peek: nothing is charged and nothing counted in the metrics). Off
// unless Options.Lookup.
func (c *Console) serveLookup(w http.ResponseWriter, r *http.Request) {
	var lr lookupRequest
	if !readJSON(w, r, &lr) {
		return
	}
	req := decide.NewRequest(lr.Domain, 0)
	for _, d := range lr.Descriptors {
		es := make([]config.Entry, len(d.Entries))
		for i, e := range d.Entries {
			es[i] = config.Entry(e)
		}
		req.Descs = append(req.Descs, decide.Descriptor{Entries: es})
	}
	if err := req.Validate(); err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	cfg, limits, _ := c.svc.Current()
	matches := make([][]config.Match, len(req.Descs))
	for i := range req.Descs {
		ms, err := cfg.Match(req.Domain, req.Descs[i].Entries)
		if err != nil {
			if errors.Is(err, config.ErrUnknownDomain) {
				jsonError(w, http.StatusBadRequest, "domain: the config has no domain "+strconv.Quote(req.Domain))
				return
			}
			jsonError(w, http.StatusBadRequest, err.Error())
			return
		}
		matches[i] = ms
	}
	// Note which limits replaces drops, to show them as replaced.
	all := make([][]config.Match, len(matches))
	for i := range matches {
		all[i] = append([]config.Match(nil), matches[i]...)
	}
	config.ApplyReplaces(matches)

	var checks []decide.Check
	for i, ms := range matches {
		for _, m := range ms {
			if !m.Unlimited {
				checks = append(checks, decide.Check{Desc: i, Limit: limits[m.ID], Key: decide.BoundKey(m.Key)})
			}
		}
	}
	ds := make([]sluice.Decision, len(checks))
	res, err := c.svc.Take(r.Context(), checks, ds)
	if err != nil {
		c.svc.DecideError(r.Context(), w, err)
		return
	}
	out := &LookupResponse{Descriptors: make([]lookupDescriptor, len(req.Descs))}
	if res.Err != nil {
		out.StoreError = res.Err.Error()
	}
	where := make(map[int]config.LimitInfo)
	for _, li := range cfg.Limits() {
		if li.ID >= 0 {
			where[li.ID] = li
		}
	}
	j := 0
	for i := range all {
		out.Descriptors[i].Limits = []lookupLimit{}
		for _, m := range all[i] {
			ll := lookupLimit{Rule: m.Rule.Name, Shadow: m.Rule.Shadow, Unlimited: m.Unlimited}
			if m.Unlimited {
				out.Descriptors[i].Limits = append(out.Descriptors[i].Limits, ll)
				continue
			}
			li := where[m.ID]
			ll.Algorithm, ll.Limit, ll.File, ll.Line = string(m.Rule.Algorithm), decide.LimitString(m.Rule.Limit), li.File, li.Line
			if j < len(checks) && checks[j].Desc == i && checks[j].Limit.Declared == m.Rule {
				d := ds[j]
				j++
				ll.Quota, ll.Remaining = d.Limit, d.Remaining
				ll.ResetMs = ms64(d.ResetAfter)
				retry, exact := retryOne(m.Rule, d)
				ll.RetryMs, ll.RetryExact = ms64(retry), exact
			} else {
				ll.Replaced = true
			}
			out.Descriptors[i].Limits = append(out.Descriptors[i].Limits, ll)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// retryOne is the wait until a request of cost 1 would pass, from a peek's
// decision d: none while a unit is left; for the buckets and GCRA, the
// time the missing part of a unit takes to refill, exactly; for the fixed
// window, the end of the window; for the sliding windows at most their
// time to idle, which is all a peek tells.
func retryOne(r sluice.Rule, d sluice.Decision) (time.Duration, bool) {
	if d.Remaining >= 1 {
		return 0, true
	}
	switch r.Algorithm {
	case sluice.AlgoTokenBucket, sluice.AlgoLeakyBucket, sluice.AlgoGCRA:
		if d.ResetAfter == sluice.Never || r.Limit.Rate == 0 {
			return sluice.Never, true
		}
		// ResetAfter refills Capacity units from what is left; one unit
		// needs all but Capacity-1 of them.
		rest := new(big.Int).Mul(big.NewInt(r.Limit.Capacity()-1), big.NewInt(int64(r.Limit.Period)))
		rest.Quo(rest, big.NewInt(r.Limit.Rate))
		if !rest.IsInt64() || rest.Int64() >= int64(d.ResetAfter) {
			return 0, true
		}
		return d.ResetAfter - time.Duration(rest.Int64()), true
	case sluice.AlgoFixedWindow:
		return d.ResetAfter, true
	}
	return d.ResetAfter, false
}

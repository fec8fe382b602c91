package main

import (
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// The same tariffs as tariffs.yaml, in the library: for an app that
// limits its own API, without a rate-limit service.

// plan is a tariff: a request budget per minute and per day, in cost
// units.
type plan struct {
	perMinute, perDay sluice.Rule
}

func newPlan(name string, perMinute, perDay int64) plan {
	return plan{
		perMinute: sluice.Rule{Name: name + "_per_minute", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(perMinute)},
		perDay:    sluice.Rule{Name: name + "_per_day", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerDay(perDay)},
	}
}

var plans = map[string]plan{
	"free":       newPlan("free", 60, 1_000),
	"pro":        newPlan("pro", 600, 50_000),
	"enterprise": newPlan("enterprise", 6_000, 1_000_000),
}

// cost is what a request costs: a search 5, anything else 1.
func cost(r *http.Request) (int64, error) {
	if r.URL.Path == "/v1/search" {
		return 5, nil
	}
	return 1, nil
}

// limitByPlan puts api behind its plans' limits: the API key in the
// X-API-Key header is looked up by planOf (the app's accounts), and the
// request is decided by its plan's rules at its cost, keyed by the API
// key's digest. An unknown key gets 401; a key whose plan is not listed,
// the free plan's limits.
func limitByPlan(limiter *sluice.Limiter, planOf func(apiKey string) (string, bool), api http.Handler) (http.Handler, error) {
	byPlan := make(map[string]http.Handler, len(plans))
	for name, p := range plans {
		m, err := httplimit.New(limiter,
			httplimit.WithRule(p.perMinute, httplimit.APIKey("X-API-Key")),
			httplimit.WithRule(p.perDay, httplimit.APIKey("X-API-Key")),
			httplimit.WithCost(cost),
		)
		if err != nil {
			return nil, err
		}
		byPlan[name] = m.Handler(api)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := planOf(r.Header.Get("X-API-Key"))
		if !ok {
			http.Error(w, "unknown API key", http.StatusUnauthorized)
			return
		}
		h, ok := byPlan[name]
		if !ok {
			h = byPlan["free"] // a plan not listed here gets the free plan's limits
		}
		h.ServeHTTP(w, r)
	}), nil
}

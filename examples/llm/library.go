package main

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// The same budget as llm.yaml, in the library: for an app that calls the
// model itself, without a rate-limit service.

// tokensPerHour is the budget per API key, charged by usage: the tokens
// of each answer, once it is known.
var tokensPerHour = sluice.Rule{Name: "tokens_per_hour", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerHour(1000), Charge: sluice.ChargeUsage}

// model stands for an LLM: it answers a prompt and says how many tokens
// the prompt and the answer came to.
type model func(prompt string) (answer string, tokens int64)

// chat serves POST /v1/chat with m, behind the budget per API key (the
// X-API-Key header, keyed by its digest): each request is checked when it
// arrives, refused with 429 while its key has less than one token left,
// and charged the tokens m reports once it has answered.
func chat(limiter *sluice.Limiter, m model) (http.Handler, error) {
	mw, err := httplimit.New(limiter, httplimit.WithUsage(tokensPerHour, httplimit.APIKey("X-API-Key")))
	if err != nil {
		return nil, err
	}
	return mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer, tokens := m(r.FormValue("prompt"))
		if err := httplimit.ReportUsage(r.Context(), tokens); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, answer)
	})), nil
}

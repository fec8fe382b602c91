// Package httplimit is HTTP middleware that limits the rate of requests
// with a sluice.Limiter, answering 429 Too Many Requests with Retry-After
// and the RateLimit fields of draft-ietf-httpapi-ratelimit-headers.
//
//	m, err := httplimit.New(limiter,
//		httplimit.WithRule(perIP, httplimit.ClientIP(proxies...)),
//		httplimit.WithRule(perKey, httplimit.Optional(httplimit.APIKey("Authorization"))),
//	)
//	...
//	mux.Handle("GET /items/{id}", m.Handler(items))
//
// # Rules and keys
//
// Each WithRule pairs a sluice.Rule with a KeyFunc that says whom the rule
// counts: ClientIP (the client's address, behind trusted proxies), Header,
// APIKey (hashed), Route, Const (one limit for all), and Join to combine
// them ("per user and route"). A request is decided against all its rules
// at once, all-or-nothing, by the Limiter: denied if any enforced rule
// denies, and then charged to none.
//
// Keys are bounded: client-chosen values longer than MaxKeyLen are hashed,
// API keys always are, and ClientIP reads a bounded part of
// X-Forwarded-For, so no request can make a large key.
//
// A request that lacks what a rule's key is made of (no X-API-Key header,
// say: an error wrapping ErrNoKey) is answered 400 Bad Request with an
// RFC 9457 problem naming the rule and what is missing, unless the key is
// wrapped in Optional: then the rule does not apply to it, as Envoy leaves
// out a descriptor whose header is missing. The usual pair is a limit per
// address always and one per API key when one is sent:
//
//	httplimit.WithRule(perIP, httplimit.ClientIP(proxies...)),
//	httplimit.WithRule(perKey, httplimit.Optional(httplimit.APIKey("X-API-Key"))),
//
// Any other failure of a key function stops the request with 500; both
// answers are WithErrorHandler's to change.
//
// # Usage charged after the fact
//
// Some costs are known only once the handler has done its work: the
// tokens of an LLM's answer, the bytes streamed. WithUsage gives a rule
// charged so (sluice.ChargeUsage): on the way in the request peeks at it
// (Check.Peek), denied while less than one unit is left, and once
// the handler returns the rule is charged what the handler reported with
// ReportUsage, whatever is left, into debt if it used more:
//
//	m, err := httplimit.New(limiter,
//		httplimit.WithUsage(tokensPerHour, httplimit.APIKey("X-API-Key")),
//		httplimit.WithRule(requestsPerMinute, httplimit.APIKey("X-API-Key")),
//	)
//	...
//	func chat(w http.ResponseWriter, r *http.Request) {
//		answer, err := model.Complete(r.Context(), prompt)
//		...
//		httplimit.ReportUsage(r.Context(), answer.Usage.TotalTokens)
//	}
//
// The requests after one that overdrew the budget are denied, 429 naming
// it, until the debt drains: the debt is capped at one period's worth, so
// a key left alone is usable again within two periods. The charge is made
// when the handler returns, whether the client is still there or not, and
// if the handler panics after reporting; a store that fails to record it
// is told to WithFailureHook. Rules given with WithRule beside it are
// charged the request's cost on the way in, only when every rule, the
// usage one included, allows.
//
// # Responses
//
// A request that passes goes to the next handler with these fields set;
// a denied one gets 429 with them and Retry-After:
//
//	RateLimit-Policy: "per-ip";q=100;w=60, "daily";q=10000;w=86400
//	RateLimit: "per-ip";r=0;t=1, "daily";r=9957;t=1
//	Retry-After: 1
//
// There is one list member per enforced rule that applied, in the order of
// the WithRule options; names are RFC 8941 strings. In RateLimit-Policy, q
// is the rule's quota (sluice.Rule.Quota) and w the window in seconds over
// which q is granted (see below). In RateLimit, r is the units left
// (Decision.Remaining) and t the seconds until the rule is back to idle
// (Decision.ResetAfter), rounded up.
//
// Retry-After is RetryAfter in whole seconds, rounded up: it never
// under-reports, so a client that waits that long and sends the same
// request is allowed, if nothing else came. On a denial every t is capped
// at Retry-After, as the draft asks (Retry-After must not end before the
// effective window): a shorter window with the same r is still true. A
// request that can never pass (its cost exceeds the capacity:
// RetryAfter is sluice.Never) is denied with no Retry-After at all, since
// no wait would help.
//
// For the window algorithms w is the Period. For the buckets and GCRA, whose
// quota is the burst, w is the time to refill the whole burst,
// Burst·Period/Rate: q/w is then the sustained rate, and a client that
// sends q units every w seconds is never denied. Sub-second windows round
// up to 1, which understates the rate and never overstates it.
//
// Shadow rules (sluice.Rule.Shadow) are left out of the fields: a client
// should not slow down for a limit that is only being tried. They are
// reported to the observer (WithObserver). WithShadow puts every rule in
// shadow mode and adds no field at all.
//
// When the store fails, the rules' failure policies decide
// (sluice.Rule.Failure) and WithFailureHook hears of it; RateLimit-Policy
// and, on a denial, Retry-After are still sent, but RateLimit and the
// legacy fields are not, since what is left is not known.
//
// WithLegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset (seconds
// from now) for older clients.
package httplimit

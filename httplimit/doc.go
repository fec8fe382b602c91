// Package httplimit is HTTP middleware that limits the rate of requests
// with a sluice.Limiter, answering 429 Too Many Requests with Retry-After
// and the RateLimit fields of draft-ietf-httpapi-ratelimit-headers.
// Choose it for a net/http server; Example_perAddressAndKey is the usual
// pair, a limit per client address always and one per API key when the
// request sends one:
//
//	m, err := httplimit.New(limiter,
//		httplimit.WithRule(perIP, httplimit.ClientIP(proxies...)),
//		httplimit.WithRule(perKey, httplimit.Optional(httplimit.APIKey("X-API-Key"))),
//	)
//	...
//	mux.Handle("GET /items/{id}", m.Handler(items))
//
// Each WithRule pairs a sluice.Rule with a KeyFunc that says whom the rule
// counts: ClientIP (the client's address, behind trusted proxies), Header,
// APIKey (hashed), Route, Const (one limit for all), and Join to combine
// them. A request is decided against all its rules at once, all or
// nothing. Keys are bounded, so no request can make a large one. A
// request that lacks what a key is made of (no X-API-Key header, say) is
// answered 400 with a problem naming the rule, unless the key is wrapped
// in Optional: then the rule does not apply to it.
//
// A denied request gets 429 with these fields; one that passes goes to
// the next handler with them set, without Retry-After:
//
//	RateLimit-Policy: "per-ip";q=100;w=60, "daily";q=10000;w=86400
//	RateLimit: "per-ip";r=0;t=1, "daily";r=9957;t=1
//	Retry-After: 1
//
// q is a rule's quota and w its window in seconds; r is what is left and t
// the seconds until the rule is whole again. WithUsage charges a rule
// after the fact, what the handler reported with ReportUsage (LLM tokens,
// bytes). WithShadow, WithObserver, WithFailureHook, WithErrorHandler and
// WithLegacyHeaders change the rest.
//
// Keys, usage, and each field's meaning, shadow rules and store failures
// are in docs/httplimit.md:
// https://github.com/sluicehq/sluice/blob/main/docs/httplimit.md
package httplimit

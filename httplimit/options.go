package httplimit

import (
	"net/http"

	"github.com/sluicehq/sluice"
)

// Option configures a Middleware.
type Option func(*options)

type options struct {
	given    []ruleKey // by WithRule, in order
	cost     func(*http.Request) (int64, error)
	legacy   bool
	shadow   bool
	denied   func(http.ResponseWriter, *http.Request, sluice.Result)
	onError  func(http.ResponseWriter, *http.Request, error)
	failure  func(*http.Request, error)
	observer func(*http.Request, []sluice.Check, sluice.Result)
}

type ruleKey struct {
	rule  sluice.Rule
	key   KeyFunc
	usage bool // by WithUsage
}

// WithRule adds a check to every request: rule, applied to the key that
// key returns for the request. A request passes only if every rule
// allows it, and then every rule is charged (see sluice.Limiter). At least
// one rule is required; a rule may be given only once (rules are told
// apart by name). New prepares the rule once, with the Limiter's
// Prepare: changing the caller's rule later has no effect.
func WithRule(rule sluice.Rule, key KeyFunc) Option {
	return func(o *options) { o.given = append(o.given, ruleKey{rule: rule, key: key}) }
}

// WithCost sets the cost of a request, in the units of the rules' limits:
// its size in bytes, the number of items it asks for. The default is 1.
// A cost of 0 peeks: it checks without charging. An error, or a negative cost,
// stops the request (see WithErrorHandler).
func WithCost(cost func(r *http.Request) (int64, error)) Option {
	return func(o *options) { o.cost = cost }
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset to every decided response, for clients that predate
// the RateLimit fields. They describe the most restrictive enforced rule
// (sluice.Combine); Reset is in seconds from now, rounded up, until every
// enforced rule is back to idle — not a Unix time. The default is off.
func WithLegacyHeaders() Option { return func(o *options) { o.legacy = true } }

// WithShadow puts the whole middleware in shadow mode: every request is
// decided and charged exactly as if enforced (so the store holds what
// enforcement would), reported to the observer, and then served. No
// rate-limit field is added to the response. Rules with Shadow set are in
// shadow mode on their own, always. The default is off.
func WithShadow() Option { return func(o *options) { o.shadow = true } }

// WithDeniedHandler sets what writes a denied response. It is called after
// the rate-limit fields and Retry-After are set on w's header, and must
// write the status itself (normally 429). res.Decisions is in the order of
// the checks made and is reused after the call returns. The default writes
// 429 with a problem+json body of type quota-exceeded naming the violated
// policies (draft-ietf-httpapi-ratelimit-headers §5.1).
func WithDeniedHandler(h func(w http.ResponseWriter, r *http.Request, res sluice.Result)) Option {
	return func(o *options) { o.denied = h }
}

// WithErrorHandler sets what answers a request that could not be decided:
// a key function failed (no client IP, no API key), the cost function
// failed or was negative, or the request's context ended. err names the
// rule. The default answers a request without a key (err wraps ErrNoKey)
// 400 Bad Request with an application/problem+json body whose detail
// names the rule and what is missing, and anything else 500 Internal
// Server Error, without details. To let such requests through instead,
// call the next handler from here; to exempt requests without a key from
// one rule, wrap its key in Optional.
//
// A failing store is not such an error: the rule's sluice.Failure decides
// (see WithFailureHook). A store's refusal of the request as given
// (sluice.ErrRefused: checks it cannot decide together, say) is.
func WithErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(o *options) { o.onError = h }
}

// WithFailureHook sets a function called when the store failed and the
// rules' failure policies (sluice.Rule.Failure: open, closed or local)
// decided the request instead; err is sluice.Result.Err. The request then
// proceeds as decided. The hook runs on the request's goroutine and should
// be quick: log, count.
func WithFailureHook(hook func(r *http.Request, err error)) Option {
	return func(o *options) { o.failure = hook }
}

// WithObserver sets a function called with every decision, before the
// response: checks are the rules applied and their keys, res the
// Limiter's result (res.Decisions[i] is checks[i]'s decision). It sees
// shadow rules and shadow mode too: res.Allowed false there is a request
// that would have been denied. Both slices are reused after the call
// returns; copy what you keep. It is not called when no rule applied or
// the request could not be decided (WithErrorHandler).
func WithObserver(observe func(r *http.Request, checks []sluice.Check, res sluice.Result)) Option {
	return func(o *options) { o.observer = observe }
}

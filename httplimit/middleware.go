package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/fields"
)

// Middleware limits the rate of HTTP requests with a sluice.Limiter. It is
// safe for concurrent use; one Middleware may wrap many handlers, which
// then share its limits.
type Middleware struct {
	options  // the handlers and settings; given is made into rules
	limiter  *sluice.Limiter
	rules    []rule
	enforced int       // rules not in shadow mode
	usage    int       // rules by WithUsage
	policy   string    // RateLimit-Policy when every rule applies
	pool     sync.Pool // *scratch
}

// rule is a WithRule, with what the headers need prepared once.
type rule struct {
	rule   *sluice.PreparedRule // prepared from WithRule's copy
	key    KeyFunc
	sf     string // the name as an sf-string
	member string // RateLimit-Policy member
	json   string // the name as a JSON string, for violated-policies
	usage  bool   // by WithUsage: peeked on the way in, charged after
}

// scratch is one request's working memory, pooled. Nothing in it may be
// referenced after the request.
type scratch struct {
	checks []sluice.Check
	idx    []int // rule index of each check
	out    []sluice.Decision
	names  []string // violated-policies, as JSON strings
	buf    []byte
	usage  []sluice.Check // the WithUsage checks, charged after the handler
}

// ErrNoRules is returned by New without WithRule.
var ErrNoRules = errors.New("httplimit: no rules: add one with WithRule")

// New returns a middleware that decides each request against the rules
// given with WithRule, through l. l's clock, store and failure policy
// apply; see the package documentation for the responses. Malformed
// options are an error: no limiter, no rules, a nil key, an invalid rule,
// two rules of one name, or a rule name that is not printable ASCII (it
// names the policy in the headers).
func New(l *sluice.Limiter, opts ...Option) (*Middleware, error) {
	if l == nil {
		return nil, errors.New("httplimit: limiter is nil")
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if len(o.given) == 0 {
		return nil, ErrNoRules
	}
	m := &Middleware{options: o, limiter: l}
	m.given = nil // made into m.rules below
	if m.onError == nil {
		m.onError = answerError
	}
	names := make(map[string]bool, len(o.given))
	var policy []byte
	for _, rk := range o.given {
		name := rk.rule.Name
		if rk.key == nil {
			return nil, fmt.Errorf("httplimit: rule %q has no key function", name)
		}
		prep, err := l.Prepare(rk.rule)
		if err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
		if names[name] {
			return nil, fmt.Errorf("httplimit: rule %q is given twice; rules are told apart by name", name)
		}
		names[name] = true
		sf, member, err := fields.Policy(&rk.rule)
		if err != nil {
			return nil, fmt.Errorf("httplimit: rule %q cannot name a RateLimit policy: %w", name, err)
		}
		r := rule{rule: prep, key: rk.key, sf: sf, member: member, json: fields.JSONString(name), usage: rk.usage}
		m.rules = append(m.rules, r)
		if rk.usage {
			m.usage++
		}
		if !rk.rule.Shadow {
			m.enforced++
			policy = fields.Append(policy, r.member)
		}
	}
	m.policy = string(policy)
	n := len(m.rules)
	m.pool.New = func() any {
		return &scratch{
			checks: make([]sluice.Check, 0, n),
			idx:    make([]int, 0, n),
			out:    make([]sluice.Decision, 0, n),
			names:  make([]string, 0, n),
			buf:    make([]byte, 0, 64*n),
			usage:  make([]sluice.Check, 0, m.usage),
		}
	}
	return m, nil
}

// Handler returns next limited by m. Its type is the standard middleware
// shape, func(http.Handler) http.Handler, as a method value: m.Handler.
// A nil next answers 404, like http.NotFoundHandler.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		next = http.NotFoundHandler()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	s := m.pool.Get().(*scratch)
	defer m.pool.Put(s)
	s.checks, s.idx = s.checks[:0], s.idx[:0]
	for i := range m.rules {
		rl := &m.rules[i]
		key, err := rl.key(r)
		if err != nil {
			if errors.Is(err, ErrSkip) {
				continue
			}
			m.onError(w, r, fmt.Errorf("httplimit: rule %q: %w", rl.rule.Name(), err))
			return
		}
		s.checks = append(s.checks, sluice.Check{Rule: rl.rule, Key: key})
		s.idx = append(s.idx, i)
	}
	if len(s.checks) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	var cost int64 = 1
	if m.cost != nil {
		var err error
		if cost, err = m.cost(r); err != nil {
			m.onError(w, r, fmt.Errorf("httplimit: cost: %w", err))
			return
		}
		if cost < 0 {
			m.onError(w, r, fmt.Errorf("httplimit: cost %d is negative", cost))
			return
		}
	}
	usage := false
	if cost != 1 || m.usage > 0 {
		// The WithUsage rules peek beside the others at the request's
		// cost, as does every rule for a request of cost 0.
		for j := range s.checks {
			c := &s.checks[j]
			if m.rules[s.idx[j]].usage {
				c.Peek, usage = true, true
			} else if cost == 0 {
				c.Peek = true
			} else {
				c.Cost = cost
			}
		}
	}
	res, err := m.limiter.Take(r.Context(), s.checks, s.out[:0])
	if err != nil {
		m.onError(w, r, fmt.Errorf("httplimit: %w", err))
		return
	}
	s.out = res.Decisions
	if res.Err != nil && m.failure != nil {
		m.failure(r, res.Err)
	}
	if m.observer != nil {
		m.observer(r, s.checks, res)
	}
	if m.shadow || res.Allowed {
		if !m.shadow {
			m.writeHeaders(w.Header(), s, &res)
		}
		if usage {
			m.serveUsage(w, r, next, s)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	m.writeHeaders(w.Header(), s, &res)
	if m.denied != nil {
		m.denied(w, r, res)
		return
	}
	m.deny(w, s, &res)
}

// deny is the default denied handler: 429 with the RFC 9457 problem of
// type quota-exceeded (draft-ietf-httpapi-ratelimit-headers §5.1). The
// violated policies are the enforced rules that denied; after a store
// failure with a fail-closed rule, those rules.
func (m *Middleware) deny(w http.ResponseWriter, s *scratch, res *sluice.Result) {
	names := s.names[:0]
	for j, d := range res.Decisions {
		if rl := &m.rules[s.idx[j]]; !d.Allowed && !rl.rule.Shadow() {
			names = append(names, rl.json)
		}
	}
	s.names = names
	s.buf = fields.AppendDenied(s.buf[:0], http.StatusTooManyRequests, names)
	fields.WriteProblem(w, http.StatusTooManyRequests, s.buf)
}

// answerError is the default error handler. A request without the key a
// rule needs (ErrNoKey) is the client's to fix: 400 with a problem whose
// detail names the rule and what is missing ("no API key in the X-API-Key
// header").
// Anything else is 500, without details.
func answerError(w http.ResponseWriter, _ *http.Request, err error) {
	if errors.Is(err, ErrNoKey) {
		// The package's errors all say "httplimit: "; once is enough.
		detail := strings.ReplaceAll(err.Error(), "httplimit: ", "")
		fields.WriteProblem(w, http.StatusBadRequest, fields.AppendProblem(nil, http.StatusBadRequest, detail))
		return
	}
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}

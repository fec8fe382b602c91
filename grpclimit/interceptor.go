package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/fields"
)

// Interceptor limits the calls of a gRPC server with a sluice.Limiter. Its
// methods Unary and Stream are the server interceptors:
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.Unary),
//		grpc.ChainStreamInterceptor(lim.Stream),
//	)
//
// A call is decided against every rule that applies to its method, all at
// once: allowed only if all allow, and then all are charged one unit. A
// stream is decided once, when it starts; its messages are not limited.
// A denied call fails with codes.ResourceExhausted, a google.rpc.RetryInfo
// detail whose retry_delay is the Limiter's RetryAfter, and a
// google.rpc.QuotaFailure naming the rules that denied it: what httplimit's
// Retry-After and problem body say.
//
// An Interceptor is safe for concurrent use.
type Interceptor struct {
	l        *sluice.Limiter
	rules    []*rule
	headers  bool
	shadow   bool
	observer Observer
}

var (
	_ grpc.UnaryServerInterceptor  = (*Interceptor)(nil).Unary
	_ grpc.StreamServerInterceptor = (*Interceptor)(nil).Stream
)

// rule is one WithRule: a sluice.Rule, its key, the methods it covers.
type rule struct {
	r        sluice.Rule          // as given to WithRule
	p        *sluice.PreparedRule // r, prepared by New; the checks carry it
	key      KeyFunc
	patterns []string        // as given to WithRule, checked by New
	methods  map[string]bool // exact full method names
	services []string        // "/package.Service/" prefixes
	sfName   string          // the name as an sf-string, for the fields
	policy   string          // the ratelimit-policy member
}

// applies reports whether the rule covers method.
func (r *rule) applies(method string) bool {
	if len(r.methods) == 0 && len(r.services) == 0 {
		return true
	}
	if r.methods[method] {
		return true
	}
	for _, s := range r.services {
		if strings.HasPrefix(method, s) {
			return true
		}
	}
	return false
}

// Observer sees every decided call: method, the checks it was decided
// against and the Limiter's Result (res.Decisions[i] is checks[i]'s; res.Err
// is the store's error when a failure policy decided). It runs on the
// call's goroutine before the call proceeds or fails, so it must be quick.
type Observer func(ctx context.Context, method string, checks []sluice.Check, res sluice.Result)

// Option configures an Interceptor.
type Option func(*Interceptor)

// WithRule limits calls by r, counted per key. The rule covers the methods
// listed, by full name ("/package.Service/Method") or by service
// ("/package.Service/*"), or every method when none is listed. Rule names
// must be unique within an Interceptor: the store counts by name and key.
func WithRule(r sluice.Rule, key KeyFunc, methods ...string) Option {
	methods = append([]string(nil), methods...)
	return func(i *Interceptor) {
		i.rules = append(i.rules, &rule{r: r, key: key, patterns: methods})
	}
}

// WithHeaders makes the Interceptor send the RateLimit fields as response
// header metadata ("ratelimit", "ratelimit-policy"; see MetadataRateLimit)
// on every decided call, allowed or denied. Rule names must then be
// printable ASCII. The default is off.
func WithHeaders() Option { return func(i *Interceptor) { i.headers = true } }

// WithShadow puts the whole Interceptor in shadow mode: every call is
// decided and charged exactly as if enforced (so the store holds what
// enforcement would), reported to the observer, and then served. No
// RateLimit field is sent. Rules with Shadow set are in shadow mode on
// their own, always. The default is off.
func WithShadow() Option { return func(i *Interceptor) { i.shadow = true } }

// WithObserver sets a function that sees every decided call, for metrics
// and logs: it sees shadow rules and shadow mode too (res.Allowed false
// there is a call that would have been denied) and store failures
// (res.Err). It is not called when no rule applied or the call could not
// be decided.
func WithObserver(o Observer) Option { return func(i *Interceptor) { i.observer = o } }

// New returns an Interceptor deciding calls with l by the rules given as
// options, each prepared once here (sluice.Limiter.Prepare). It fails on a
// nil Limiter, no rules, an invalid or nil part of a rule, a rule the store
// refuses, a malformed method name or two rules of one name.
func New(l *sluice.Limiter, opts ...Option) (*Interceptor, error) {
	if l == nil {
		return nil, errors.New("grpclimit: nil Limiter")
	}
	i := &Interceptor{l: l}
	for _, o := range opts {
		if o != nil {
			o(i)
		}
	}
	if len(i.rules) == 0 {
		return nil, errors.New("grpclimit: no rules: add one with WithRule")
	}
	names := make(map[string]bool, len(i.rules))
	for _, x := range i.rules {
		p, err := l.Prepare(x.r)
		if err != nil {
			return nil, fmt.Errorf("grpclimit: %w", err)
		}
		x.p = p
		if names[x.r.Name] {
			return nil, fmt.Errorf("grpclimit: two rules named %q", x.r.Name)
		}
		names[x.r.Name] = true
		if x.key == nil {
			return nil, fmt.Errorf("grpclimit: rule %q has no KeyFunc", x.r.Name)
		}
		for _, m := range x.patterns {
			if err := x.addMethod(m); err != nil {
				return nil, fmt.Errorf("grpclimit: rule %q: %w", x.r.Name, err)
			}
		}
		if i.headers {
			var err error
			if x.sfName, x.policy, err = fields.Policy(&x.r); err != nil {
				return nil, fmt.Errorf("grpclimit: rule %q: name for the RateLimit fields: %w", x.r.Name, err)
			}
		}
	}
	return i, nil
}

// addMethod adds "/package.Service/Method", or "/package.Service/*" for a
// whole service, to the methods the rule covers.
func (x *rule) addMethod(m string) error {
	rest, ok := strings.CutPrefix(m, "/")
	svc, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || svc == "" || name == "" || strings.Contains(name, "/") ||
		(strings.Contains(name, "*") && name != "*") {
		return fmt.Errorf("method %q: want \"/package.Service/Method\" or \"/package.Service/*\"", m)
	}
	if name == "*" {
		x.services = append(x.services, "/"+svc+"/")
		return nil
	}
	if x.methods == nil {
		x.methods = make(map[string]bool)
	}
	x.methods[m] = true
	return nil
}

// Unary is the grpc.UnaryServerInterceptor.
func (i *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := ""
	if info != nil {
		method = info.FullMethod
	}
	setHeader := func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }
	if err := i.limit(ctx, method, setHeader); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the grpc.StreamServerInterceptor. It decides the stream once,
// when it starts.
func (i *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := ""
	if info != nil {
		method = info.FullMethod
	}
	if err := i.limit(ss.Context(), method, ss.SetHeader); err != nil {
		return err
	}
	return handler(srv, ss)
}

// limit decides the call and returns its status error when it may not go
// on.
func (i *Interceptor) limit(ctx context.Context, method string, setHeader func(metadata.MD) error) error {
	checks := make([]sluice.Check, 0, len(i.rules))
	rules := make([]*rule, 0, len(i.rules))
	for _, x := range i.rules {
		if !x.applies(method) {
			continue
		}
		k, err := x.key(ctx, method)
		if errors.Is(err, ErrSkip) {
			continue
		}
		if err != nil {
			return keyError(x.r.Name, err)
		}
		checks = append(checks, sluice.Check{Rule: x.p, Key: k})
		rules = append(rules, x)
	}
	if len(checks) == 0 {
		return nil
	}
	res, err := i.l.Take(ctx, checks, nil)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return status.FromContextError(err).Err()
		}
		return status.Errorf(codes.Internal, "grpclimit: %v", err)
	}
	if i.observer != nil {
		i.observer(ctx, method, checks, res)
	}
	if i.shadow {
		return nil
	}
	if i.headers {
		if rl, policy := rateFields(rules, checks, &res); policy != "" {
			md := metadata.Pairs(MetadataRateLimitPolicy, policy)
			if rl != "" {
				md.Set(MetadataRateLimit, rl)
			}
			// The only failure is headers already sent by an earlier
			// interceptor; the decision stands without them.
			_ = setHeader(md)
		}
	}
	if res.Allowed {
		return nil
	}
	return denial(checks, res)
}

// keyError is the status of a call whose key could not be found: the
// error's own status if it has one; InvalidArgument, naming the rule and
// what is missing, for a call without the key (ErrNoKey), as httplimit
// answers 400; Internal for anything else.
//
// InvalidArgument rather than Unauthenticated: a key may be a tenant or an
// address as well as a credential, and a client told Unauthenticated would
// look for fault in its credentials. A KeyFunc that wants Unauthenticated
// returns that status itself.
func keyError(name string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return st.Err()
	}
	code := codes.Internal
	if errors.Is(err, ErrNoKey) {
		code = codes.InvalidArgument
	}
	return status.Errorf(code, "grpclimit: rule %q: %s", name, strings.TrimPrefix(err.Error(), "grpclimit: "))
}

// denial is the ResourceExhausted status of a denied call. It carries what
// httplimit's 429 says: a google.rpc.RetryInfo for Retry-After, unless the
// call can never pass, and a google.rpc.QuotaFailure for the problem body's
// violated-policies, one violation per enforced rule that denied, its name
// as quota_id and its quota (sluice.Rule.Quota, RateLimit-Policy's q) as
// quota_value.
func denial(checks []sluice.Check, res sluice.Result) error {
	var names []string
	qf := &errdetails.QuotaFailure{}
	for j, c := range checks {
		if !c.Rule.Shadow() && !res.Decisions[j].Allowed {
			name := fmt.Sprintf("%q", c.Rule.Name())
			names = append(names, name)
			qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
				QuotaId:     c.Rule.Name(),
				QuotaValue:  c.Rule.Quota(),
				Description: "rate limit " + name + " exceeded",
			})
		}
	}
	msg := "grpclimit: rate limit " + strings.Join(names, ", ") + " exceeded"
	if res.Err != nil {
		msg += " (limiter store unavailable)"
	}
	var st *status.Status
	details := []protoadapt.MessageV1{qf}
	if res.RetryAfter == sluice.Never {
		st = status.New(codes.ResourceExhausted, msg+"; the call exceeds the limit and can never pass")
	} else {
		st = status.New(codes.ResourceExhausted, fmt.Sprintf("%s; retry after %v", msg, res.RetryAfter))
		details = []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)}, qf}
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

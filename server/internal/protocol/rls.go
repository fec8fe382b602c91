package protocol

import (
	"context"
	"errors"
	"math"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/keys"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// ShouldRateLimit decides req as envoy.service.ratelimit.v3's
// RateLimitService does, against the config being served. The error is a
// gRPC status: InvalidArgument for a malformed request, which changes
// nothing, or the context's.
func (a *Adapters) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp, err := a.decideRLS(ctx, req, GRPC)
	if err != nil {
		var bad *decide.BadRequest
		if !errors.As(err, &bad) && ctx.Err() == nil {
			a.svc.Log.ErrorContext(ctx, "deciding a request", "err", err) // as WriteDecideError does
		}
		return nil, grpcError(err)
	}
	return resp, nil
}

// decideRLS decides a RateLimitRequest, from gRPC or POST /json.
func (a *Adapters) decideRLS(ctx context.Context, req *rlspb.RateLimitRequest, e Endpoint) (*rlspb.RateLimitResponse, error) {
	r, err := a.fromRLS(req)
	if err != nil {
		return nil, err
	}
	out, err := a.svc.Decide(ctx, a.svc.Current(), r, e)
	if err != nil {
		return nil, err
	}
	resp := a.toRLS(out)
	a.rlsHeaders(resp, out) // headers.go: the configured style
	if a.svc.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, r, out)
	}
	return resp, nil
}

// dynamicMetadata is a response's dynamic_metadata as
// envoyproxy/ratelimit fills it when RESPONSE_DYNAMIC_METADATA is set:
//
//	domain       the request's domain
//	descriptors  each request descriptor: entries, as "key=value" strings
//	             (a secret's value as its digest, as config.Redacted
//	             shows it), and its limit and hitsAddend if the request
//	             sets them
//	hitsAddend   the request's hits_addend, if not 0
//	metadata     the config's metadata of the descriptors that passed
//	             (not over their limits, not unlimited), merged: of two
//	             values under one key the first descriptor's stays, and
//	             two mappings under one key are merged the same way
//
// Envoy puts it in the filter's dynamic metadata, for other filters,
// routes and access logs. The entries are r's, which the core decided,
// their secrets as the core's walk of the config found them
// (decide.Status.Secret); the limits and hits as req sets them.
func dynamicMetadata(req *rlspb.RateLimitRequest, r *decide.Request, out *decide.Outcome) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(r.Descs))
	for i, d := range req.GetDescriptors() {
		es := r.Descs[i].Entries
		list := make([]*structpb.Value, len(es))
		for k, e := range es {
			v := e.Value
			if out.Statuses[i].Secret&(1<<k) != 0 {
				v = keys.Digest(v)
			}
			list[k] = structpb.NewStringValue(e.Key + "=" + v)
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: list})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var passed map[string]any
	for _, st := range out.Statuses {
		if st.Over || st.Unlimited || len(st.Meta) == 0 {
			continue
		}
		if passed == nil {
			passed = make(map[string]any)
		}
		mergeMetadata(passed, st.Meta)
	}
	// The config's metadata holds only what a Struct can (config checks
	// it when it loads): the error cannot happen.
	if m, err := structpb.NewStruct(passed); err == nil && len(passed) > 0 {
		fields["metadata"] = structpb.NewStructValue(m)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's keys to dst: a key dst has keeps its value,
// but for two mappings, which are merged likewise. The mappings it adds
// are copies, so that a later merge into them leaves the config's alone.
func mergeMetadata(dst, src map[string]any) {
	for k, v := range src {
		if have, ok := dst[k]; ok {
			hm, ok1 := have.(map[string]any)
			vm, ok2 := v.(map[string]any)
			if ok1 && ok2 {
				mergeMetadata(hm, vm)
			}
			continue
		}
		if vm, ok := v.(map[string]any); ok {
			c := make(map[string]any, len(vm))
			mergeMetadata(c, vm)
			v = c
		}
		dst[k] = v
	}
}

// fromRLS is the request req carries. It checks what only RLS has: the
// hits, limit overrides (refused under Service.RefuseLimitOverrides) and
// negative hits.
func (a *Adapters) fromRLS(req *rlspb.RateLimitRequest) (*decide.Request, error) {
	if h := uint64(req.GetHitsAddend()); h > a.svc.MaxHitsAddend {
		return nil, decide.Badf("hits_addend: %d is more than the most allowed, %d", h, a.svc.MaxHitsAddend)
	}
	n := int64(max(req.GetHitsAddend(), 1)) // 0, the proto default, means 1
	descs := req.GetDescriptors()
	if len(descs) > decide.MaxDescriptors {
		return nil, decide.Badf("descriptors: %d of them; at most %d are allowed", len(descs), decide.MaxDescriptors)
	}
	r := decide.NewRequest(req.GetDomain(), len(descs))
	total := 0
	for i, d := range descs {
		// Checked before the entries' array is made, so that a request
		// refused for its size allocates nothing for it.
		if n := len(d.GetEntries()); n > decide.MaxEntries {
			return nil, decide.Badf("%s.entries: %d of them; at most %d are allowed", decide.DescField(i), n, decide.MaxEntries)
		}
		total += len(d.GetEntries())
	}
	entries := r.Entries(total) // one array, cut per descriptor
	for i, d := range descs {
		switch f := decide.DescField(i); {
		case d.GetLimit() != nil && a.svc.RefuseLimitOverrides:
			return nil, decide.Badf("%s.limit: this server refuses limit overrides from the request (RefuseLimitOverrides); limits come from its config", f)
		case d.GetIsNegativeHits():
			return nil, decide.Badf("%s.is_negative_hits: sluice does not give hits back", f)
		case d.GetHitsAddend() != nil && d.GetHitsAddend().GetValue() > a.svc.MaxHitsAddend:
			return nil, decide.Badf("%s.hits_addend: %d is more than the most allowed, %d", f, d.GetHitsAddend().GetValue(), a.svc.MaxHitsAddend)
		}
		if l := d.GetLimit(); l != nil {
			var mult *uint32
			if m := l.GetUnitMultiplier(); m != nil {
				mult = &m.Value
			}
			lim, err := overrideLimit(decide.DescField(i).String()+".limit", l.GetRequestsPerUnit(), l.GetUnit(), mult)
			if err != nil {
				return nil, err
			}
			r.Descs[i].Override = &lim
		}
		r.Descs[i].Hits = n
		if h := d.GetHitsAddend(); h != nil {
			r.Descs[i].Hits = int64(h.GetValue()) // its own wins, and may be 0: a check
		}
		es := d.GetEntries()
		r.Descs[i].Entries, entries = entries[:len(es):len(es)], entries[len(es):]
		for k, e := range es {
			r.Descs[i].Entries[k] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	return r, nil
}

// rlsResponse is a RateLimitResponse with room for the messages of a
// usual one (a descriptor, three headers): building it takes one
// allocation, not one per message.
type rlsResponse struct {
	resp     rlspb.RateLimitResponse
	statuses [1]*rlspb.RateLimitResponse_DescriptorStatus
	status   [1]rlspb.RateLimitResponse_DescriptorStatus
	reset    [1]durationpb.Duration
	headers  [3]*corepb.HeaderValue
	header   [3]corepb.HeaderValue
}

// toRLS is the RateLimitResponse of an outcome.
func (a *Adapters) toRLS(out *decide.Outcome) *rlspb.RateLimitResponse {
	r := new(rlsResponse)
	resp := &r.resp
	resp.OverallCode = rlspb.RateLimitResponse_OK
	resp.Statuses = room(r.statuses[:0], len(out.Statuses))
	if !out.Allowed {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	for i, st := range out.Statuses {
		var ds *rlspb.RateLimitResponse_DescriptorStatus
		if i < len(r.status) {
			ds = &r.status[i]
		} else {
			ds = new(rlspb.RateLimitResponse_DescriptorStatus)
		}
		ds.Code = rlspb.RateLimitResponse_OK
		switch {
		case st.Unlimited:
			ds.LimitRemaining = math.MaxUint32 // as envoyproxy/ratelimit says it
		case st.Limit != nil:
			if st.Over {
				ds.Code = rlspb.RateLimitResponse_OVER_LIMIT
			}
			rl := a.svc.RLSLimit(st.Limit)
			ds.CurrentLimit = rl.Unnamed
			if st.Named {
				ds.CurrentLimit = rl.Named
			}
			ds.LimitRemaining = uint32(min(max(st.D.Remaining, 0), math.MaxUint32))
			if reset := st.D.ResetAfter; reset != sluice.Never {
				var d *durationpb.Duration
				if i < len(r.reset) {
					d = &r.reset[i]
				} else {
					d = new(durationpb.Duration)
				}
				// as durationpb.New makes it
				d.Seconds, d.Nanos = int64(reset/time.Second), int32(reset%time.Second)
				if a.svc.WholeSecondResets {
					d.Seconds, d.Nanos = max(ceilSeconds(reset), 1), 0
				}
				ds.DurationUntilReset = d
			}
		}
		resp.Statuses[i] = ds
	}
	h := out.Fields.Headers()
	hv := room(r.header[:0], len(h))
	resp.ResponseHeadersToAdd = room(r.headers[:0], len(h))
	for i := range h {
		hv[i].Key, hv[i].Value = h[i][0], h[i][1]
		resp.ResponseHeadersToAdd[i] = &hv[i]
	}
	return resp
}

// rlsHeaders sets resp's response_headers_to_add in the configured
// style; toRLS has set them in the IETF style.
func (a *Adapters) rlsHeaders(resp *rlspb.RateLimitResponse, out *decide.Outcome) {
	if a.svc.Headers == HeadersIETF {
		return
	}
	resp.ResponseHeadersToAdd = nil
	for _, kv := range a.headersOf(out, false) {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: kv[0], Value: kv[1]})
	}
}

// RLSLimit is a limit as RLS reports it, made once per rule (NewRLSLimit)
// and kept beside it: a response points to it rather than making one.
type RLSLimit struct {
	// Named is the rule with its name; Unnamed the same without, for a
	// limit the config leaves unnamed, which envoyproxy/ratelimit
	// reports without a name (the rule's name is then a generated one).
	Named, Unnamed *rlspb.RateLimitResponse_RateLimit
}

// NewRLSLimit is r as RLS reports it.
func NewRLSLimit(r sluice.Rule) RLSLimit {
	l := RLSLimit{Named: currentLimit(r), Unnamed: currentLimit(r)}
	l.Unnamed.Name = ""
	return l
}

// units are the RLS units, longest first, with their lengths as the config
// reads them (a month is 30 days, a year 365).
var units = []struct {
	d time.Duration
	u rlspb.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlspb.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit is a rule as RLS reports it: requests_per_unit per unit,
// times unit_multiplier when the period is a multiple of a unit ("30s" is
// 30 SECOND). A period that is not a whole number of seconds has no RLS
// unit: it is UNKNOWN, and the name still tells the rule.
func currentLimit(r sluice.Rule) *rlspb.RateLimitResponse_RateLimit {
	cl := &rlspb.RateLimitResponse_RateLimit{
		Name:            r.Name,
		RequestsPerUnit: uint32(min(max(r.Limit.Rate, 0), 1<<32-1)),
	}
	p := r.Limit.Period
	for _, u := range units {
		if p%u.d != 0 {
			continue
		}
		cl.Unit = u.u
		if k := p / u.d; k != 1 {
			if k > 1<<32-1 {
				cl.Unit = rlspb.RateLimitResponse_RateLimit_UNKNOWN
				break
			}
			cl.UnitMultiplier = wrapperspb.UInt32(uint32(k))
		}
		break
	}
	return cl
}

// RLS is the gRPC service of the adapters, for grpc.Server's
// registration.
func (a *Adapters) RLS() rlspb.RateLimitServiceServer { return rlsService{a: a} }

type rlsService struct {
	rlspb.UnimplementedRateLimitServiceServer
	a *Adapters
}

func (r rlsService) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return r.a.ShouldRateLimit(ctx, req)
}

// room returns buf[:n] when it has room for n, else a new slice.
func room[T any](buf []T, n int) []T {
	if n <= cap(buf) {
		return buf[:n]
	}
	return make([]T, n)
}

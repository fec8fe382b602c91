package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A gateway's two requests to the rate-limit service for one LLM request,
// as Envoy's rate limit filter sends them with apply_on_stream_done: the
// check when the request arrives, the charge when the answer ends.

// budgetRequest is the RateLimitRequest for apiKey's budget at cost hits,
// set on the descriptor (hits_addend 0 there is a check, not 1).
func budgetRequest(apiKey string, hits uint64) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitpb.RateLimitDescriptor{{
		Entries:    []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "api_key", Value: apiKey}},
		HitsAddend: wrapperspb.UInt64(hits),
	}}}
}

// rls asks over gRPC, as Envoy does.
type rls struct{ client rlspb.RateLimitServiceClient }

func (g rls) ask(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return g.client.ShouldRateLimit(ctx, req)
}

// jsonRLS asks through POST /json, as a gateway without gRPC does.
type jsonRLS struct{ handler http.Handler }

func (g jsonRLS) ask(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/json", bytes.NewReader(body))
	w := httptest.NewRecorder()
	g.handler.ServeHTTP(w, r)
	resp := new(rlspb.RateLimitResponse)
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(w.Body.Bytes(), resp); err != nil {
		return nil, fmt.Errorf("POST /json: %d %s", w.Code, w.Body)
	}
	return resp, nil
}

// asker is how the gateway reaches the service.
type asker interface {
	ask(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)
}

// gatewayRequest is what the gateway does for one LLM request of apiKey:
// the check, and if it is OK the model's answer (tokens) and the charge.
// It returns the check's answer and what was left.
func gatewayRequest(ctx context.Context, svc asker, apiKey string, tokens uint64) (ok bool, left uint32, err error) {
	check, err := svc.ask(ctx, budgetRequest(apiKey, 0))
	if err != nil {
		return false, 0, err
	}
	if check.GetOverallCode() != rlspb.RateLimitResponse_OK {
		return false, check.GetStatuses()[0].GetLimitRemaining(), nil
	}
	// The model answers, then the charge; its answer is not the client's
	// concern, as Envoy ignores it.
	if _, err := svc.ask(ctx, budgetRequest(apiKey, tokens)); err != nil {
		return false, 0, err
	}
	return true, check.GetStatuses()[0].GetLimitRemaining(), nil
}

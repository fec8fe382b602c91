package protocol

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsJSONInputs are request bodies, valid and hostile, with whether the
// fast path must read them itself (the rest it must leave to protojson).
var rlsJSONInputs = []struct {
	body string
	fast bool
}{
	{`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"k1"}]}]}`, true},
	{" \t\r\n{ \"domain\" : \"d\" , \"descriptors\" : [ { \"entries\" : [ { \"key\" : \"a\" , \"value\" : \"b\" } , {\"key\":\"c\"} ] } ] } \n", true},
	{`{"domain":"d","hitsAddend":3,"descriptors":[{"entries":[{"value":"v","key":"k"}],"hitsAddend":0},{"entries":[]}]}`, true},
	{`{"hits_addend":4294967295,"domain":"d","descriptors":[{"hits_addend":18446744073709551615,"entries":[{"key":"k","value":"v"}]}]}`, false}, // 20 digits: protojson's
	{`{"domain":"d","descriptors":[{"hits_addend":9999999999999999999,"entries":[{"key":"k"}]}]}`, true},
	{`{"domain":"d","descriptors":[{"hits_addend":999999999999999999,"entries":[{"key":"k"}]}]}`, true},
	{`{"domain":"dé","descriptors":[{"entries":[{"key":"ключ","value":"值 😀"}]}]}`, true},
	{`{}`, true},
	{`{"descriptors":[]}`, true},
	{`{"domain":""}`, true},
	{`{"domain":"d","descriptors":[{}]}`, true},
	{`{"domain":"d","descriptors":[{"entries":[{}]}]}`, true},

	// Left to protojson, which accepts them.
	{`{"domain":"d\u0065","descriptors":[{"entries":[{"key":"k","value":"v\n"}]}]}`, false},
	{`{"dom\u0061in":"d"}`, false},
	{`{"domain":null,"descriptors":null,"hitsAddend":null}`, false},
	{`{"domain":"d","hitsAddend":"3"}`, false},
	{`{"domain":"d","hitsAddend":3.0}`, false},
	{`{"domain":"d","hitsAddend":1e2}`, false},
	{`{"domain":"d","descriptors":[{"hitsAddend":"5","entries":[{"key":"k"}]}]}`, false},
	{`{"domain":"d","descriptors":[{"hitsAddend":null}]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":null}]}]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"}}]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"isNegativeHits":false}]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"is_negative_hits":true}]}`, false},

	// Refused, by protojson.
	{``, false},
	{` `, false},
	{`null`, false},
	{`[]`, false},
	{`"x"`, false},
	{`{"domain":"d"}{}`, false},
	{`{"domain":"d"} x`, false},
	{`{"domain":"d",}`, false},
	{`{,"domain":"d"}`, false},
	{`{"domain":"d" "descriptors":[]}`, false},
	{`{"domain":"d","descriptors":[,]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[]},]}`, false},
	{`{"domain":"d","domain":"e"}`, false},
	{`{"hitsAddend":1,"hits_addend":2}`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":"a","key":"b"}]}]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[],"entries":[]}]}`, false},
	{`{"domain":"d","descriptors":[],"descriptors":[]}`, false},
	{`{"domain":"d","descriptors":[{"hitsAddend":1,"hits_addend":1}]}`, false},
	{`{"Domain":"d"}`, false},
	{`{"domain":"d","descriptor":[]}`, false},
	{`{"domain":"d","extra":1}`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v","other":"x"}]}]}`, false},
	{`{"domain":1}`, false},
	{`{"domain":true}`, false},
	{`{"domain":["d"]}`, false},
	{`{"domain":"d","descriptors":{}}`, false},
	{`{"domain":"d","descriptors":[[]]}`, false},
	{`{"domain":"d","descriptors":[null]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[null]}]}`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":1}]}]}`, false},
	{`{"domain":"d","hitsAddend":-1}`, false},
	{`{"domain":"d","hitsAddend":4294967296}`, false},
	{`{"domain":"d","hitsAddend":01}`, false},
	{`{"domain":"d","hitsAddend":1.5}`, false},
	{`{"domain":"d","hitsAddend":}`, false},
	{`{"domain":"d","descriptors":[{"hitsAddend":-1}]}`, false},
	{`{"domain":"d","descriptors":[{"hitsAddend":18446744073709551616}]}`, false},
	{"{\"domain\":\"a\tb\"}", false},
	{"{\"domain\":\"\xff\"}", false},
	{"{\"domain\":\"\xed\xa0\x80\"}", false}, // a surrogate in UTF-8
	{`{"domain":"\ud800"}`, false},
	{`{"domain":"d`, false},
	{`{"domain":"d","descriptors":[`, false},
	{`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]`, false},
	{"\xef\xbb\xbf{}", false}, // a byte order mark
	{`{"domain":"d"}` + "\x00", false},
	{`{'domain':'d'}`, false},
	{`{domain:"d"}`, false},
}

// The fast path reads only what protojson accepts, as the message
// protojson makes of it; parseRLSRequest accepts and refuses exactly what
// protojson does.
func TestRLSJSONRequest(t *testing.T) {
	for _, in := range rlsJSONInputs {
		checkRLSJSONRequest(t, []byte(in.body))
		if _, ok := fastRLSRequest([]byte(in.body)); ok != in.fast {
			t.Errorf("fastRLSRequest(%q): ok = %v, want %v", in.body, ok, in.fast)
		}
	}
	// A large body: many descriptors, and long values.
	var b strings.Builder
	b.WriteString(`{"domain":"d","descriptors":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"entries":[{"key":"k","value":"` + strings.Repeat("v", i) + `"}]}`)
	}
	b.WriteString(`]}`)
	if _, ok := fastRLSRequest([]byte(b.String())); !ok {
		t.Error("fastRLSRequest of 1000 descriptors: not read")
	}
	checkRLSJSONRequest(t, []byte(b.String()))
	deep := strings.Repeat(`{"domain":`, 10000) + `"d"` + strings.Repeat(`}`, 10000)
	checkRLSJSONRequest(t, []byte(deep))
}

func checkRLSJSONRequest(t *testing.T, body []byte) {
	t.Helper()
	var want rlspb.RateLimitRequest
	werr := protojson.Unmarshal(body, &want)
	if fast, ok := fastRLSRequest(body); ok {
		if werr != nil {
			t.Fatalf("fastRLSRequest(%q) accepts what protojson refuses: %v", body, werr)
		}
		if !proto.Equal(fast, &want) {
			t.Fatalf("fastRLSRequest(%q) = %v, protojson reads %v", body, fast, &want)
		}
	}
	got, err := parseRLSRequest(body)
	if (err != nil) != (werr != nil) {
		t.Fatalf("parseRLSRequest(%.80q): err = %v, protojson's %v", body, err, werr)
	}
	if err == nil && !proto.Equal(got, &want) {
		t.Fatalf("parseRLSRequest(%.80q) = %v, protojson reads %v", body, got, &want)
	}
}

func FuzzRLSJSONRequest(f *testing.F) {
	for _, in := range rlsJSONInputs {
		f.Add([]byte(in.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkRLSJSONRequest(t, body) })
}

// The fast path writes what protojson writes, but for its insignificant
// spaces; a response it cannot write, protojson does.
func TestRLSJSONResponse(t *testing.T) {
	hv := func(kv ...string) []*corepb.HeaderValue {
		var h []*corepb.HeaderValue
		for i := 0; i < len(kv); i += 2 {
			h = append(h, &corepb.HeaderValue{Key: kv[i], Value: kv[i+1]})
		}
		return h
	}
	lim := &rlspb.RateLimitResponse_RateLimit{Name: "per_user", RequestsPerUnit: 100, Unit: rlspb.RateLimitResponse_RateLimit_SECOND}
	var durations []*durationpb.Duration
	for _, d := range []time.Duration{0, 1, 999, time.Microsecond, 1500 * time.Microsecond, 10 * time.Millisecond, time.Second, 90 * time.Second, time.Second + 1, -time.Second - time.Millisecond, math.MaxInt64} {
		durations = append(durations, durationpb.New(d))
	}
	tests := []struct {
		resp *rlspb.RateLimitResponse
		fast bool
	}{
		{&rlspb.RateLimitResponse{}, true},
		{&rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: rlspb.RateLimitResponse_OK}}}, true},
		{&rlspb.RateLimitResponse{
			OverallCode: rlspb.RateLimitResponse_OVER_LIMIT,
			Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
				{Code: rlspb.RateLimitResponse_OVER_LIMIT, CurrentLimit: lim, DurationUntilReset: durationpb.New(1500 * time.Millisecond)},
				{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32},
				{},
				{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{Unit: rlspb.RateLimitResponse_RateLimit_SECOND, UnitMultiplier: wrapperspb.UInt32(30)}, LimitRemaining: 7},
				{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(0)}},
				{Code: 7, CurrentLimit: &rlspb.RateLimitResponse_RateLimit{Unit: 99}},
			},
			ResponseHeadersToAdd: hv("RateLimit-Policy", `"per_user";q=100;w=1`, "RateLimit", `"per_user";r=0;t=2`, "Retry-After", "2", "", ""),
		}, true},
		{&rlspb.RateLimitResponse{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{Name: "q\"\\\b\f\n\r\t\x00\x01\x1f\x7f<>&\u2028é😀\ufffd"}}}}, true},
		{&rlspb.RateLimitResponse{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlspb.RateLimitResponse_RateLimit{Name: "bad \xff"}}}}, false},
		{&rlspb.RateLimitResponse{ResponseHeadersToAdd: hv("k", "bad \xc3")}, false},
		{&rlspb.RateLimitResponse{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"domain": structpb.NewStringValue("d")}}}, false},
		{&rlspb.RateLimitResponse{Quota: &rlspb.RateLimitResponse_Quota{Requests: 3}}, false},
		{&rlspb.RateLimitResponse{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Quota: &rlspb.RateLimitResponse_Quota{Requests: 3}}}}, false},
		{&rlspb.RateLimitResponse{RequestHeadersToAdd: hv("a", "b")}, false},
		{&rlspb.RateLimitResponse{RawBody: []byte("x")}, false},
		{&rlspb.RateLimitResponse{ResponseHeadersToAdd: []*corepb.HeaderValue{{Key: "a", RawValue: []byte("b")}}}, false},
		{&rlspb.RateLimitResponse{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{DurationUntilReset: &durationpb.Duration{Seconds: 1, Nanos: -1}}}}, false},
	}
	for _, d := range durations {
		tests = append(tests, struct {
			resp *rlspb.RateLimitResponse
			fast bool
		}{&rlspb.RateLimitResponse{Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{DurationUntilReset: d}}}, true})
	}
	for _, tt := range tests {
		want, werr := protojson.Marshal(tt.resp)
		fast, ok := fastRLSResponse([]byte("prefix"), tt.resp)
		if ok != tt.fast {
			t.Errorf("fastRLSResponse(%v): ok = %v, want %v", tt.resp, ok, tt.fast)
		}
		if ok {
			if werr != nil {
				t.Errorf("fastRLSResponse(%v) writes what protojson refuses: %v", tt.resp, werr)
				continue
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, want); err != nil {
				t.Fatal(err)
			}
			if got := fast[len("prefix"):]; !bytes.Equal(got, compact.Bytes()) {
				t.Errorf("fastRLSResponse(%v) =\n%s\nprotojson writes\n%s", tt.resp, got, compact.Bytes())
			}
		} else if !bytes.Equal(fast, []byte("prefix")) {
			t.Errorf("fastRLSResponse(%v) declined but wrote %q", tt.resp, fast)
		}
		got, err := appendRLSResponse(nil, tt.resp)
		if (err != nil) != (werr != nil) {
			t.Errorf("appendRLSResponse(%v): err = %v, protojson's %v", tt.resp, err, werr)
			continue
		}
		if err == nil {
			var back rlspb.RateLimitResponse
			if err := protojson.Unmarshal(got, &back); err != nil || !proto.Equal(&back, tt.resp) {
				t.Errorf("appendRLSResponse(%v) = %s, which reads back as %v, %v", tt.resp, got, &back, err)
			}
		}
	}
}

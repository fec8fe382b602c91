package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicehq/sluice"
)

const examplesDir = "../examples/config"

// The examples are envoyproxy/ratelimit configs (and one showing sluice's
// extensions): they load unchanged, together and one by one.
func TestExamplesLoad(t *testing.T) {
	c, err := Load(examplesDir)
	if err != nil {
		t.Fatalf("Load(%s):\n%v", examplesDir, err)
	}
	if got, want := c.Domains(), []string{"api_gateway", "edge_proxy", "messaging", "storefront"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %v, want %v", got, want)
	}
	files, _ := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(f, data); err != nil {
			t.Errorf("Parse(%s):\n%v", f, err)
		}
	}
}

// summary is what a request's matches come to after replaces: each
// descriptor's limits as "name rate/period", or "unlimited".
func summary(t *testing.T, c *Config, domain string, req ...[]Entry) [][]string {
	t.Helper()
	var per [][]Match
	for _, es := range req {
		ms, err := c.Match(domain, es)
		if err != nil {
			t.Fatalf("Match(%s, %v) = %v", domain, es, err)
		}
		per = append(per, ms)
	}
	ApplyReplaces(per)
	out := make([][]string, len(per))
	for i, ms := range per {
		out[i] = []string{}
		for _, m := range ms {
			s := "unlimited"
			if !m.Unlimited {
				s = m.Rule.Name + " " + m.Rule.Limit.String()
			}
			if m.Rule.Shadow {
				s += " shadow"
			}
			out[i] = append(out[i], s)
		}
	}
	return out
}

func TestExamplesMatch(t *testing.T) {
	c, err := Load(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	type E = Entry
	type S = []string
	for _, tt := range []struct {
		name   string
		domain string
		req    [][]Entry
		want   [][]string
	}{
		{"any address", "edge_proxy", [][]Entry{{{"remote_address", "203.0.113.99"}}}, [][]string{S{"per_address 20/1s"}}},
		{"blocked address", "edge_proxy", [][]Entry{{{"remote_address", "198.51.100.23"}}}, [][]string{S{"edge_proxy.remote_address_198.51.100.23 0/1s"}}},
		{"office", "edge_proxy", [][]Entry{{{"remote_address", "203.0.113.10"}}}, [][]string{S{"unlimited"}}},
		{"partner range", "edge_proxy", [][]Entry{{{"remote_address", "192.0.2.77"}}}, [][]string{S{"edge_proxy.remote_address_192.0.2.* 5/1s shadow"}}},

		{"marketing", "messaging",
			[][]Entry{{{"message_type", "marketing"}, {"to_number", "2061111111"}}, {{"to_number", "2061111111"}}},
			[][]string{S{"messaging.message_type_marketing.to_number 3/24h0m0s"}, S{"per_number_daily 20/24h0m0s"}}},
		{"otp replaces the daily limit", "messaging",
			[][]Entry{{{"message_type", "otp"}, {"to_number", "2061111111"}}, {{"to_number", "2061111111"}}},
			[][]string{S{"messaging.message_type_otp.to_number 5/1h0m0s"}, S{}}},
		{"other types: the daily limit only", "messaging",
			[][]Entry{{{"message_type", "receipt"}, {"to_number", "2061111111"}}, {{"to_number", "2061111111"}}},
			[][]string{S{}, S{"per_number_daily 20/24h0m0s"}}},

		{"free plan", "api_gateway",
			[][]Entry{{{"plan", "free"}, {"user", "u1"}}, {{"path", "/v1/orders"}, {"user", "u1"}}},
			[][]string{S{"free_user 60/1m0s"}, S{}}},
		{"exports", "api_gateway",
			[][]Entry{{{"plan", "pro"}, {"user", "u1"}}, {{"path", "/v1/exports/csv"}, {"user", "u1"}}},
			[][]string{S{"pro_user 600/1m0s"}, S{"api_gateway.path_/v1/exports*.user 10/1h0m0s"}}},
		{"search replaces the plan limit", "api_gateway",
			[][]Entry{{{"plan", "free"}, {"user", "u1"}}, {{"path", "/v1/search?q=a"}, {"user", "u1"}}},
			[][]string{S{}, S{"api_gateway.path_/v1/search*.user 1200/1m0s"}}},
		{"probes", "api_gateway", [][]Entry{{{"health", "/healthz"}}}, [][]string{S{"unlimited"}}},

		{"logins", "storefront", [][]Entry{{{"remote_address", "203.0.113.7"}, {"path", "/login"}}},
			[][]string{S{"login_rate 5/1m0s burst 5 shadow", "login_window 20/30m0s shadow"}}},
		{"api key", "storefront", [][]Entry{{{"api_key", "k"}}}, [][]string{S{"storefront.api_key 90/15m0s shadow"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := summary(t, c, tt.domain, tt.req...); !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}

	// All uploads share one count; other values of a wildcard count apart.
	a, _ := c.Match("api_gateway", []Entry{{"upload", "/v1/uploads/a.png"}})
	b, _ := c.Match("api_gateway", []Entry{{"upload", "/v1/uploads/b.png"}})
	if a[0].Key != b[0].Key || a[0].Key != "api_gateway|upload=/v1/uploads/*" {
		t.Errorf("upload keys %q and %q, want both api_gateway|upload=/v1/uploads/*", a[0].Key, b[0].Key)
	}
	a, _ = c.Match("edge_proxy", []Entry{{"remote_address", "192.0.2.1"}})
	b, _ = c.Match("edge_proxy", []Entry{{"remote_address", "192.0.2.2"}})
	if a[0].Key == b[0].Key {
		t.Errorf("two addresses of a wildcard share the key %q", a[0].Key)
	}

	r := c.Rules()
	if i := slices.IndexFunc(r, func(r sluice.Rule) bool { return r.Name == "checkout" }); i < 0 || r[i].Failure != sluice.FailLocal {
		t.Errorf("storefront checkout: want failure local, got %v", r)
	}
	if fa := c.ForwardAuth("storefront"); fa == nil || fa.DenyStatus() != 403 {
		t.Errorf("storefront forward_auth = %v, want deny 403", fa)
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if c != Default() {
		t.Error("Default() returns a new Config each call")
	}
	if got := c.Domains(); !slices.Equal(got, []string{DefaultDomain}) {
		t.Errorf("Default().Domains() = %v, want [%s]", got, DefaultDomain)
	}
	fa := c.ForwardAuth(DefaultDomain)
	if fa == nil || fa.DenyStatus() != 429 {
		t.Fatalf("Default forward_auth = %v, want one denying with 429", fa)
	}
	ds := fa.Descriptors(values{{Kind: ClientIP}: "203.0.113.7", {Kind: Header, Name: "X-Api-Key"}: "k1"}.of)
	want := [][]string{
		{"per_ip 10/1s burst 20", "per_ip_hourly 1000/1h0m0s"},
		{"per_api_key 50/1s burst 100", "per_api_key_daily 100000/24h0m0s"},
	}
	if got := summary(t, c, DefaultDomain, ds...); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Default policy for a client with an API key: %q, want %q", got, want)
	}
	for _, r := range c.Rules() {
		if err := r.Validate(); err != nil {
			t.Errorf("Default rule %s: %v", r.Name, err)
		}
	}
	if r := c.Rules()[0]; r.Algorithm != sluice.AlgoTokenBucket {
		t.Errorf("per_ip algorithm %s, want token_bucket", r.Algorithm)
	}
}

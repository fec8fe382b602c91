package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fixtures in testdata/envoy each hold one feature of
// envoyproxy/ratelimit's format, written from its documentation; they load
// unchanged and mean what they mean there.

func loadEnvoy(t *testing.T, name string) *Config {
	t.Helper()
	c, err := Load(filepath.Join("testdata", "envoy", name))
	if err != nil {
		t.Fatalf("Load(%s):\n%v", name, err)
	}
	return c
}

// matchOne returns the rate and key of the one limit entries land on, or
// 0 and "" for none.
func matchOne(t *testing.T, c *Config, domain string, entries []Entry) (int64, string) {
	t.Helper()
	ms, err := c.Match(domain, entries)
	if err != nil {
		t.Fatalf("Match(%s, %v) = %v", domain, entries, err)
	}
	switch len(ms) {
	case 0:
		return 0, ""
	case 1:
		return ms[0].Rule.Limit.Rate, ms[0].Key
	}
	t.Fatalf("Match(%s, %v) = %d limits, want at most one", domain, entries, len(ms))
	return 0, ""
}

func TestEnvoyWildcards(t *testing.T) {
	c := loadEnvoy(t, "wildcards.yaml")
	type E = Entry
	for _, tt := range []struct {
		entries []Entry
		rate    int64
		key     string
	}{
		// A * in the middle: the prefix and the suffix must both be there.
		{[]E{{"path", "/v2/orders/7/items"}}, 11, "wildcards|path=/v2/orders/7/items"},
		{[]E{{"path", "/v2/orders//items"}}, 11, "wildcards|path=/v2/orders//items"}, // * matches nothing too
		{[]E{{"path", "/v2/orders/7/items/9"}}, 15, "wildcards|path=/v2/orders/7/items/9"},
		{[]E{{"path", "/v2/orders/7/item"}}, 15, "wildcards|path=/v2/orders/7/item"},
		// An exact value beats a wildcard written before it.
		{[]E{{"path", "/v2/orders/42/items"}}, 14, "wildcards|path=/v2/orders/42/items"},
		// Two * in one value, with share_threshold: one count for all.
		{[]E{{"path", "/v2/users/export/all.csv"}}, 12, "wildcards|path=/v2/*/export/*.csv"},
		{[]E{{"path", "/v2/a/b/export/x/y.csv"}}, 12, "wildcards|path=/v2/*/export/*.csv"},
		{[]E{{"path", "/v2/export/.csv"}}, 15, "wildcards|path=/v2/export/.csv"}, // the parts would overlap
		{[]E{{"path", "/v2//export/.csv"}}, 12, "wildcards|path=/v2/*/export/*.csv"},
		// A leading *; and the first wildcard in file order wins.
		{[]E{{"path", "logo.png"}}, 13, "wildcards|path=logo.png"},
		{[]E{{"path", "/v2/orders/x.png/items"}}, 11, "wildcards|path=/v2/orders/x.png/items"},
		{[]E{{"path", "/v2/orders/1/items.png"}}, 13, "wildcards|path=/v2/orders/1/items.png"},
		// Nested wildcards, the outer one shared, the inner one not.
		{[]E{{"tenant", "t-acme-prod"}, {"region", "eu-west-1"}}, 16, "wildcards|tenant=t-*-prod|region=eu-west-1"},
		{[]E{{"tenant", "t-b-prod"}, {"region", "euwest"}}, 16, "wildcards|tenant=t-*-prod|region=euwest"},
		{[]E{{"tenant", "t-acme-test"}, {"region", "eu-west-1"}}, 0, ""},
		{[]E{{"tenant", "t-acme-prod"}, {"region", "us-east-1"}}, 0, ""},
		{[]E{{"tenant", "t-acme-prod"}}, 0, ""}, // lands on a descriptor without a limit
	} {
		t.Run(fmt.Sprint(tt.entries), func(t *testing.T) {
			rate, key := matchOne(t, c, "wildcards", tt.entries)
			if rate != tt.rate || key != tt.key {
				t.Errorf("Match(%v) = %d %q, want %d %q", tt.entries, rate, key, tt.rate, tt.key)
			}
		})
	}
}

// globRegexp is what a glob means, the slow way.
func globRegexp(pattern string) *regexp.Regexp {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^(?s:` + strings.Join(parts, ".*") + `)$`)
}

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{"*", []string{"", "a", "**"}, nil},
		{"a*", []string{"a", "abc", "a*"}, []string{"", "ba"}},
		{"*a", []string{"a", "ba", "aaa"}, []string{"", "ab"}},
		{"a*a", []string{"aa", "aba", "aaa"}, []string{"a", "ab", "ba"}},
		{"a*b*c", []string{"abc", "aXbYc", "abbc", "abcbc", "acbc"}, []string{"ac", "acb", "abcd", "bc"}},
		{"**", []string{"", "x"}, nil},
		{"a**b", []string{"ab", "axb"}, []string{"a", "ba"}},
		{"*ab*ab*", []string{"abab", "xabyabz"}, []string{"ab", "aab"}},
		{"/api/*/v1", []string{"/api//v1", "/api/x/v1", "/api/v1/v1"}, []string{"/api/v1", "/api/x/v2"}},
	} {
		g, re := newGlob(tt.pattern), globRegexp(tt.pattern)
		for _, s := range tt.yes {
			if !g.match(s) || !re.MatchString(s) {
				t.Errorf("%q does not match %q (glob %v, regexp %v)", s, tt.pattern, g.match(s), re.MatchString(s))
			}
		}
		for _, s := range tt.no {
			if g.match(s) || re.MatchString(s) {
				t.Errorf("%q matches %q (glob %v, regexp %v)", s, tt.pattern, g.match(s), re.MatchString(s))
			}
		}
	}
}

// FuzzGlob holds the glob to a regular expression's meaning of it.
func FuzzGlob(f *testing.F) {
	f.Add("a*b*c", "aXbYc")
	f.Add("*ab*ab*", "xabyabz")
	f.Add("a*a", "a")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		// The regexp reads runes: keep to valid UTF-8, where bytes and
		// runes agree.
		if !strings.Contains(pattern, "*") || len(pattern) > 64 || !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			return
		}
		if got, want := newGlob(pattern).match(s), globRegexp(pattern).MatchString(s); got != want {
			t.Fatalf("glob %q match(%q) = %v, the regexp says %v", pattern, s, got, want)
		}
	})
}

func TestEnvoyValueToMetric(t *testing.T) {
	c := loadEnvoy(t, "value_to_metric.yaml")
	type E = Entry
	for _, tt := range []struct {
		entries []Entry
		label   string
	}{
		{[]E{{"route", "/api/orders"}, {"method", "GET"}, {"user", "u1"}}, "route=/api/orders|method=GET|user"},
		{[]E{{"route", "/api/orders"}, {"method", "POST"}, {"user", "u2"}}, "route=/api/orders|method=POST|user"},
		// The config's own value is in the label with or without the flag.
		{[]E{{"route", "/x"}, {"method", "DELETE"}}, "route=/x|method=DELETE"},
		// Through a wildcard: the whole value, not the wildcard.
		{[]E{{"action", "readfile"}}, "action=readfile"},
		// A shared threshold: the wildcard, as in the counting key.
		{[]E{{"bucket", "shared/a"}}, "bucket=shared/*"},
		{[]E{{"bucket", "shared/b"}}, "bucket=shared/*"},
		// No value_to_metric on the path: no label at all.
		{[]E{{"plain", "anything"}}, ""},
		// Escaped as keys are.
		{[]E{{"action", "read|x=1\n"}}, "action=read%7Cx%3D1%0A"},
	} {
		ms, err := c.Match("labels", tt.entries)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Match(%v) = %v, %v; want one match", tt.entries, ms, err)
		}
		if got := ms[0].MetricLabel; got != tt.label {
			t.Errorf("Match(%v).MetricLabel = %q, want %q", tt.entries, got, tt.label)
		}
	}

	// A long value is cut, and two long values stay apart.
	long := strings.Repeat("a", 2*MaxMetricLabel)
	a, _ := c.Match("labels", []Entry{{"action", "read" + long + "1"}})
	b, _ := c.Match("labels", []Entry{{"action", "read" + long + "2"}})
	la, lb := a[0].MetricLabel, b[0].MetricLabel
	if len(la) > MaxMetricLabel || len(lb) > MaxMetricLabel || la == lb || !strings.HasPrefix(la, "action=readaaa") {
		t.Errorf("long labels %q and %q: want at most %d bytes each, different, starting with the value", la, lb, MaxMetricLabel)
	}
}

// A secret's value is in no label, whatever the levels below it ask.
func TestValueToMetricBelowSecret(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: api_key
    secret: true
    descriptors:
      - key: path
        value_to_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: plan
    value: gold
    secret: true
    descriptors:
      - key: path
        value_to_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
`)
	for _, es := range [][]Entry{{{"api_key", "sk_live_1"}, {"path", "/x"}}, {{"plan", "gold"}, {"path", "/x"}}} {
		ms, _ := c.Match("api", es)
		if len(ms) != 1 || ms[0].MetricLabel != es[0].Key+"|path=/x" {
			t.Errorf("Match(%v) = %+v, want the label %s|path=/x", es, ms, es[0].Key)
		}
	}
}

func TestEnvoyQuotaMode(t *testing.T) {
	c := loadEnvoy(t, "quota_mode.yaml")
	for _, tt := range []struct {
		entries []Entry
		quota   bool
	}{
		{[]Entry{{"service", "search"}}, true},
		{[]Entry{{"service", "index"}}, true},
		{[]Entry{{"team", "a"}, {"member", "b"}}, false}, // not inherited
		{[]Entry{{"remote_address", "192.0.2.1"}}, false},
	} {
		ms, err := c.Match("quotas", tt.entries)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Match(%v) = %v, %v; want one match", tt.entries, ms, err)
		}
		if ms[0].QuotaMode != tt.quota {
			t.Errorf("Match(%v).QuotaMode = %v, want %v", tt.entries, ms[0].QuotaMode, tt.quota)
		}
	}
}

func TestEnvoyMetadata(t *testing.T) {
	c := loadEnvoy(t, "metadata.yaml")
	ms, err := c.Match("meta", []Entry{{"service", "billing"}})
	if err != nil || len(ms) != 1 {
		t.Fatalf("Match(billing) = %v, %v; want one match", ms, err)
	}
	want := map[string]any{
		"owner": "payments", "tier": int64(1), "weight": 0.5, "enabled": true, "nothing": nil,
		"tags": []any{"pci", "eu"}, "limits": map[string]any{"burst": int64(20)},
	}
	if got := ms[0].Metadata; !reflect.DeepEqual(got, want) {
		t.Errorf("billing's Metadata = %#v, want %#v", got, want)
	}
	ms, _ = c.Match("meta", []Entry{{"service", "other"}})
	if len(ms) != 1 || ms[0].Metadata != nil {
		t.Errorf("Match(other) = %+v, want one match without metadata", ms)
	}

	// Anchors, aliases and merge keys read as YAML has them.
	c = mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: &base {team: core, limits: {burst: 2}}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata:
      <<: *base
      team: edge
`)
	ms, _ = c.Match("d", []Entry{{"b", "x"}})
	if want := map[string]any{"team": "edge", "limits": map[string]any{"burst": int64(2)}}; !reflect.DeepEqual(ms[0].Metadata, want) {
		t.Errorf("merged metadata = %#v, want %#v", ms[0].Metadata, want)
	}
}

func TestRedacted(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: api_key
    secret: true
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	in := []Entry{{"api_key", "sk_live_1"}, {"path", "/x"}}
	got := c.Redacted("api", in)
	if got[0].Value == "sk_live_1" || got[1].Value != "/x" || in[0].Value != "sk_live_1" {
		t.Errorf("Redacted(%v) = %v: want the key digested, the path kept, the input untouched", in, got)
	}
	ms, _ := c.Match("api", in)
	if want := "api|api_key=" + got[0].Value + "|path=/x"; ms[0].Key != want {
		t.Errorf("the digest %q is not Match's: key %q", got[0].Value, ms[0].Key)
	}
	for _, es := range [][]Entry{{{"user", "alice"}}, {{"nope", "x"}}} {
		if got := c.Redacted("api", es); !reflect.DeepEqual(got, es) {
			t.Errorf("Redacted(%v) = %v, want it unchanged", es, got)
		}
	}
	if got := c.Redacted("other", in); !reflect.DeepEqual(got, in) {
		t.Errorf("Redacted(unknown domain) = %v, want it unchanged", got)
	}
}

func TestMergeDomains(t *testing.T) {
	dir := filepath.Join("testdata", "envoy", "merge")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `"shop" is already defined in`) {
		t.Fatalf("Load(%s) without MergeDomains = %v, want the domain defined twice", dir, err)
	}
	c, err := Options{MergeDomains: true}.Load(dir)
	if err != nil {
		t.Fatalf("Load(%s) with MergeDomains:\n%v", dir, err)
	}
	if got := c.Domains(); len(got) != 1 || got[0] != "shop" {
		t.Errorf("Domains() = %v, want [shop]", got)
	}
	if got := len(c.Rules()); got != 4 {
		t.Errorf("%d rules, want the 4 of both files", got)
	}
	for _, tt := range []struct {
		path   string
		rate   int64
		shadow bool
	}{
		{"/search", 5, true},
		// The first file's wildcard comes first, in the order files are read.
		{"/cart/checkout", 3, false},
		{"/cart/x", 3, false},
	} {
		ms, err := c.Match("shop", []Entry{{"path", tt.path}})
		if err != nil || len(ms) != 1 || ms[0].Rule.Limit.Rate != tt.rate || ms[0].Rule.Shadow != tt.shadow {
			t.Errorf("Match(path=%s) = %+v, %v; want %d a second, shadow %v", tt.path, ms, err, tt.rate, tt.shadow)
		}
	}
	if fa := c.ForwardAuth("shop"); fa == nil || fa.Proxy() != Nginx {
		t.Errorf("ForwardAuth(shop) = %v, want the second file's, whose descriptor reaches the first's limit", fa)
	}
	// Reload keeps the options.
	n, err := c.Reload(dir)
	if err != nil {
		t.Fatalf("Reload of a merged config: %v", err)
	}
	if len(n.Rules()) != 4 || n.Rules()[0] != c.Rules()[0] {
		t.Error("Reload of a merged config did not keep its rules")
	}

	for _, tt := range []struct {
		dir  string
		want []string
	}{
		{"merge_conflict", []string{
			`merge_conflict/b.yaml:6: descriptors[1]: duplicate descriptor key "path" value "/search" in domain "shop": already defined at testdata/merge_conflict/a.yaml:3`,
			`merge_conflict/b.yaml:9: descriptors[2]: duplicate descriptor key "user" value "" in domain "shop": already defined at testdata/merge_conflict/a.yaml:6`,
			`merge_conflict/b.yaml:11: descriptors[3]: duplicate descriptor key "path" value "/cart/*" in domain "shop": already defined at testdata/merge_conflict/a.yaml:8`,
		}},
		{"merge_two_auth", []string{
			`merge_two_auth/b.yaml:6: forward_auth: domain "shop" already has a forward_auth section, at testdata/merge_two_auth/a.yaml:6`,
		}},
	} {
		_, err := Options{MergeDomains: true}.Load(filepath.Join("testdata", tt.dir))
		if err == nil {
			t.Errorf("Load(%s) with MergeDomains succeeded, want an error", tt.dir)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), filepath.FromSlash("testdata/"+w)) {
				t.Errorf("Load(%s) error:\n%v\nwant it to hold\n%s", tt.dir, err, w)
			}
		}
	}
}

// StatPath names a descriptor as envoyproxy/ratelimit's statistics do,
// from the config alone, a secret value as its digest.
func TestStatPath(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: route
    value: /v1
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: plan
    value: gold
    secret: true
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	ms, _ := c.Match("api", []Entry{{"route", "/v1"}, {"user", "alice"}})
	if len(ms) != 1 || ms[0].StatPath != "api.route_/v1.user" {
		t.Errorf("Match(route=/v1, user=alice) = %+v, want StatPath api.route_/v1.user", ms)
	}
	ms, _ = c.Match("api", []Entry{{"plan", "gold"}})
	if len(ms) != 1 || strings.Contains(ms[0].StatPath, "gold") || !strings.HasPrefix(ms[0].StatPath, "api.plan_#") {
		t.Errorf("Match(plan=gold) = %+v, want StatPath api.plan_ and the value's digest", ms)
	}
}

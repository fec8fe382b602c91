package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func mustParse(t testing.TB, text string) *Config {
	t.Helper()
	c, err := Parse(t.Name()+".yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return c
}

// matchConfig exercises envoyproxy/ratelimit's matching rules: exact
// value first, then wildcards in file order, then the key alone; a limit
// only where the whole descriptor lands.
const matchConfig = `
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key2
    value: value3 # no limit, and no falling back to key2's: exempt
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: subkey3
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 40}
  - key: wild
    value: fo*
    rate_limit: {unit: minute, requests_per_unit: 41}
  - key: wild
    rate_limit: {unit: minute, requests_per_unit: 42}
  - key: wild
    value: foobar
    rate_limit: {unit: minute, requests_per_unit: 43}
  - key: anything
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 44}
  - key: shared
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 45}
  - key: nested
    value: a*
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 46}
  - key: numbers
    value: 404
    rate_limit: {unit: week, unit_multiplier: 2, requests_per_unit: 47}
  - key: unl
    rate_limit: {unlimited: true, name: free}
`

func TestMatch(t *testing.T) {
	c := mustParse(t, matchConfig)
	type E = Entry
	for _, tt := range []struct {
		entries []Entry
		rate    int64 // of the one limit that applies; 0: none
		key     string
	}{
		{nil, 0, ""},
		{[]E{{"key1", "something"}}, 0, ""},
		{[]E{{"key1", "value1"}}, 0, ""}, // lands on a descriptor without a limit
		{[]E{{"key1", "value1"}, {"subkey1", "something"}}, 5, "test-domain|key1=value1|subkey1=something"},
		{[]E{{"key1", "value1"}, {"subkey1", "subvalue1"}}, 10, "test-domain|key1=value1|subkey1=subvalue1"},
		{[]E{{"key1", "value1"}, {"subkey1", "x"}, {"deeper", "x"}}, 0, ""},
		{[]E{{"key2", "something"}}, 20, "test-domain|key2=something"},
		{[]E{{"key2", "value2"}}, 30, "test-domain|key2=value2"},
		{[]E{{"key2", "value3"}}, 0, ""},
		{[]E{{"key2", "value2"}, {"subkey", "x"}}, 0, ""}, // deeper than the config
		{[]E{{"key3", "x"}}, 1, "test-domain|key3=x"},
		{[]E{{"key3", "x"}, {"subkey3", "y"}}, 2, "test-domain|key3=x|subkey3=y"},
		{[]E{{"key3", "x"}, {"other", "y"}}, 0, ""},
		{[]E{{"subkey3", "y"}}, 0, ""},
		{[]E{{"key5", "x"}}, 0, ""},
		{[]E{{"wild", "foobar"}}, 43, "test-domain|wild=foobar"}, // exact beats wildcard
		{[]E{{"wild", "foobaz"}}, 40, "test-domain|wild=foobaz"}, // first wildcard in the file
		{[]E{{"wild", "fox"}}, 41, "test-domain|wild=fox"},
		{[]E{{"wild", "bar"}}, 42, "test-domain|wild=bar"},
		{[]E{{"wild", ""}}, 42, "test-domain|wild="},
		{[]E{{"anything", "x"}}, 44, "test-domain|anything=x"},
		{[]E{{"anything", ""}}, 44, "test-domain|anything="},
		{[]E{{"shared", "files/a.png"}}, 45, "test-domain|shared=files/*"},
		{[]E{{"shared", "files/b.png"}}, 45, "test-domain|shared=files/*"},
		{[]E{{"shared", "other"}}, 0, ""},
		{[]E{{"nested", "abc"}, {"user", "u1"}}, 46, "test-domain|nested=a*|user=u1"},
		{[]E{{"numbers", "404"}}, 47, "test-domain|numbers=404"},
		{[]E{{"KEY2", "x"}}, 0, ""}, // keys are case-sensitive
	} {
		t.Run(fmt.Sprint(tt.entries), func(t *testing.T) {
			ms, err := c.Match("test-domain", tt.entries)
			if err != nil {
				t.Fatalf("Match = %v", err)
			}
			if tt.rate == 0 {
				if len(ms) != 0 {
					t.Errorf("Match = %+v, want no limit", ms)
				}
				return
			}
			if len(ms) != 1 {
				t.Fatalf("Match = %+v, want one limit of %d", ms, tt.rate)
			}
			if ms[0].Rule.Limit.Rate != tt.rate || ms[0].Key != tt.key {
				t.Errorf("Match = rate %d key %q, want rate %d key %q", ms[0].Rule.Limit.Rate, ms[0].Key, tt.rate, tt.key)
			}
		})
	}
}

func TestMatchDetails(t *testing.T) {
	c := mustParse(t, matchConfig)

	ms, _ := c.Match("test-domain", []Entry{{"unl", "x"}})
	if len(ms) != 1 || !ms[0].Unlimited || ms[0].Rule.Name != "free" || ms[0].Name != "free" {
		t.Errorf("Match(unl) = %+v, want one Unlimited match named free", ms)
	}

	ms, _ = c.Match("test-domain", []Entry{{"nested", "abc"}, {"user", "u1"}})
	if len(ms) != 1 || !ms[0].DetailedMetric || ms[0].Name != "" || ms[0].Rule.Name != "test-domain.nested_a*.user" {
		t.Errorf("Match(nested) = %+v, want DetailedMetric, no Name, Rule.Name test-domain.nested_a*.user", ms)
	}

	ms, _ = c.Match("test-domain", []Entry{{"numbers", "404"}})
	if got, want := ms[0].Rule.Limit.Period, 14*24*time.Hour; got != want {
		t.Errorf("unit week × 2: period %v, want %v", got, want)
	}

	// The same descriptor gets the same rule, and its index, every time.
	a, _ := c.Match("test-domain", []Entry{{"key2", "a"}})
	b, _ := c.Match("test-domain", []Entry{{"key2", "b"}})
	if a[0].Rule != b[0].Rule || a[0].ID != b[0].ID {
		t.Error("two matches of one limit have different rules")
	}

	if _, err := c.Match("nope", []Entry{{"key2", "a"}}); !errors.Is(err, ErrUnknownDomain) {
		t.Errorf("Match(unknown domain) = %v, want ErrUnknownDomain", err)
	}
}

func TestMatchDefaults(t *testing.T) {
	c := mustParse(t, `
domain: d
descriptors:
  - key: envoy
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: child # shadow_mode is not inherited
        rate_limit: {unit: second, requests_per_unit: 4}
  - key: sluice
    rate_limits:
      - {algorithm: token_bucket, period: 250ms, requests_per_unit: 1, burst: 5, failure: local}
      - {name: slow, algorithm: sliding_counter, unit: HOUR, requests_per_unit: 100}
`)
	want := map[string]sluice.Rule{
		"envoy":       {Name: "d.envoy", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 3, Period: time.Second}, Shadow: true, Failure: sluice.FailOpen},
		"envoy/child": {Name: "d.envoy.child", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 4, Period: time.Second}, Failure: sluice.FailOpen},
		"sluice[0]":   {Name: "d.sluice[0]", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.Limit{Rate: 1, Period: 250 * time.Millisecond, Burst: 5}, Failure: sluice.FailLocal},
		"sluice[1]":   {Name: "slow", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.Limit{Rate: 100, Period: time.Hour}, Failure: sluice.FailOpen},
	}
	got := map[string]sluice.Rule{}
	ms, _ := c.Match("d", []Entry{{"envoy", "x"}})
	got["envoy"] = ms[0].Rule
	ms, _ = c.Match("d", []Entry{{"envoy", "x"}, {"child", "y"}})
	got["envoy/child"] = ms[0].Rule
	ms, _ = c.Match("d", []Entry{{"sluice", "x"}})
	got["sluice[0]"], got["sluice[1]"] = ms[0].Rule, ms[1].Rule
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s: rule %+v, want %+v", k, &g, &w)
		}
	}
	if n := len(c.Rules()); n != 4 {
		t.Errorf("Rules() has %d rules, want 4", n)
	}

	// The top level sets shadow mode and the failure mode for the domain.
	c = mustParse(t, "domain: d\nshadow_mode: true\nfailure: closed\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if r := c.Rules()[0]; !r.Shadow || r.Failure != sluice.FailClosed {
		t.Errorf("top-level shadow_mode and failure: rule %+v, want Shadow and FailClosed", r)
	}
}

func TestMatchKeysDoNotCollide(t *testing.T) {
	c := mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a|b
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	seen := map[string][]Entry{}
	for _, es := range [][]Entry{
		{{"a", "b|c=d"}},
		{{"a", "b"}, {"c", "d"}},
		{{"a", "b=c"}},
		{{"a|b", "c"}},
		{{"a", "b%7Cc=d"}},
		{{"a", "{tag}"}},
		{{"a", "x y\n\x00é"}},
	} {
		ms, err := c.Match("d", es)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Match(%q) = %v, %v", es, ms, err)
		}
		k := ms[0].Key
		if prev, dup := seen[k]; dup {
			t.Errorf("Match(%q) and Match(%q) share the key %q", prev, es, k)
		}
		seen[k] = es
		for _, b := range []byte(k) {
			if b <= ' ' || b >= 0x7f || b == '{' || b == '}' {
				t.Errorf("Match(%q).Key = %q holds %q", es, k, b)
			}
		}
	}
	ms, _ := c.Match("d", []Entry{{"a", "x y\n\x00é"}})
	if want := "d|a=x%20y%0A%00%C3%A9"; ms[0].Key != want {
		t.Errorf("Key = %q, want %q", ms[0].Key, want)
	}
}

// replacesConfig is envoyproxy/ratelimit's README example of replaces,
// with an unlimited limit and an unnamed one added.
const replacesConfig = `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: per_user}, {name: example7.anon}]
  - key: user
    rate_limit: {name: per_user, requests_per_unit: 1, unit: second}
  - key: anon
    rate_limit: {requests_per_unit: 1, unit: second}
`

func TestApplyReplaces(t *testing.T) {
	c := mustParse(t, replacesConfig)
	type E = Entry
	d1 := []E{{"key_1", "value_1"}, {"user", "bkthomps"}}
	d2 := []E{{"key_2", "value_2"}, {"user", "bkthomps"}}
	for _, tt := range []struct {
		name string
		req  [][]Entry
		want [][]int64 // each descriptor's rates left; -1 for unlimited
	}{
		{"alone", [][]Entry{d1}, [][]int64{{5}}},
		{"the other alone", [][]Entry{d2}, [][]int64{{10}}},
		{"both: 10 replaces 5", [][]Entry{d1, d2}, [][]int64{{}, {10}}},
		{"either order", [][]Entry{d2, d1}, [][]int64{{10}, {}}},
		{"unlimited replaces too", [][]Entry{{{"user", "u"}}, {{"vip", "u"}}}, [][]int64{{}, {-1}}},
		{"only named limits are replaced", [][]Entry{{{"anon", "u"}}, {{"vip", "u"}}}, [][]int64{{1}, {-1}}},
		{"nothing to replace", [][]Entry{{{"user", "u"}}, {{"anon", "u"}}}, [][]int64{{1}, {1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var per [][]Match
			for _, es := range tt.req {
				ms, err := c.Match("example7", es)
				if err != nil {
					t.Fatal(err)
				}
				per = append(per, ms)
			}
			ApplyReplaces(per)
			got := make([][]int64, len(per))
			for i, ms := range per {
				got[i] = []int64{}
				for _, m := range ms {
					r := m.Rule.Limit.Rate
					if m.Unlimited {
						r = -1
					}
					got[i] = append(got[i], r)
				}
			}
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("after ApplyReplaces: %v, want %v", got, tt.want)
			}
		})
	}
	ApplyReplaces(nil) // nothing to do, and no panic
}

func BenchmarkMatch(b *testing.B) {
	c := mustParse(b, matchConfig)
	es := []Entry{{"key1", "value1"}, {"subkey1", "203.0.113.7"}}
	b.ReportAllocs()
	for b.Loop() {
		if ms, _ := c.Match("test-domain", es); len(ms) != 1 {
			b.Fatal("no match")
		}
	}
}

// A descriptor marked secret keys its values by their digest: the value
// itself is in no key, equal values share one key, and a config value
// still matches the raw value.
func TestMatchSecret(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: api_key
    secret: true
    rate_limit: {unit: second, requests_per_unit: 5}
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: plan
    value: gold
    secret: true
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
`)
	const raw = "sk_live_51HqLyjWDarjtT1zdp7dc"
	key := func(es ...Entry) string {
		t.Helper()
		ms, err := c.Match("api", es)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Match(%v) = %v, %v; want one match", es, ms, err)
		}
		return ms[0].Key
	}
	k1 := key(Entry{"api_key", raw})
	if strings.Contains(k1, raw) || strings.Contains(k1, "sk_live") {
		t.Errorf("key %q holds the secret", k1)
	}
	if k2 := key(Entry{"api_key", raw}); k2 != k1 {
		t.Errorf("the same secret keys as %q and %q", k1, k2)
	}
	if k3 := key(Entry{"api_key", raw + "x"}); k3 == k1 {
		t.Errorf("two secrets share the key %q", k1)
	}
	if k := key(Entry{"api_key", raw}, Entry{"path", "/login"}); strings.Contains(k, raw) || !strings.Contains(k, "/login") {
		t.Errorf("nested key %q: want the secret digested and the path as it is", k)
	}
	if k := key(Entry{"plan", "gold"}); strings.Contains(k, "gold") {
		t.Errorf("secret literal value in key %q", k)
	}
	// A digest is not a value a client can send to pose as another's key:
	// a raw value that is some key's digest is digested again.
	if k := key(Entry{"api_key", strings.TrimPrefix(k1, "api|api_key=")}); k == k1 {
		t.Errorf("a digest sent as the secret keys as the secret itself: %q", k)
	}
	if k := key(Entry{"user", "alice"}); k != "api|user=alice" {
		t.Errorf("non-secret key %q, want api|user=alice", k)
	}
}

// A secret written in the config as a literal value is shown by a digest
// wherever the config's values show: the generated names of its limits
// and of the limits under it, Limits, and errors.
func TestSecretLiteralShown(t *testing.T) {
	const vip = "sk-live-4f9a2c71e0b8d3aa"
	c := mustParse(t, `
domain: api
descriptors:
  - key: api_key
    value: `+vip+`
    secret: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: path
        rate_limits:
          - {unit: second, requests_per_unit: 1}
  - key: api_key
    value: named-`+vip+`
    secret: true
    rate_limit: {name: vip, unit: minute, requests_per_unit: 2}
`)
	var names []string
	for _, r := range c.Rules() {
		names = append(names, r.Name)
	}
	want := []string{"api.api_key_#e72d29d3a277", "api.api_key_#e72d29d3a277.path[0]", "vip"}
	if !slices.Equal(names, want) {
		t.Errorf("rule names %q, want %q", names, want)
	}
	for _, li := range c.Limits() {
		if got := li.Descriptor[0].Value; got != "#e72d29d3a277" && li.Name != "vip" {
			t.Errorf("Limits: %s's descriptor %v, want the value as #e72d29d3a277", li.Rule.Name, li.Descriptor)
		}
		if strings.Contains(fmt.Sprint(li), vip) {
			t.Errorf("Limits: %+v holds the secret", li)
		}
	}
	// The limit still applies to the value itself.
	if ms, err := c.Match("api", []Entry{{"api_key", vip}}); err != nil || len(ms) != 1 || ms[0].Rule.Name != want[0] {
		t.Errorf("Match(api_key=%s) = %v, %v; want %s", vip, ms, err, want[0])
	}
	dup := "domain: api\ndescriptors:\n  - key: api_key\n    value: " + vip + "\n    secret: true\n" +
		"  - key: api_key\n    value: " + vip + "\n    secret: true\n"
	if _, err := Parse("dup.yaml", []byte(dup)); err == nil || strings.Contains(err.Error(), vip) || !strings.Contains(err.Error(), "#e72d29d3a277") {
		t.Errorf("a secret twice: %v, want an error naming its digest, not its value", err)
	}
}

// Key keys a descriptor as it is, for a limit the request brings: the
// domain and every entry escaped as in Match.Key, a secret's value
// digested, each value apart even where the config has a wildcard.
func TestKey(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: api_key
    secret: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: /v1/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
`)
	const raw = "sk_live_51HqLyjWDarjtT1zdp7dc"
	key := func(es ...Entry) string {
		t.Helper()
		k, err := c.Key("api", es)
		if err != nil {
			t.Fatalf("Key(%v) = %v", es, err)
		}
		return k
	}
	ms, err := c.Match("api", []Entry{{"user", "a|b=c"}})
	if err != nil || len(ms) != 1 {
		t.Fatalf("Match = %v, %v", ms, err)
	}
	if k := key(Entry{"user", "a|b=c"}); k != ms[0].Key || k != "api|user=a%7Cb%3Dc" {
		t.Errorf("Key(user=a|b=c) = %q, want %q, as Match.Key", k, ms[0].Key)
	}
	if k := key(Entry{"api_key", raw}); strings.Contains(k, raw) || !strings.HasPrefix(k, "api|api_key=") {
		t.Errorf("Key(api_key) = %q: want the secret digested", k)
	}
	if a, b := key(Entry{"path", "/v1/a"}), key(Entry{"path", "/v1/b"}); a == b {
		t.Errorf("two paths under a shared wildcard key alike: %q", a)
	}
	if k := key(Entry{"nowhere", "x"}, Entry{"deeper", ""}); k != "api|nowhere=x|deeper=" {
		t.Errorf("Key of a descriptor the config lacks = %q, want api|nowhere=x|deeper=", k)
	}
	if _, err := c.Key("other", []Entry{{"user", "a"}}); !errors.Is(err, ErrUnknownDomain) {
		t.Errorf("Key(unknown domain) error = %v, want ErrUnknownDomain", err)
	}
}

// TestEnvoyKeys: with Options.EnvoyKeys, a descriptor a store can count
// as envoyproxy/ratelimit does is keyed by envoyproxy/ratelimit's cache
// key (less the window's start); every other keeps sluice's key.
func TestEnvoyKeys(t *testing.T) {
	const yaml = `domain: dom
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 50}
  - key: files
    value: a*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tokens
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 100}
  - key: odd
    rate_limit: {requests_per_unit: 3, period: 1500ms}
  - key: api_key
    secret: true
    rate_limit: {unit: second, requests_per_unit: 1}
`
	path := filepath.Join(t.TempDir(), "dom.yaml")
	writeFile(t, path, yaml)
	plain, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Options{EnvoyKeys: true}.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		entries []Entry
		want    string // "" for sluice's key
	}{
		{[]Entry{{"user", "alice"}}, "dom_user_alice_"},
		{[]Entry{{"user", "al|ice=x y"}, {"path", "/a b"}}, "dom_user_al|ice=x y_path_/a b_"},
		// A value holding '_' could pose as (user alice, path /x).
		{[]Entry{{"user", "alice_path_/x"}}, ""},
		// A value holding "%#" could pose as a long key's digest
		// (decide.BoundKey); a '%' alone, as in a path, cannot.
		{[]Entry{{"user", "a|%#QAZIizwEGCd8faqo4n3uDbq"}}, ""},
		{[]Entry{{"user", "/a%2Fb"}}, "dom_user_/a%2Fb_"},
		{[]Entry{{"files", "a1"}}, "dom_files_a*_"},
		{[]Entry{{"tokens", "t"}}, ""},
		{[]Entry{{"two", "t"}}, ""},
		{[]Entry{{"odd", "t"}}, ""},
		{[]Entry{{"api_key", "secret"}}, ""},
	} {
		ms, err := c.Match("dom", tt.entries)
		pms, perr := plain.Match("dom", tt.entries)
		if err != nil || perr != nil || len(ms) == 0 || len(ms) != len(pms) {
			t.Fatalf("Match(%v) = %v, %v; without EnvoyKeys %v, %v", tt.entries, ms, err, pms, perr)
		}
		for i, m := range ms {
			want := pms[i].Key
			if tt.want != "" {
				want = EnvoyKeyMark + tt.want
			}
			if m.Key != want || m.Rule.Name != pms[i].Rule.Name || m.Rule.Limit != pms[i].Rule.Limit {
				t.Errorf("Match(%v)[%d].Key = %q, want %q", tt.entries, i, m.Key, want)
			}
		}
	}
}

package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// lease: on a limit sets its rule's Lease, in envoyproxy/ratelimit's form
// of a limit (unit) and in sluice's (period), with renew and ttl or the
// defaults; a limit without it is decided exactly.
func TestLease(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: user
    rate_limits:
      - {name: envoy_form, unit: second, requests_per_unit: 100, lease: {}}
      - name: sluice_form
        algorithm: token_bucket
        period: 10s
        requests_per_unit: 1000
        burst: 200
        lease:
          renew: 100ms
          ttl: 1s
      - {name: renew_only, algorithm: gcra, period: 1s, requests_per_unit: 50, lease: {renew: 200ms}}
      - {name: exact, unit: minute, requests_per_unit: 60}
      - {name: null_lease, unit: minute, requests_per_unit: 60, lease: }
`)
	want := map[string]sluice.Lease{
		"envoy_form":  {Enabled: true},
		"sluice_form": {Enabled: true, Renew: 100 * time.Millisecond, TTL: time.Second},
		"renew_only":  {Enabled: true, Renew: 200 * time.Millisecond},
		"exact":       {},
		"null_lease":  {}, // a key set to null is absent, as everywhere in the config
	}
	rules := c.Rules()
	if len(rules) != len(want) {
		t.Fatalf("Rules() = %d rules, want %d", len(rules), len(want))
	}
	for _, r := range rules {
		if got, ok := want[r.Name]; !ok || r.Lease != got {
			t.Errorf("rule %q: Lease %+v, want %+v", r.Name, r.Lease, got)
		}
	}
}

// Every algorithm a lease is offered for loads with one, in both forms;
// the others, and a usage limit, are refused at the lease, naming the
// rule.
func TestLeaseAlgorithms(t *testing.T) {
	for _, tt := range []struct {
		algorithm, charge string
		ok                bool
	}{
		{"token_bucket", "gate", true},
		{"leaky_bucket", "gate", true},
		{"gcra", "gate", true},
		{"fixed_window", "gate", true},
		{"sliding_log", "gate", false},
		{"sliding_counter", "gate", false},
		{"token_bucket", "usage", false},
		{"fixed_window", "usage", false},
	} {
		for _, form := range []string{"unit: second", "period: 1s"} {
			src := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: %s\n      %s\n      requests_per_unit: 100\n      charge: %s\n      lease: {}\n", tt.algorithm, form, tt.charge)
			_, err := Parse("lease.yaml", []byte(src))
			switch {
			case tt.ok && err != nil:
				t.Errorf("%s, %s, charge %s: %v", tt.algorithm, form, tt.charge, err)
			case !tt.ok && err == nil:
				t.Errorf("%s, %s, charge %s: loaded with a lease, want an error", tt.algorithm, form, tt.charge)
			case !tt.ok && !strings.Contains(err.Error(), `lease.yaml:9: descriptors[0].rate_limit.lease: sluice: rule "d.k": lease: `):
				t.Errorf("%s, %s, charge %s: error %v, want it at the lease, naming the rule", tt.algorithm, form, tt.charge, err)
			}
		}
	}
}

// A reload that leases a limit, or changes its lease, makes a new rule;
// one that leaves the lease as it was keeps the rule, and so the leases
// of its keys.
func TestLeaseReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	const yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {name: per_user, unit: second, requests_per_unit: 100%s}\n"
	var rules []sluice.Rule
	var c *Config
	for _, lease := range []string{"", ", lease: {}", ", lease: {}", ", lease: {ttl: 2s}"} {
		writeFile(t, path, fmt.Sprintf(yaml, lease))
		var err error
		if c, err = c.Reload(path); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, c.Rules()[0])
	}
	if rules[0] == rules[1] || rules[1] != rules[2] || rules[2] == rules[3] {
		t.Errorf("rules through the reloads: %+v; want a new rule when the lease changes, the same when it does not", rules)
	}
}

package config

import (
	"strings"
	"testing"
	"time"
)

// YAML spells the same config many ways; envoyproxy/ratelimit's reader
// (YAML 1.1) accepts these, and so does sluice.
func TestYAMLForms(t *testing.T) {
	text := "\ufeff---\n" + `domain: forms
descriptors:
  - key: status
    value: 404 # a number, taken as written
    shadow_mode: yes
    rate_limit: &limit
      unit: Second
      requests_per_unit: 0x10
  - key: ratio
    value: 1.50
    rate_limit:
      <<: *limit
      requests_per_unit: 1_000
  - key: nothing
    value: ~
    rate_limit: {unit: MINUTE, requests_per_unit: 7}
  - key: same
    rate_limit: *limit
`
	for name, text := range map[string]string{"LF": text, "CRLF": strings.ReplaceAll(text, "\n", "\r\n")} {
		t.Run(name, func(t *testing.T) {
			c := mustParse(t, text)
			for _, tt := range []struct {
				e      Entry
				rate   int64
				period time.Duration
				shadow bool
			}{
				{Entry{"status", "404"}, 16, time.Second, true},
				{Entry{"ratio", "1.50"}, 1000, time.Second, false},
				{Entry{"nothing", "whatever"}, 7, time.Minute, false},
				{Entry{"same", "x"}, 16, time.Second, false},
			} {
				ms, err := c.Match("forms", []Entry{tt.e})
				if err != nil || len(ms) != 1 {
					t.Fatalf("Match(%v) = %v, %v", tt.e, ms, err)
				}
				r := ms[0].Rule
				if r.Limit.Rate != tt.rate || r.Limit.Period != tt.period || r.Shadow != tt.shadow {
					t.Errorf("Match(%v): %v shadow %v, want %d/%v shadow %v", tt.e, r.Limit, r.Shadow, tt.rate, tt.period, tt.shadow)
				}
			}
		})
	}

	for _, bad := range []struct{ text, want string }{
		{"domain: d\nshadow_mode: \"true\"\n", `shadow_mode: want true or false, got "true"`},
		{"domain: [d]\n", `domain: want a string, got a list`},
		{"domain: d\ndescriptors: {key: k}\n", `descriptors: want a list, got a mapping`},
		{"domain: d\ndescriptors:\n  -\n", `descriptors[0]: want a mapping of keys to values, got nothing`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: [1]\n", `descriptors[0].rate_limit: want a mapping of keys to values, got a list`},
		{"domain: d\ndescriptors:\n  - key: k\n    vaule: v\n", `unknown key "vaule" (did you mean "value"?)`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: n, unit: second, requests_per_unit: 1}\n    name: n\n", `key "name" does not belong here (it goes in rate_limit or a replaces entry)`},
		{"domain: d\ndescriptors:\n  - key: k\n    value_to_metric: true\n", `"value_to_metric": sluice does not support value_to_metric`},
		{"domain: d\ndescriptors:\n  - &a {key: k}\n  - {<<: *a, kye: x}\n", `unknown key "kye" (did you mean "key"?)`},
	} {
		_, err := Parse("bad.yaml", []byte(bad.text))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", bad.text, err, bad.want)
		}
	}
}

package config

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
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
		{"domain: d\nvalue_to_metric: true\n", `key "value_to_metric" does not belong here (it goes in a descriptor)`},
		{"domain: d\ndescriptors:\n  - &a {key: k}\n  - {<<: *a, kye: x}\n", `unknown key "kye" (did you mean "key"?)`},
	} {
		_, err := Parse("bad.yaml", []byte(bad.text))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", bad.text, err, bad.want)
		}
	}
}

// countNodes counts the nodes of a yaml.v3 tree, each alias once.
func countNodes(n *yaml.Node) int {
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

// checkNodeBound fails if yaml.v3 makes more nodes of data than nodeBound
// allows for.
func checkNodeBound(t *testing.T, data []byte) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return // the parser's own limits and errors are not the bound's business
	}
	if got, bound := countNodes(&root), nodeBound(data); got > bound {
		t.Fatalf("yaml.v3 makes %d nodes of %q, more than nodeBound's %d", got, data, bound)
	}
}

// nodeBound is an upper bound, never an estimate: the densest YAML there
// is, at random, never beats it.
func TestNodeBound(t *testing.T) {
	for _, text := range []string{
		"", "a", "-", "?", ":", "---", "- - - -\n", "?\n?\n?\n", "[a:,b:,c:]", "{? ,? ,? }",
		"{a,b,c}", "[[],[],{}]", "[&a ,&b ,*a]", "x: !t\ny: &a\n", "- :\n- :\n", "a\u2028- b\u2028- c",
		"a\u0085b: c", "\"a\\\n,b\": [x]",
	} {
		checkNodeBound(t, []byte(text))
	}
	// YAML's punctuation, blanks and breaks, a word, and nothing else.
	alphabet := []string{"a", "bc", " ", "  ", "\n", "\t", "-", "- ", "?", "? ", ":", ": ", ",", "[", "]", "{", "}",
		"#", "&a", "&a ", "*a", "!t ", "!!str ", "|", ">", "'", "\"", "\\", "%", "@", "---\n", "\u2028", "\u0085", "é"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50_000 {
		var b strings.Builder
		for range 1 + r.IntN(16) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		checkNodeBound(t, []byte(b.String()))
	}
}

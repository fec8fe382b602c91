package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse holds Parse to its promises on any input: no panic, an error
// made of *Error values or a Config whose rules are all valid, and a Config
// that answers Match and forward auth without panicking; and nodeBound to
// its bound.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "testdata/*/*.yaml", examplesDir + "/*.yaml", "default.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: v*, share_threshold: true, rate_limit: {unit: second, requests_per_unit: 1}}\n"))
	f.Add([]byte("domain: d\nx: &a {key: k}\ndescriptors: [*a, {<<: *a, value: v}]\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: a*b*c, quota_mode: true, value_to_metric: true, metadata: &m {a: [1, 2.5, x, null, {b: *m}]}, rate_limit: {unit: second, requests_per_unit: 1}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkNodeBound(t, data)
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a Config with the error %v", err)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != "fuzz.yaml" || err.Error() == "" {
				t.Fatalf("Parse error %q is not an *Error naming the file", err)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n > maxErrors+1 {
				t.Fatalf("Parse reported %d problems, more than %d", n, maxErrors+1)
			}
			return
		}
		for _, r := range c.Rules() {
			if err := r.Validate(); err != nil {
				t.Fatalf("Parse accepted an invalid rule: %v", err)
			}
		}
		// Descriptors made of the input's own words, so that some match.
		words := strings.FieldsFunc(string(data), func(r rune) bool { return strings.ContainsRune(" \n:-,[]{}\"'", r) })
		if len(words) > 8 {
			words = words[:8]
		}
		for _, domain := range c.Domains() {
			var per [][]Match
			for i := range words {
				es := make([]Entry, 0, i+1)
				for j := 0; j <= i; j++ {
					es = append(es, Entry{Key: words[j], Value: words[(j+1)%len(words)]})
				}
				ms, err := c.Match(domain, es)
				if err != nil {
					t.Fatalf("Match(%q, %q) = %v", domain, es, err)
				}
				for _, m := range ms {
					if m.Rule.Name == "" || m.Key == "" || strings.ContainsAny(m.Key, "{} \n") ||
						len(m.MetricLabel) > MaxMetricLabel || strings.ContainsAny(m.MetricLabel, " \n") {
						t.Fatalf("Match(%q, %q) gave %+v", domain, es, m)
					}
				}
				if r := c.Redacted(domain, es); len(r) != len(es) {
					t.Fatalf("Redacted(%q, %q) = %q", domain, es, r)
				}
				per = append(per, ms)
			}
			ApplyReplaces(per)
			if fa := c.ForwardAuth(domain); fa != nil {
				_ = fa.Descriptors(values{{Kind: ClientIP}: "192.0.2.1", {Kind: Method}: "GET", {Kind: Path}: "/", {Kind: Host}: "h"}.of)
				_ = fa.String()
			}
		}
	})
}

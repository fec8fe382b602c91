package config

import (
	"strings"
	"testing"
)

// MatchSecrets and KeySecrets mark the entries Redacted digests, in the
// one walk that matches or keys the descriptor: whether a limit applies or
// not, and wherever the walk stops.
func TestSecretsAsRedacted(t *testing.T) {
	c := mustParse(t, `
domain: api
descriptors:
  - key: api_key
    secret: true
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: plan
        secret: true
        descriptors:
          - key: path
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	for _, es := range [][]Entry{
		{{"api_key", "sk_1"}, {"path", "/x"}},                // a limit applies
		{{"api_key", "sk_1"}},                                // lands on a descriptor without limits
		{{"api_key", "sk_1"}, {"nope", "x"}},                 // stops early
		{{"api_key", "sk_1"}, {"path", "/x"}, {"more", "y"}}, // deeper than the config
		{{"api_key", "sk_1"}, {"plan", "gold"}, {"path", "/x"}},
		{{"user", "alice"}},
	} {
		var want uint64
		for i, e := range c.Redacted("api", es) {
			if e.Value != es[i].Value {
				want |= 1 << i
			}
		}
		if _, got, err := c.MatchSecrets("api", es); err != nil || got != want {
			t.Errorf("MatchSecrets(%v) = %b, %v; want %b, as Redacted digests", es, got, err, want)
		}
		// The key is Key's (which is KeySecrets' first result), and it never
		// holds a secret value as it came.
		key, got, err := c.KeySecrets("api", es)
		if err != nil || got != want || (want&1 != 0 && strings.Contains(key, "sk_1")) {
			t.Errorf("KeySecrets(%v) = %q, %b, %v; want %b and no raw secret in the key", es, key, got, err, want)
		}
	}
	if _, _, err := c.MatchSecrets("other", nil); err == nil {
		t.Error("MatchSecrets(unknown domain): no error")
	}
}

package config

import (
	"slices"
	"testing"
)

func TestRLQSEntries(t *testing.T) {
	c, err := Parse("quota.yaml", []byte(`
domain: quota
descriptors:
  - key: name
    rate_limit: {unit: second, requests_per_unit: 10}
rlqs:
  bucket_keys: [name, env]
`))
	if err != nil {
		t.Fatal(err)
	}
	q := c.RLQS("quota")
	if got := q.BucketKeys(); !slices.Equal(got, []string{"name", "env"}) {
		t.Fatalf("BucketKeys() = %q, want [name env]", got)
	}
	tests := []struct {
		q      *RLQS
		bucket map[string]string
		want   []Entry
	}{
		{q, map[string]string{"env": "prod", "name": "api"}, []Entry{{"name", "api"}, {"env", "prod"}}},
		{q, map[string]string{"zone": "b", "env": "prod", "app": "x"}, []Entry{{"env", "prod"}, {"app", "x"}, {"zone", "b"}}},
		{q, map[string]string{}, []Entry{}},
		{nil, map[string]string{"name": "api", "env": "prod"}, []Entry{{"env", "prod"}, {"name", "api"}}},
	}
	for _, tt := range tests {
		if got := tt.q.Entries(tt.bucket, nil); !slices.Equal(got, tt.want) && len(got)+len(tt.want) > 0 {
			t.Errorf("%v.Entries(%v) = %v, want %v", tt.q, tt.bucket, got, tt.want)
		}
	}
	if c.RLQS("other") != nil {
		t.Error(`RLQS("other") is not nil for an unknown domain`)
	}
}

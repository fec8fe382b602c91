package config

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestLimits(t *testing.T) {
	c, err := Parse("shop.yaml", []byte(`domain: shop
descriptors:
  - key: user
    rate_limits:
      - name: per_user
        algorithm: gcra
        period: 30s
        requests_per_unit: 10
        burst: 20
  - key: path
    value: /api/*
    descriptors:
      - key: plan
        value: free
        rate_limit:
          unit: minute
          requests_per_unit: 5
          replaces:
            - name: per_user
  - key: health
    rate_limit:
      unlimited: true
`))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Limits()
	want := []LimitInfo{
		{Domain: "shop", Descriptor: []Entry{{"user", ""}}, Name: "per_user",
			Rule: sluice.Rule{Name: "per_user", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 10, Period: 30 * time.Second, Burst: 20}, Failure: sluice.FailOpen},
			File: "shop.yaml", Line: 5, Field: "descriptors[0].rate_limits[0]", ID: 0},
		{Domain: "shop", Descriptor: []Entry{{"path", "/api/*"}, {"plan", "free"}},
			Rule:     sluice.Rule{Name: "shop.path_/api/*.plan_free", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(5), Failure: sluice.FailOpen},
			Replaces: []string{"per_user"}, File: "shop.yaml", Line: 16, Field: "descriptors[1].descriptors[0].rate_limit", ID: 1},
		{Domain: "shop", Descriptor: []Entry{{"health", ""}}, Rule: sluice.Rule{Name: "shop.health"}, Unlimited: true,
			File: "shop.yaml", Line: 22, Field: "descriptors[2].rate_limit", ID: -1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Limits() =\n%+v\nwant\n%+v", got, want)
	}
	if (*Config)(nil).Limits() != nil {
		t.Error("nil Config: Limits() != nil")
	}
}

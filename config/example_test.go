package config_test

import (
	"fmt"
	"log"

	"github.com/sluicehq/sluice/config"
)

func Example() {
	cfg, err := config.Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  # 5 marketing messages a day to any one number.
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Any number: 10 a second with bursts of 20, and 100 a day.
  - key: to_number
    rate_limits:
      - name: per_number
        algorithm: token_bucket
        unit: second
        requests_per_unit: 10
        burst: 20
      - name: per_number_daily
        unit: day
        requests_per_unit: 100
`))
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range [][]config.Entry{
		{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}},
		{{Key: "to_number", Value: "2061111111"}},
		{{Key: "message_type", Value: "receipt"}, {Key: "to_number", Value: "2061111111"}},
	} {
		ms, err := cfg.Match("messaging", d)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d)
		if len(ms) == 0 {
			fmt.Println("  no limit")
		}
		for _, m := range ms {
			fmt.Printf("  %s: %s %v, counted as %s\n", m.Rule.Name, m.Rule.Algorithm, m.Rule.Limit, m.Key)
		}
	}
	// Output:
	// [{message_type marketing} {to_number 2061111111}]
	//   messaging.message_type_marketing.to_number: fixed_window 5/24h0m0s, counted as messaging|message_type=marketing|to_number=2061111111
	// [{to_number 2061111111}]
	//   per_number: token_bucket 10/1s burst 20, counted as messaging|to_number=2061111111
	//   per_number_daily: fixed_window 100/24h0m0s, counted as messaging|to_number=2061111111
	// [{message_type receipt} {to_number 2061111111}]
	//   no limit
}

func ExampleLoad() {
	// A directory is read as envoyproxy/ratelimit reads its config
	// directory: every *.yaml and *.yml file, one domain each.
	cfg, err := config.Load("../examples/config")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.Domains())

	// Mistakes are reported by file, line and field.
	_, err = config.Load("testdata/misspelled_key.yaml")
	fmt.Println(err)
	// Output:
	// [api_gateway edge_proxy messaging storefront]
	// testdata/misspelled_key.yaml:5: descriptors[0]: unknown key "ratelimit" (did you mean "rate_limit"?)
}

func ExampleApplyReplaces() {
	cfg, err := config.Parse("api.yaml", []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 60}
  - key: path
    value: /search*
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 600
          replaces: [{name: per_user}]
`))
	if err != nil {
		log.Fatal(err)
	}
	// One request, two descriptors: per user, and per path and user.
	var matches [][]config.Match
	for _, d := range [][]config.Entry{
		{{Key: "user", Value: "ada"}},
		{{Key: "path", Value: "/search?q=sluice"}, {Key: "user", Value: "ada"}},
	} {
		ms, _ := cfg.Match("api", d)
		matches = append(matches, ms)
	}
	config.ApplyReplaces(matches)
	for i, ms := range matches {
		for _, m := range ms {
			fmt.Println(i, m.Rule.Name, m.Rule.Limit)
		}
	}
	// Output:
	// 1 api.path_/search*.user 600/1m0s
}

func ExampleForwardAuth_Descriptors() {
	fa := config.Default().ForwardAuth(config.DefaultDomain)
	// The server tells each part of the original request an entry names.
	req := map[config.Source]string{
		{Kind: config.ClientIP}:                  "203.0.113.7",
		{Kind: config.Method}:                    "GET",
		{Kind: config.Path}:                      "/orders",
		{Kind: config.Header, Name: "X-Api-Key"}: "k-123",
	}
	ds := fa.Descriptors(func(s config.Source) string { return req[s] })
	fmt.Println(fa.DenyStatus(), ds)
	// Output:
	// 429 [[{remote_address 203.0.113.7}] [{api_key k-123}]]
}

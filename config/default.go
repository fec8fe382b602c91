package config

import (
	_ "embed"
	"sync"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultDomain is the domain of the built-in policy.
const DefaultDomain = "sluice"

// defaultConfig is parsed once, so that every caller of Default shares
// one set of rules.
var defaultConfig = sync.OnceValue(func() *Config {
	c, err := Parse("(built-in)/default.yaml", defaultYAML)
	if err != nil {
		// The embedded file is part of the program and the tests load
		// it: this cannot happen in a released binary.
		panic("config: the built-in default policy does not load: " + err.Error())
	}
	return c
})

// Default returns the built-in policy that the service runs with when it is
// given no config, for domain "sluice":
//
//   - remote_address: 10 per second with bursts of 20 (token bucket), and
//     1000 per hour;
//   - api_key: 50 per second with bursts of 100 (GCRA), and 100000 per day;
//   - forward_auth: the client's address, and the X-API-Key header when
//     present; denials answer 429.
//
// The text is config/default.yaml in the source tree. Every call returns
// the same Config.
func Default() *Config { return defaultConfig() }

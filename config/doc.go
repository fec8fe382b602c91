// Package config reads sluice's rate-limit configuration:
// envoyproxy/ratelimit's YAML format, accepted as is, plus what sluice adds
// to it. It turns a request's descriptors into the rules and keys to
// check. sluice serve and sluice check use it; a program of your own uses
// it to serve the same policy as they do (Example).
//
// Load a config with [Load] (files or directories), or take the built-in
// policy with [Default]. [Config.Reload] loads a change with the same
// options, and keeps the old Config when the new one is bad. A Config is
// immutable and safe for concurrent use. Prepare each rule of
// [Config.Rules] once, with a sluice.Limiter's Prepare ([Config.CheckRules]
// reports errors at the rules' lines). Then, for each request, [Config.Match]
// each descriptor, apply [ApplyReplaces], and decide every match that is
// not Unlimited together, as sluice.Check{Rule: prepared[m.ID], Key: m.Key}.
//
// One file is one domain. In a rate_limit, sluice adds:
//
//	algorithm: token_bucket  # token_bucket, leaky_bucket, gcra, fixed_window,
//	                         # sliding_log or sliding_counter. The default is
//	                         # fixed_window, aligned to the Unix epoch, which
//	                         # is how envoyproxy/ratelimit counts: a migrated
//	                         # config behaves the same.
//	period: 30s              # any Go duration, instead of unit
//	burst: 20                # the bucket's size, for token_bucket,
//	                         # leaky_bucket and gcra; 0 means
//	                         # requests_per_unit
//	failure: closed          # when the store cannot answer: open (allow, the
//	                         # default), closed (deny) or local (decide in
//	                         # this process alone)
//	charge: usage            # gate (the default) or usage, recorded after
//	                         # the fact (docs/config.md, Usage limits)
//	lease: {}                # decided on leased quota, to a stated bound,
//	                         # with renew: and ttl: or their defaults
//	                         # (docs/config.md, Leased limits)
//
// and on a descriptor secret: true (keyed by a digest of its value),
// several limits (rate_limits:), and forward_auth for GET /v1/auth. Every
// problem is an [*Error], "FILE:LINE: FIELD: what is wrong".
//
// The whole format (descriptors and wildcards, secrets, usage limits,
// leased limits, forward auth, matching, names and keys, loading, the caps, and the
// differences from envoyproxy/ratelimit) is in docs/config.md:
// https://github.com/sluicehq/sluice/blob/main/docs/config.md
package config

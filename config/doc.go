// Package config reads sluice's rate-limit configuration:
// envoyproxy/ratelimit's YAML format, accepted as is, plus what sluice adds
// to it (an algorithm per limit, any period, a burst, several limits per
// descriptor, failure modes, usage limits, domain-wide shadow mode,
// forward auth). It turns a request's descriptors into the rules and keys
// to check.
//
// # Using it
//
// Load a config with [Load] (files or directories), or take the built-in
// policy with [Default]. On a change, [Config.Reload] loads the new one
// with the same options; if the new config is bad it returns an error and
// the old Config stays in use. Rules are plain sluice.Rule values, and a
// store keeps a key's state under the rule's value, so a rule that did
// not change keeps its counts. A Config is immutable and safe for
// concurrent use.
//
// Prepare each rule of [Config.Rules] once, when the config is loaded,
// with a sluice.Limiter's Prepare: [Config.CheckRules] calls it with each
// rule's index and reports its errors at the lines that hold the rules.
// Then, for one request (an Envoy RateLimitRequest, a POST /json body, or
// what [ForwardAuth.Descriptors] builds for GET /v1/auth):
//
//	perDesc := make([][]config.Match, len(descriptors))
//	for i, entries := range descriptors {
//		ms, err := cfg.Match(domain, entries)
//		if errors.Is(err, config.ErrUnknownDomain) {
//			// envoyproxy/ratelimit answers OK, limiting nothing: do the same
//			// and count it.
//		}
//		perDesc[i] = ms
//	}
//	config.ApplyReplaces(perDesc)
//	// Every match that is not Unlimited becomes a
//	// sluice.Check{Rule: prepared[m.ID], Key: m.Key}; all of them are decided
//	// together.
//	// An Unlimited match is answered OK without asking the store.
//
// envoyproxy/ratelimit's service also refuses a request with an empty
// domain or no descriptors, and its global shadow mode (SHADOW_MODE)
// turns every denial into OK; those are the server's to do.
//
// # The format
//
// One file is one domain:
//
//	domain: messaging            # required, unique across files unless
//	                             # merged (Options.MergeDomains)
//	descriptors:                 # the descriptors, nested up to 64 deep
//	  - key: to_number           # required
//	    value: "2061111111"      # optional: without it, any value matches
//	    rate_limit:              # optional: the limit of this descriptor
//	      unit: day              # second, minute, hour, day, week, month
//	                             # (30 days) or year (365 days)
//	      unit_multiplier: 1     # optional: the window is unit × this
//	      requests_per_unit: 100 # required: 0 denies everything
//	      name: per_number       # optional; replaces refer to it
//	      replaces:              # optional: the limits this one replaces
//	        - name: other_limit
//	      unlimited: true        # instead of unit and requests_per_unit
//	    shadow_mode: true        # this descriptor's limits never deny
//	    quota_mode: true         # over these limits fails a request only
//	                             # if all its quota_mode descriptors are
//	                             # over; see Match.QuotaMode
//	    detailed_metric: true    # metrics per value; see Match.DetailedMetric
//	    value_to_metric: true    # the request's value in a metric label,
//	                             # bounded: see Match.MetricLabel
//	    share_threshold: true    # for a wildcard value: see below
//	    metadata: {owner: team}  # any mapping, returned as the response's
//	                             # dynamic metadata; see Match.Metadata
//	    descriptors: [...]       # nested descriptors
//
// A value holding * is a wildcard, each * standing for any run of
// characters, the empty one too, wherever it is and however many there
// are: "foo*" matches any value that starts with "foo", "/api/*/users"
// any that starts with "/api/" and ends with "/users", "svc*ep*rpc" any
// that has "svc", "ep" and "rpc" in that order, first and last, and "*"
// any value at all. A * cannot be escaped: it is always a wildcard. Each
// value a wildcard matches is counted on its own, unless the descriptor
// sets share_threshold, in which case all the values it matches share one
// count.
//
// A descriptor with neither a limit nor nested descriptors is allowed:
// a request descriptor that lands on it is explicitly not limited.
//
// # What sluice adds
//
// In a rate_limit, besides the above:
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
//	charge: usage            # gate (the default) or usage: see Usage limits
//
// On a descriptor, secret: true keys its values by their digest (128
// bits of SHA-256), so that an API key or a session token never reaches a
// store, its keys or its logs. The value is digested after matching, in
// [Config.Match], so it is one key however the request arrives (RLS,
// POST /json or forward auth), and the same key on every instance:
//
//	descriptors:
//	  - key: api_key
//	    secret: true
//	    rate_limit: {unit: second, requests_per_unit: 50}
//
// A secret descriptor may give a literal value, a key with a limit of its
// own. The value is written nowhere else: wherever the config's values
// show (a generated name, and so the metrics, the RateLimit-Policy header
// and the store's keys that carry it; an error; [Config.Limits]) it is
// '#' and the first 12 hex digits of its SHA-256, as in
// "api.api_key_#e72d29d3a277".
//
// A descriptor may have several limits, all of which must allow a request,
// as a list; each may have a name:
//
//	rate_limits:
//	  - name: per_ip
//	    algorithm: token_bucket
//	    unit: second
//	    requests_per_unit: 10
//	    burst: 20
//	  - name: per_ip_hourly
//	    unit: hour
//	    requests_per_unit: 1000
//
// At the top level of a file, shadow_mode: true puts every limit of the
// domain in shadow mode, and failure sets the domain's default failure
// mode.
//
// # Usage limits
//
// A limit gates admission by default (charge: gate): a request is charged
// only if every limit allows it, and a request a limit cannot afford is
// refused and charges nothing. Some costs are known only once the work is
// done: the tokens of an LLM's answer, the bytes sent, the money spent. A
// limit with charge: usage records them after the fact
// ([sluice.ChargeUsage]):
//
//	domain: llm
//	descriptors:
//	  - key: api_key
//	    secret: true
//	    rate_limits:
//	      - name: tokens_per_hour
//	        unit: hour
//	        requests_per_unit: 100000  # tokens
//	        charge: usage
//	      - name: requests_per_minute  # a gate beside it
//	        unit: minute
//	        requests_per_unit: 60
//
// The proxy checks the budget when a request arrives, with a descriptor
// whose hits_addend is 0 (a check: it records nothing), and charges the
// tokens the model used when the answer is done, with hits_addend set to
// them, ignoring that second answer. A usage limit records the cost
// whatever is left, so a budget can be taken past zero, into debt, and
// the charge that went over is answered as over; a check answers over
// while less than one unit is left. So a key that used 150 tokens of a
// budget of 100 is refused until the debt drains. The debt is capped at
// one period's worth (a window's count never above twice
// requests_per_unit, a bucket never below -burst), so a key left alone is
// usable again within two periods. A usage limit is charged even when
// another limit of the request denies it; a gate beside it is charged only
// when every limit, the usage one included, allows. examples/llm runs
// this end to end.
//
// # Forward auth
//
// The forward_auth section of a domain says how /v1/auth (nginx
// auth_request, Traefik ForwardAuth, Envoy ext_authz) builds request
// descriptors from an HTTP request:
//
//	forward_auth:
//	  proxy: nginx              # required: nginx, traefik or envoy
//	  deny_status: 429          # or 403: nginx auth_request passes only
//	                            # 401 and 403 on, and makes others a 500
//	  descriptors:              # each becomes one request descriptor
//	    - entries:
//	        - key: remote_address
//	          from: client_ip   # client_ip, method, path, host,
//	                            # header:NAME or query:NAME
//	    - entries:
//	        - key: api_key
//	          from: header:X-API-Key
//	        - key: tier
//	          value: public     # a literal value, instead of from
//	    - entries:
//	        - key: path
//	          from: path
//	          path_match: case_insensitive  # or exact, the default
//
// proxy names the proxy that calls /v1/auth for this domain. It has no
// default: every one of these proxies passes the client's own headers on
// to the auth request, so the server believes only the headers the named
// proxy sets, and only from a trusted peer (see package server for the
// table of headers). A descriptor whose value is missing from the request
// (no such header, say) is not sent, as Envoy skips a descriptor whose
// header is missing. A forward_auth descriptor that could never reach a
// limit of its domain (a misspelt key, most likely) is an error.
//
// path_match: case_insensitive, on an entry from: path, matches the path
// with its ASCII letters in lower case, for an application that routes
// /LOGIN and /Login as /login: IIS and ASP.NET, Express and Koa routers
// (case-insensitive unless told otherwise), Spring set up so. A value it
// reaches with upper-case letters would never match, and is an error.
// (Paths are normalised in any case; see package server.)
//
// quota_mode on any descriptor of a domain with forward_auth is an error:
// there the client chooses which descriptors a request has (a header of
// its own, a fresh API key each time), and in quota mode one more
// descriptor within its limit would take it past all the others. For the
// same reason [Config.CheckQuotaMode] refuses such a domain to a server
// that puts every descriptor in quota mode.
//
// # Matching
//
// A request descriptor is a list of entries (key, value). [Config.Match]
// walks the domain's descriptors with it, one level per entry, as
// envoyproxy/ratelimit does: at each level an entry takes the descriptor
// with its key and value; failing that, the first (in file order) with
// its key and a wildcard value that matches its value; failing that, the
// one with its key and no value. The limits that apply are those of the
// descriptor the last entry lands on. If an entry finds nothing, or the
// request descriptor has more entries than the config has levels, or the
// descriptor it lands on has no limit, no limit applies.
//
// The limits of all the request's descriptors apply together. A limit
// with replaces drops, for that request, every limit named in it
// ([ApplyReplaces]).
//
// # Names and keys
//
// Each limit becomes a [sluice.Rule]. Its name is the limit's name, or,
// if it has none, its descriptor's path as envoyproxy/ratelimit names its
// statistics (domain.key_value.key, such as "messaging.to_number"), with
// [i] appended for the i-th of a rate_limits list; a secret's literal
// value is written there as '#' and 12 hex digits (see above). A generated
// name changes only when the config does, and is escaped to printable
// ASCII without braces or quotes; a given name may hold neither. replaces refers
// to given names only.
//
// A request is counted under [Match.Key]: the domain and the request
// descriptor's entries, each byte outside printable ASCII, and each of
// % | = { }, written as %XX, as in
//
//	messaging|to_number=2061111111
//
// so that two different descriptors never share a count. A store counts
// per rule and key.
//
// # Loading and errors
//
// Load reads files and directories; a directory's *.yaml and *.yml files
// are read in name order, its subdirectories' too, recursively, skipping
// names that start with a dot, which is what a Kubernetes ConfigMap
// mounted as a volume needs (its files are symlinks through ..data), and
// never following a symlink to a directory. A config file is
// a regular file, symlinks followed: a named pipe or a device is refused
// without being read, as a read could wait for ever.
//
// A domain defined in two files is an error, as in envoyproxy/ratelimit,
// unless the files are merged ([Options].MergeDomains, which is its
// MERGE_DOMAIN_CONFIG and sluice serve's -merge-domains): the domain is
// then its files' top-level descriptors together, a descriptor at the
// top level of two files being an error that names both.
//
// Every problem is reported as an [*Error], "FILE:LINE: FIELD: what is
// wrong": unknown, misplaced and duplicate keys; a descriptor without a
// key; a duplicate descriptor; an unknown unit or algorithm; a negative,
// fractional, quoted or missing count; both unit and period; a burst for
// an algorithm without one; a limit its algorithm cannot hold; a domain
// defined twice; and more (see testdata/).
//
// A config costs memory in proportion to its YAML nodes, and so has caps,
// each refused with an error naming the file: a file holds at most
// [MaxFileSize] bytes (4 MiB) and [MaxNodes] nodes (2^20, counted with
// aliases expanded; some 40,000 descriptors written out in full), and a
// config, all its files together, at most [MaxItems] descriptors and
// limits (2^17). A file over the size or node cap is refused before it is
// parsed. A config at the caps takes some 250 MB and a second to load.
//
// # Differences from envoyproxy/ratelimit
//
// Where envoyproxy/ratelimit would accept a config and sluice refuses it,
// the error says why. The differences:
//
//   - A missing requests_per_unit is an error; envoyproxy/ratelimit takes
//     it as 0, which denies everything. Write 0 to mean that.
//   - Keys are checked per level, so that a key in the wrong place is an
//     error; envoyproxy/ratelimit accepts any of its keys anywhere.
//   - Entries are matched as (key, value) pairs; envoyproxy/ratelimit joins
//     them as "key_value" strings, so that a key containing _ can match
//     another descriptor's key and value. A * is a wildcard in values
//     only, and refused in keys, where envoyproxy/ratelimit's joining
//     makes it match across the key and the value.
//   - A file holds one YAML document; more is an error, where
//     envoyproxy/ratelimit reads the first and ignores the rest.
//   - Numbers in metadata must be finite: .inf and .nan are refused, as
//     the JSON of POST /json cannot hold them. Keys in metadata are plain
//     scalars, taken as written (1.0 stays "1.0").
//   - detailed_metric is accepted and makes no metric of its own: a
//     request's value reaches a label only through value_to_metric, which
//     stands where envoyproxy/ratelimit would let detailed_metric
//     override it.
//   - Windows of month and year are 30 and 365 days from the Unix epoch,
//     as envoyproxy/ratelimit's are by default (not calendar months).
//   - A limit gates by default, so sluice's fixed window does not count a
//     denied request, where envoyproxy/ratelimit's counter counts every
//     hit: the decisions are the same for requests of one hit, but a
//     denied request of many hits (hits_addend) uses up no quota here. A
//     limit with charge: usage counts every hit, as does every limit under
//     sluice serve's -charge-per-descriptor, which envoy mode sets as
//     envoyproxy/ratelimit's default (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
//     false) does.
package config

package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// envoyproxy/ratelimit is configured by environment variables. In envoy
// mode (any of them set, or -envoy-env), sluice serve reads them as it
// does, with its defaults for those not set; a flag given on the command
// line wins over the variable. Each variable sluice reads becomes the
// value of a flag, so that -print-config can show every setting and where
// it came from, and so that a variable means exactly what its flag means.

// An envoyVar is one of envoyproxy/ratelimit's variables.
type envoyVar struct {
	name string
	def  string // envoyproxy/ratelimit's default; "" if none
	// flags are the flags the variable sets, for the table of
	// docs/envoy-environment.md; empty for a variable sluice does not
	// implement or has no need of.
	flags string
	// note, for a variable without flags, says what sluice does instead;
	// report says when to say it at start.
	note   string
	report func(value string, set bool) bool
	// generic names (PORT, HOST, LOG_LEVEL) are common in environments
	// that have nothing to do with envoyproxy/ratelimit: they are read in
	// envoy mode but do not turn it on by themselves.
	generic bool
}

// Conditions for reporting a variable at start.
var (
	whenSet      = func(_ string, set bool) bool { return set }
	whenTrue     = func(v string, _ bool) bool { b, _ := strconv.ParseBool(v); return b }
	whenSetFalse = func(v string, set bool) bool { b, err := strconv.ParseBool(v); return set && err == nil && !b }
	// whenNotFalse: the variable's default is true, and sluice does not
	// do what true asks.
	whenNotFalse = func(v string, _ bool) bool { b, err := strconv.ParseBool(v); return err != nil || b }
)

const (
	noteMemcache = "memcache is not implemented: sluice keeps its counts in Redis (REDIS_*) or in memory"
)

// envoyVars lists the variables sluice knows, in the order of the
// table of docs/envoy-environment.md.
var envoyVars = []envoyVar{
	{name: "RUNTIME_ROOT", def: "/srv/runtime_data/current", flags: "-config"},
	{name: "RUNTIME_SUBDIRECTORY", flags: "-config"},
	{name: "RUNTIME_APPDIRECTORY", def: "config", flags: "-config"},
	{name: "RUNTIME_IGNOREDOTFILES", def: "false", note: "sluice never reads files or directories whose names start with a dot, nor files other than *.yaml and *.yml, so a Kubernetes ConfigMap's ..data directory is never read twice", report: whenSetFalse},
	{name: "RUNTIME_WATCH_ROOT", def: "true", note: "sluice checks the config files' content every -poll (1s): it sees a symlink swap of RUNTIME_ROOT and a change in place alike", report: whenSet},
	{name: "HOST", def: "0.0.0.0", flags: "-http", generic: true},
	{name: "PORT", def: "8080", flags: "-http", generic: true},
	{name: "GRPC_HOST", def: "0.0.0.0", flags: "-grpc"},
	{name: "GRPC_PORT", def: "8081", flags: "-grpc"},
	{name: "GRPC_UDS", flags: "-grpc-uds"},
	{name: "DEBUG_HOST", def: "0.0.0.0", flags: "-admin"},
	{name: "DEBUG_PORT", def: "6070", flags: "-admin"},
	{name: "USE_PROMETHEUS", def: "false", flags: "-metrics, -envoy-metrics"},
	{name: "PROMETHEUS_ADDR", def: ":9090", flags: "-metrics"},
	{name: "PROMETHEUS_PATH", def: "/metrics", flags: "-metrics-path"},
	{name: "LOG_LEVEL", def: "WARN", flags: "-log-level", generic: true},
	{name: "LOG_FORMAT", def: "text", flags: "-log-format", generic: true},
	{name: "BACKEND_TYPE", def: "redis", flags: "-redis"},
	{name: "REDIS_SOCKET_TYPE", def: "unix", flags: "-redis"},
	{name: "REDIS_TYPE", def: "SINGLE", flags: "-redis, -redis-sentinel, -redis-cluster"},
	{name: "REDIS_URL", def: "/var/run/nutcracker/ratelimit.sock", flags: "-redis, -redis-sentinel, -redis-cluster"},
	{name: "REDIS_AUTH", flags: "-redis-username, -redis-password"},
	{name: "REDIS_SENTINEL_AUTH", flags: "-redis-sentinel-password"},
	{name: "REDIS_TLS", def: "false", flags: "-redis-tls"},
	{name: "REDIS_TLS_CACERT", flags: "-redis-tls-ca"},
	{name: "REDIS_TLS_CLIENT_CERT", flags: "-redis-tls-cert"},
	{name: "REDIS_TLS_CLIENT_KEY", flags: "-redis-tls-key"},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", def: "false", flags: "-redis-tls-skip-hostname-verification"},
	{name: "REDIS_POOL_SIZE", def: "10", flags: "-redis-pool-size"},
	{name: "CACHE_KEY_PREFIX", flags: "-redis-prefix"},
	{name: "SHADOW_MODE", def: "false", flags: "-shadow"},
	{name: "QUOTA_MODE", def: "false", flags: "-quota-mode"},
	{name: "RESPONSE_DYNAMIC_METADATA", def: "false", flags: "-dynamic-metadata"},
	{name: "MERGE_DOMAIN_CONFIG", def: "false", flags: "-merge-domains"},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", def: "false", flags: "-charge-per-descriptor"},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", def: "false", flags: "-response-headers"},
	{name: "LIMIT_LIMIT_HEADER", def: "RateLimit-Limit", flags: "-limit-header"},
	{name: "LIMIT_REMAINING_HEADER", def: "RateLimit-Remaining", flags: "-remaining-header"},
	{name: "LIMIT_RESET_HEADER", def: "RateLimit-Reset", flags: "-reset-header"},
	{name: "GRPC_SERVER_USE_TLS", def: "false", flags: "-grpc-tls-cert, -grpc-tls-key"},
	{name: "GRPC_SERVER_TLS_CERT", flags: "-grpc-tls-cert"},
	{name: "GRPC_SERVER_TLS_KEY", flags: "-grpc-tls-key"},
	{name: "GRPC_CLIENT_TLS_CACERT", flags: "-grpc-tls-client-ca"},
	{name: "GRPC_CLIENT_TLS_SAN", flags: "-grpc-tls-client-san"},
	{name: "GRPC_MAX_CONNECTION_AGE", def: "24h", flags: "-grpc-max-connection-age"},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", def: "1h", flags: "-grpc-max-connection-age-grace"},
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", def: "false", flags: "-start-without-config"},
	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", def: "false", flags: "-health-requires-config"},
	{name: "REDIS_PERSECOND", def: "false", flags: "-redis-persecond, -redis-persecond-sentinel, -redis-persecond-cluster"},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", def: "unix", flags: "-redis-persecond"},
	{name: "REDIS_PERSECOND_TYPE", def: "SINGLE", flags: "-redis-persecond, -redis-persecond-sentinel, -redis-persecond-cluster"},
	{name: "REDIS_PERSECOND_URL", def: "/var/run/nutcracker/ratelimitpersecond.sock", flags: "-redis-persecond, -redis-persecond-sentinel, -redis-persecond-cluster"},
	{name: "REDIS_PERSECOND_POOL_SIZE", def: "10", flags: "-redis-persecond-pool-size"},
	{name: "REDIS_PERSECOND_AUTH", flags: "-redis-persecond-username, -redis-persecond-password"},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", flags: "-redis-persecond-sentinel-password"},
	{name: "REDIS_PERSECOND_TLS", def: "false", flags: "-redis-persecond-tls"},
	{name: "REDIS_PIPELINE_WINDOW", def: "0", note: "ignored: sluice batches the requests that arrive while a script run is out, on its own", report: whenSet},
	{name: "REDIS_PIPELINE_LIMIT", def: "0", note: "ignored: sluice batches the requests that arrive while a script run is out, on its own", report: whenSet},
	{name: "REDIS_TIMEOUT", def: "10s", flags: "-redis-timeout"},
	{name: "REDIS_PERSECOND_TIMEOUT", def: "10s", flags: "-redis-persecond-timeout"},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", def: "false", note: "not implemented: Redis does not make /healthcheck fail; while it is down each rule's failure mode decides", report: whenTrue},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", def: "0", note: "ignored: sluice remembers denials until their Retry-After on its own (10000 of them), which never denies what Redis would allow", report: whenSet},
	{name: "NEAR_LIMIT_RATIO", def: "0.8", flags: "-near-limit-ratio"},
	{name: "EXPIRATION_JITTER_MAX_SECONDS", def: "300", note: "ignored: sluice's keys expire when their state is idle again, no sooner", report: whenSet},
	{name: "CONFIG_TYPE", def: "FILE", flags: "-config, -xds"},
	{name: "USE_STATSD", def: "true", flags: "-statsd"},
	{name: "STATSD_HOST", def: "localhost", flags: "-statsd"},
	{name: "STATSD_PORT", def: "8125", flags: "-statsd"},
	{name: "USE_DOG_STATSD", def: "false", flags: "-statsd, -statsd-dog"},
	{name: "USE_DOG_STATSD_MOGRIFIERS", flags: "-statsd-mogrifier"},
	{name: "EXTRA_TAGS", flags: "-statsd-tags"},
	{name: "STATS_FLUSH_INTERVAL", def: "10s", flags: "-statsd-flush"},
	{name: "DISABLE_STATS", def: "false", flags: "-statsd, -metrics"},
	// Not a variable of envoyproxy/ratelimit's, which observes whole
	// milliseconds under response_time_seconds: true, the default, does
	// the same, so that its dashboards read the same values.
	{name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", def: "true", flags: "-envoy-metrics-ms"},
	{name: "PROMETHEUS_MAPPER_YAML", flags: "-envoy-metrics-mapper"},
	{name: "MEMCACHE_HOST_PORT", note: noteMemcache, report: whenSet},
	{name: "MEMCACHE_SRV", note: noteMemcache, report: whenSet},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", def: "localhost:18000", flags: "-xds"},
	{name: "CONFIG_GRPC_XDS_NODE_ID", def: "default", flags: "-xds-node-id"},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", flags: "-xds-node-metadata"},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", flags: "-xds-headers"},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", def: "3s", flags: "-xds-connect-retry"},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", def: "10s", flags: "-xds-backoff-initial"},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", def: "60s", flags: "-xds-backoff-max"},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", def: "0.5", flags: "-xds-backoff-random-factor"},
	{name: "XDS_CLIENT_BACKOFF_JITTER", def: "true", flags: "-xds-backoff-jitter"},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", flags: "-xds-max-msg-size"},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", def: "false", flags: "-xds-tls"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", flags: "-xds-tls-ca"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", flags: "-xds-tls-cert"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", flags: "-xds-tls-key"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", flags: "-xds-tls-server-name"},
	// Envoy Gateway sets it beside GRPC_SERVER_USE_TLS; envoyproxy/ratelimit
	// reads no such variable.
	{name: "GRPC_SERVER_TLS_CA_CERT", note: "ignored, as envoyproxy/ratelimit ignores it: the gRPC port's client CA is GRPC_CLIENT_TLS_CACERT", report: whenSet},
	{name: "TRACING_ENABLED", def: "false", flags: "-tracing"},
	{name: "TRACING_SERVICE_NAME", def: "RateLimit", flags: "-tracing-service-name"},
	{name: "TRACING_SERVICE_NAMESPACE", flags: "-tracing-service-namespace"},
	{name: "TRACING_SERVICE_INSTANCE_ID", flags: "-tracing-service-instance-id"},
	{name: "TRACING_SAMPLING_RATE", def: "1", flags: "-tracing-sampling-rate"},
	{name: "TRACING_EXPORTER_PROTOCOL", def: "http", flags: "-tracing-protocol"},
}

// lookupVar finds a variable of envoyVars.
func lookupVar(name string) envoyVar {
	for _, v := range envoyVars {
		if v.name == name {
			return v
		}
	}
	panic("envoyenv: unknown variable " + name) // a bug in this file
}

// envoyVarsSet lists the variables that are set and turn envoy mode on.
func envoyVarsSet(lookup func(string) (string, bool)) []string {
	var set []string
	for _, v := range envoyVars {
		if _, ok := lookup(v.name); ok && !v.generic {
			set = append(set, v.name)
		}
	}
	return set
}

// An envSetting is a flag's value from the variables.
type envSetting struct {
	flag, value string
	source      string // "env A, B; envoy default C"
}

// An envNote says what sluice does about a variable it does not
// implement.
type envNote struct {
	name, value string
	set         bool // else the value is envoyproxy/ratelimit's default
	note        string
}

func (n envNote) String() string {
	v := n.name + "=" + n.value
	if !n.set {
		v += " (envoyproxy/ratelimit's default)"
	}
	return v + ": " + n.note
}

// envReader reads variables with envoyproxy/ratelimit's defaults, and
// remembers which it read and which were set.
type envReader struct {
	lookup     func(string) (string, bool)
	set, deflt []string
	errs       []string
	out        []envSetting // the flags' values, in the order read
}

// get returns the variable's value, or its default.
func (r *envReader) get(name string) string {
	if v, ok := r.lookup(name); ok {
		r.set = append(r.set, name)
		return v
	}
	r.deflt = append(r.deflt, name)
	return lookupVar(name).def
}

// source describes the variables read since the last call, and forgets
// them.
func (r *envReader) source() string {
	var parts []string
	if len(r.set) > 0 {
		parts = append(parts, "env "+strings.Join(r.set, ", "))
	}
	if len(r.deflt) > 0 {
		parts = append(parts, "envoy default "+strings.Join(r.deflt, ", "))
	}
	r.set, r.deflt = nil, nil
	return strings.Join(parts, "; ")
}

// getBool reads a boolean as envoyproxy/ratelimit does (strconv.ParseBool).
func (r *envReader) getBool(name string) bool {
	v := r.get(name)
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s=%q: want true or false", name, v))
	}
	return b
}

// getInt reads a whole number.
func (r *envReader) getInt(name string) string {
	v := r.get(name)
	if _, err := strconv.Atoi(v); err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s=%q: want a whole number", name, v))
	}
	return v
}

// getDuration reads a duration such as 24h.
func (r *envReader) getDuration(name string) string {
	v := r.get(name)
	if _, err := time.ParseDuration(v); err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s=%q: want a duration such as 24h or 90s", name, v))
	}
	return v
}

// getTimeout reads a Redis deadline: a duration, positive and at most
// maxRedisTimeout.
func (r *envReader) getTimeout(name string) string {
	v := r.get(name)
	if d, err := time.ParseDuration(v); err != nil || d <= 0 || d > maxRedisTimeout {
		r.errs = append(r.errs, fmt.Sprintf("%s=%q: want a duration above 0 and at most %v, such as 50ms", name, v, maxRedisTimeout))
	}
	return v
}

// envoySettings reads envoyproxy/ratelimit's variables through lookup and
// returns the flag values they stand for, and notes on those sluice does
// not implement. The error names each variable that cannot be read.
func envoySettings(lookup func(string) (string, bool)) ([]envSetting, []envNote, error) {
	r := &envReader{lookup: lookup}
	r.envoyListeners()
	r.envoyRedis("REDIS", "redis")
	if r.getBool("REDIS_PERSECOND") {
		r.envoyRedis("REDIS_PERSECOND", "redis-persecond")
	} else {
		for _, f := range []string{"redis-persecond", "redis-persecond-sentinel", "redis-persecond-cluster"} {
			r.add(f, "")
		}
	}
	r.envoyAnswers()
	r.envoyServerTLS()
	r.add("grpc-max-connection-age", r.getDuration("GRPC_MAX_CONNECTION_AGE"))
	r.add("grpc-max-connection-age-grace", r.getDuration("GRPC_MAX_CONNECTION_AGE_GRACE"))
	r.add("start-without-config", strconv.FormatBool(r.getBool("FORCE_START_WITHOUT_INITIAL_CONFIG")))
	r.add("health-requires-config", strconv.FormatBool(r.getBool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")))
	r.envoyTracing()
	notes := r.envoyNotes()
	if len(r.errs) > 0 {
		return nil, nil, fmt.Errorf("envoyproxy/ratelimit's variables:\n  %s", strings.Join(r.errs, "\n  "))
	}
	return r.out, notes, nil
}

// add sets flag to value, from the variables read since the last add.
func (r *envReader) add(flag, value string) {
	r.out = append(r.out, envSetting{flag: flag, value: value, source: r.source()})
}

// addIfSet sets a flag from a variable only when it is set, its default
// being the flag's own.
func (r *envReader) addIfSet(flag, name string) {
	if v, ok := r.lookup(name); ok {
		r.set = append(r.set, name)
		r.add(flag, v)
	}
}

// envoyListeners reads the config's place, the listeners and the log.
func (r *envReader) envoyListeners() {
	switch t := r.get("CONFIG_TYPE"); {
	case strings.EqualFold(t, "FILE"):
		r.source()
		r.add("config", filepath.Join(r.get("RUNTIME_ROOT"), r.get("RUNTIME_SUBDIRECTORY"), r.get("RUNTIME_APPDIRECTORY")))
		r.add("xds", "")
	case strings.EqualFold(t, "GRPC_XDS_SOTW"):
		r.source()
		r.envoyXDS()
	default:
		r.errs = append(r.errs, fmt.Sprintf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", t))
		r.source()
	}

	r.add("http", net.JoinHostPort(r.get("HOST"), r.getInt("PORT")))
	r.add("grpc", net.JoinHostPort(r.get("GRPC_HOST"), r.getInt("GRPC_PORT")))
	r.addIfSet("grpc-uds", "GRPC_UDS")
	// envoyproxy/ratelimit's debug port is sluice's admin listener: the
	// console, its config (/v1/policy) and statistics (/v1/stats).
	r.add("admin", net.JoinHostPort(r.get("DEBUG_HOST"), r.getInt("DEBUG_PORT")))
	r.envoyStats()
	lvl := r.get("LOG_LEVEL")
	if l, ok := logrusLevel(lvl); ok {
		r.add("log-level", l)
	} else {
		r.errs = append(r.errs, fmt.Sprintf("LOG_LEVEL=%q: want debug, info, warn or error", lvl))
		r.source()
	}
	r.add("log-format", strings.ToLower(r.get("LOG_FORMAT")))
}

// envoyStats reads where the statistics go: statsd over TCP (on by
// default, as there), DogStatsD over UDP, or Prometheus, at most one of
// them, as envoyproxy/ratelimit refuses to start otherwise; DISABLE_STATS
// turns all off.
func (r *envReader) envoyStats() {
	statsd, dog, prom := r.getBool("USE_STATSD"), r.getBool("USE_DOG_STATSD"), r.getBool("USE_PROMETHEUS")
	if r.getBool("DISABLE_STATS") {
		statsd, dog, prom = false, false, false
	}
	if n := btoi(statsd) + btoi(dog) + btoi(prom); n > 1 {
		r.errs = append(r.errs, fmt.Sprintf("USE_STATSD=%v, USE_DOG_STATSD=%v, USE_PROMETHEUS=%v: set one of them true, not %d (USE_STATSD is true unless set false)", statsd, dog, prom, n))
	}
	if prom {
		r.add("metrics", r.get("PROMETHEUS_ADDR"))
		r.add("metrics-path", r.get("PROMETHEUS_PATH"))
		r.add("envoy-metrics", "true")
		r.add("envoy-metrics-ms", strconv.FormatBool(r.getBool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS")))
		r.add("envoy-metrics-mapper", r.get("PROMETHEUS_MAPPER_YAML"))
	} else {
		r.add("metrics", "")
	}
	if statsd || dog {
		r.add("statsd", net.JoinHostPort(r.get("STATSD_HOST"), r.getInt("STATSD_PORT")))
		r.add("statsd-dog", strconv.FormatBool(dog))
		r.addIfSet("statsd-tags", "EXTRA_TAGS")
		r.add("statsd-flush", r.getDuration("STATS_FLUSH_INTERVAL"))
		if dog {
			r.envoyMogrifiers()
		}
	} else {
		r.add("statsd", "")
	}
	r.addIfSet("near-limit-ratio", "NEAR_LIMIT_RATIO")
	// Not a variable: what its statistics library sends beside the
	// rate-limit statistics, which its dashboards read.
	r.deflt = append(r.deflt, "(its Go runtime statistics, whole-millisecond timings)")
	r.add("statsd-envoy", "true")
}

// envoyMogrifiers reads the DogStatsD mogrifiers that
// USE_DOG_STATSD_MOGRIFIERS names, each from its
// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS, as
// envoyproxy/ratelimit reads them (the name upper-cased); each becomes a
// -statsd-mogrifier, in the order named, the first that matches applying.
func (r *envReader) envoyMogrifiers() {
	list := r.get("USE_DOG_STATSD_MOGRIFIERS")
	if strings.TrimSpace(list) == "" {
		r.source() // it sets no flag
		return
	}
	for name := range strings.SplitSeq(list, ",") {
		if name == "" {
			r.errs = append(r.errs, fmt.Sprintf("USE_DOG_STATSD_MOGRIFIERS=%q: an empty name; want names separated by commas", list))
			continue
		}
		v := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name) + "_"
		pattern, newName, tags := r.getExtra(v+"PATTERN"), r.getExtra(v+"NAME"), r.getExtra(v+"TAGS")
		bad := len(r.errs)
		if err := checkMogrifierPattern(pattern); err != nil {
			r.errs = append(r.errs, fmt.Sprintf("%sPATTERN=%q (mogrifier %s of USE_DOG_STATSD_MOGRIFIERS): %v", v, pattern, name, err))
		}
		switch {
		case newName == "":
			r.errs = append(r.errs, fmt.Sprintf("%sNAME is not set or empty (mogrifier %s of USE_DOG_STATSD_MOGRIFIERS): want the statistic's new name", v, name))
		case strings.Contains(newName, "|"):
			r.errs = append(r.errs, fmt.Sprintf("%sNAME=%q: a statistic's name cannot hold \"|\"", v, newName))
		}
		if strings.Contains(tags, "|") {
			r.errs = append(r.errs, fmt.Sprintf("%sTAGS=%q: a tag cannot hold \"|\"", v, tags))
		} else if _, err := parseMogrifierTags(tags); err != nil {
			r.errs = append(r.errs, fmt.Sprintf("%sTAGS=%q: %v", v, tags, err))
		}
		if len(r.errs) > bad {
			r.source()
			continue
		}
		r.add("statsd-mogrifier", pattern+"|"+newName+"|"+tags)
	}
}

// getExtra returns a variable that envoyVars does not list, its name
// made from another's value: "" when not set.
func (r *envReader) getExtra(name string) string {
	v, ok := r.lookup(name)
	if ok {
		r.set = append(r.set, name)
	}
	return v
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// envoyAnswers reads how requests are counted and answered.
func (r *envReader) envoyAnswers() {
	r.add("shadow", strconv.FormatBool(r.getBool("SHADOW_MODE")))
	r.add("quota-mode", strconv.FormatBool(r.getBool("QUOTA_MODE")))
	r.add("dynamic-metadata", strconv.FormatBool(r.getBool("RESPONSE_DYNAMIC_METADATA")))
	r.add("merge-domains", strconv.FormatBool(r.getBool("MERGE_DOMAIN_CONFIG")))
	// Not a variable of envoyproxy/ratelimit's: its way of naming keys,
	// so that old and new pods of a rolling swap count together.
	r.deflt = append(r.deflt, "(its Redis key names)")
	r.add("envoy-keys", "true")
	// Not a variable either: its answers' duration_until_reset, in whole
	// seconds, which its users' tests compare.
	r.deflt = append(r.deflt, "(its resets in whole seconds)")
	r.add("whole-second-resets", "true")
	// false, envoyproxy/ratelimit's default, charges every descriptor,
	// over its limits or not; true comes close to sluice's own default,
	// all or nothing.
	r.add("charge-per-descriptor", strconv.FormatBool(!r.getBool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")))
	if r.getBool("LIMIT_RESPONSE_HEADERS_ENABLED") {
		r.add("response-headers", "envoy")
	} else {
		r.add("response-headers", "none")
	}
	r.addIfSet("limit-header", "LIMIT_LIMIT_HEADER")
	r.addIfSet("remaining-header", "LIMIT_REMAINING_HEADER")
	r.addIfSet("reset-header", "LIMIT_RESET_HEADER")
}

// envoyXDS reads the config over xDS's variables (CONFIG_TYPE=GRPC_XDS_SOTW).
func (r *envReader) envoyXDS() {
	r.add("xds", r.get("CONFIG_GRPC_XDS_SERVER_URL"))
	r.add("xds-node-id", r.get("CONFIG_GRPC_XDS_NODE_ID"))
	r.addIfSet("xds-node-metadata", "CONFIG_GRPC_XDS_NODE_METADATA")
	r.addIfSet("xds-headers", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	r.add("xds-connect-retry", r.getPositive("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"))
	initial := r.getPositive("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	r.add("xds-backoff-initial", initial)
	most := r.getPositive("XDS_CLIENT_BACKOFF_MAX_INTERVAL")
	r.add("xds-backoff-max", most)
	if i, err := time.ParseDuration(initial); err == nil {
		if m, err := time.ParseDuration(most); err == nil && m < i {
			r.errs = append(r.errs, fmt.Sprintf("XDS_CLIENT_BACKOFF_MAX_INTERVAL=%q is below XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=%q", most, initial))
		}
	}
	f := r.get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")
	if v, err := strconv.ParseFloat(f, 64); err != nil || !(v >= 0 && v <= 1) {
		r.errs = append(r.errs, fmt.Sprintf("XDS_CLIENT_BACKOFF_RANDOM_FACTOR=%q: want a number from 0 to 1", f))
	}
	r.add("xds-backoff-random-factor", f)
	r.add("xds-backoff-jitter", strconv.FormatBool(r.getBool("XDS_CLIENT_BACKOFF_JITTER")))
	// Unset or 0 is gRPC's default, 4 MiB, as there.
	if v, ok := r.lookup("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); ok && v != "0" {
		r.add("xds-max-msg-size", r.getInt("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"))
	}
	if !r.getBool("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		r.add("xds-tls", "false")
		return
	}
	r.add("xds-tls", "true")
	_, cert := r.lookup("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
	_, key := r.lookup("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	if cert != key {
		r.errs = append(r.errs, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: a client certificate needs both")
	}
	r.addIfSet("xds-tls-ca", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")
	r.addIfSet("xds-tls-cert", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
	r.addIfSet("xds-tls-key", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	r.addIfSet("xds-tls-server-name", "CONFIG_GRPC_XDS_SERVER_TLS_SAN")
}

// getPositive reads a positive duration such as 3s.
func (r *envReader) getPositive(name string) string {
	v := r.get(name)
	if d, err := time.ParseDuration(v); err != nil || d <= 0 {
		r.errs = append(r.errs, fmt.Sprintf("%s=%q: want a positive duration such as 3s", name, v))
	}
	return v
}

// envoyTracing reads the OpenTelemetry tracing's settings. Where the
// spans go is said by the standard OTEL_EXPORTER_OTLP_* variables, which
// the OpenTelemetry SDK reads itself, as in envoyproxy/ratelimit.
func (r *envReader) envoyTracing() {
	r.add("tracing", strconv.FormatBool(r.getBool("TRACING_ENABLED")))
	r.add("tracing-service-name", r.get("TRACING_SERVICE_NAME"))
	r.addIfSet("tracing-service-namespace", "TRACING_SERVICE_NAMESPACE")
	r.addIfSet("tracing-service-instance-id", "TRACING_SERVICE_INSTANCE_ID")
	rate := r.get("TRACING_SAMPLING_RATE")
	if f, err := strconv.ParseFloat(rate, 64); err != nil || !(f >= 0 && f <= 1) {
		r.errs = append(r.errs, fmt.Sprintf("TRACING_SAMPLING_RATE=%q: want a number from 0 to 1, such as 0.1", rate))
	}
	r.add("tracing-sampling-rate", rate)
	// Unset, the standard OTEL_EXPORTER_OTLP_PROTOCOL may choose it
	// (serveCmd.tracingSettings), else it is http, as here.
	if v, ok := r.lookup("TRACING_EXPORTER_PROTOCOL"); ok {
		r.set = append(r.set, "TRACING_EXPORTER_PROTOCOL")
		switch strings.ToLower(v) {
		case "", "http":
			r.add("tracing-protocol", "http")
		case "grpc":
			r.add("tracing-protocol", "grpc")
		default:
			r.errs = append(r.errs, fmt.Sprintf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", v))
			r.source()
		}
	}
}

// envoyServerTLS reads the gRPC port's TLS.
func (r *envReader) envoyServerTLS() {
	if !r.getBool("GRPC_SERVER_USE_TLS") {
		r.source()
		return
	}
	r.source()
	for _, name := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY"} {
		if _, ok := r.lookup(name); !ok {
			r.errs = append(r.errs, "GRPC_SERVER_USE_TLS=true: set "+name+" too")
		}
	}
	r.addIfSet("grpc-tls-cert", "GRPC_SERVER_TLS_CERT")
	r.addIfSet("grpc-tls-key", "GRPC_SERVER_TLS_KEY")
	r.addIfSet("grpc-tls-client-ca", "GRPC_CLIENT_TLS_CACERT")
	r.addIfSet("grpc-tls-client-san", "GRPC_CLIENT_TLS_SAN")
}

// envoyNotes are the notes on the variables sluice does not implement,
// and on the TLS files given without GRPC_SERVER_USE_TLS.
func (r *envReader) envoyNotes() []envNote {
	var notes []envNote
	ct, _ := r.lookup("CONFIG_TYPE")
	xds := strings.EqualFold(ct, "GRPC_XDS_SOTW")
	for _, v := range envoyVars {
		// Over xDS no file is read: what RUNTIME_* say of files does
		// not apply.
		if v.note == "" || xds && strings.HasPrefix(v.name, "RUNTIME_") {
			continue
		}
		val, set := r.lookup(v.name)
		if !set {
			val = v.def
		}
		if v.report(val, set) {
			notes = append(notes, envNote{name: v.name, value: val, set: set, note: v.note})
		}
	}
	if !r.getBool("GRPC_SERVER_USE_TLS") {
		for _, name := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"} {
			if v, ok := r.lookup(name); ok {
				notes = append(notes, envNote{name: name, value: v, set: true, note: "ignored: GRPC_SERVER_USE_TLS is not true"})
			}
		}
	}
	useTLS, _ := r.lookup("CONFIG_GRPC_XDS_SERVER_USE_TLS")
	if xds && !whenTrue(useTLS, true) {
		for _, name := range []string{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"} {
			if v, ok := r.lookup(name); ok {
				notes = append(notes, envNote{name: name, value: v, set: true, note: "ignored: CONFIG_GRPC_XDS_SERVER_USE_TLS is not true"})
			}
		}
	}
	return notes
}

// envoyRedis reads the variables of a Redis, v REDIS for the main one or
// REDIS_PERSECOND for the per-second one, into the flags beginning with f,
// redis or redis-persecond: v_TYPE and v_SOCKET_TYPE say how to read
// v_URL. The TLS files are REDIS_TLS_*'s for both, as in
// envoyproxy/ratelimit.
func (r *envReader) envoyRedis(v, f string) {
	main := v == "REDIS"
	if main {
		if b := r.get("BACKEND_TYPE"); !strings.EqualFold(b, "redis") {
			r.errs = append(r.errs, fmt.Sprintf("BACKEND_TYPE=%q: only redis is implemented (%s)", b, noteMemcache))
		}
		r.source()
	}
	r.envoyRedisKind(v, f)
	if auth, ok := r.lookup(v + "_AUTH"); ok {
		// "password", or "username:password".
		user, pass, found := strings.Cut(auth, ":")
		if !found {
			user, pass = "", auth
		}
		r.set = append(r.set, v+"_AUTH")
		r.add(f+"-username", user)
		r.set = append(r.set, v+"_AUTH")
		r.add(f+"-password", pass)
	}
	if pw, ok := r.lookup(v + "_SENTINEL_AUTH"); ok {
		r.set = append(r.set, v+"_SENTINEL_AUTH")
		r.add(f+"-sentinel-password", pw)
	}
	tls := r.getBool(v + "_TLS")
	r.add(f+"-tls", strconv.FormatBool(tls))
	if tls || main {
		for _, t := range [][2]string{{"-tls-ca", "REDIS_TLS_CACERT"}, {"-tls-cert", "REDIS_TLS_CLIENT_CERT"}, {"-tls-key", "REDIS_TLS_CLIENT_KEY"}} {
			r.addIfSet(f+t[0], t[1])
		}
		r.add(f+"-tls-skip-hostname-verification", strconv.FormatBool(r.getBool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")))
	}
	r.add(f+"-pool-size", r.getInt(v+"_POOL_SIZE"))
	// Only when set: envoyproxy/ratelimit's 10s default would outlast
	// Envoy's own wait for the answer, so unset the store keeps its own.
	if _, ok := r.lookup(v + "_TIMEOUT"); ok {
		r.add(f+"-timeout", r.getTimeout(v+"_TIMEOUT"))
	}
	if main {
		r.addIfSet("redis-prefix", "CACHE_KEY_PREFIX")
	}
}

// envoyRedisKind reads v_TYPE, v_SOCKET_TYPE and v_URL into which of f,
// f-sentinel and f-cluster names the Redis.
func (r *envReader) envoyRedisKind(v, f string) {
	typ, socket, url := strings.ToUpper(r.get(v+"_TYPE")), strings.ToLower(r.get(v+"_SOCKET_TYPE")), r.get(v+"_URL")
	if socket != "tcp" && socket != "unix" {
		r.errs = append(r.errs, fmt.Sprintf(v+"_SOCKET_TYPE=%q: want tcp or unix", socket))
	}
	switch typ {
	case "SINGLE":
		switch {
		case strings.Contains(url, "://"): // already a URL
		case socket == "unix":
			url = "unix://" + url
		default:
			url = "redis://" + url
		}
		r.add(f, url)
		r.add(f+"-sentinel", "")
		r.add(f+"-cluster", "")
	case "SENTINEL":
		master, sentinels, _ := strings.Cut(url, ",")
		if sentinels == "" {
			r.errs = append(r.errs, fmt.Sprintf(v+"_URL=%q: "+v+"_TYPE=sentinel wants the master's name and the sentinels, MASTER,HOST:PORT,…", url))
		}
		if socket == "unix" {
			r.errs = append(r.errs, v+"_TYPE=sentinel: set "+v+"_SOCKET_TYPE=tcp; sentinels are reached over TCP")
		}
		r.add(f+"-sentinel", master+"@"+sentinels)
		r.add(f, "")
		r.add(f+"-cluster", "")
	case "CLUSTER":
		if socket == "unix" {
			r.errs = append(r.errs, v+"_TYPE=cluster: set "+v+"_SOCKET_TYPE=tcp; cluster nodes are reached over TCP")
		}
		r.add(f+"-cluster", url)
		r.add(f, "")
		r.add(f+"-sentinel", "")
	default:
		r.errs = append(r.errs, fmt.Sprintf(v+"_TYPE=%q: want single, sentinel or cluster", typ))
		r.source()
	}
}

// logrusLevel maps envoyproxy/ratelimit's log levels (logrus's) to
// sluice's.
func logrusLevel(s string) (string, bool) {
	switch l := strings.ToLower(s); l {
	case "trace", "debug":
		return "debug", true
	case "info":
		return "info", true
	case "warn", "warning":
		return "warn", true
	case "error", "fatal", "panic":
		return "error", true
	}
	return "", false
}

// envoyVarNames lists every variable sluice knows, for tests.
func envoyVarNames() []string {
	names := make([]string, len(envoyVars))
	for i, v := range envoyVars {
		names[i] = v.name
	}
	return names
}

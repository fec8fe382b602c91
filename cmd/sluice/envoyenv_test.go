package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// envOf is a lookup over a fixed environment.
func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// testEnv is the environment the tests pass to run: none but what withEnv
// sets, so that the process's own never reaches the command under test.
var testEnv = envOf()

// withEnv makes the test's runs of sluice serve read env.
func withEnv(t *testing.T, kv ...string) {
	t.Helper()
	old := testEnv
	testEnv = envOf(kv...)
	t.Cleanup(func() { testEnv = old })
}

// printed runs sluice serve -print-config with the environment and args,
// and returns each setting's value and source.
func printed(t *testing.T, env []string, args ...string) (values, sources map[string]string, out string) {
	t.Helper()
	withEnv(t, env...)
	code, stdout, stderr := runArgs(t, append([]string{"serve", "-print-config"}, args...)...)
	if code != exitOK || stderr != "" {
		t.Fatalf("serve -print-config %v with %v: exit %d, stderr %q", args, env, code, stderr)
	}
	values, sources = map[string]string{}, map[string]string{}
	row := regexp.MustCompile(`^-(\S+)\s+(\S+(?: bytes)?)\s+(.+)$`)
	for _, line := range strings.Split(stdout, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			values[m[1]], sources[m[1]] = m[2], m[3]
		}
	}
	return values, sources, stdout
}

func TestEnvoyEnvDefaults(t *testing.T) {
	// One variable turns envoy mode on; envoyproxy/ratelimit's defaults
	// apply to all the others.
	v, src, out := printed(t, []string{"USE_STATSD", "false"})
	want := map[string]string{
		"config":                        "/srv/runtime_data/current/config",
		"http":                          "0.0.0.0:8080",
		"grpc":                          "0.0.0.0:8081",
		"admin":                         "0.0.0.0:6070",
		"quota-mode":                    "false",
		"merge-domains":                 "false",
		"charge-per-descriptor":         "true",
		"metrics":                       `""`,
		"log-level":                     "warn",
		"log-format":                    "text",
		"redis":                         "unix:///var/run/nutcracker/ratelimit.sock",
		"redis-pool-size":               "10",
		"redis-prefix":                  "sluice:",
		"response-headers":              "none",
		"shadow":                        "false",
		"grpc-max-connection-age":       "24h0m0s",
		"grpc-max-connection-age-grace": "1h0m0s",
		"start-without-config":          "false",
		"drain":                         "0s",
	}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("-%s = %q, want %q", k, v[k], w)
		}
	}
	if src["config"] != "envoy default RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY" || src["drain"] != "default" {
		t.Errorf("sources: config %q, drain %q", src["config"], src["drain"])
	}
	if !strings.Contains(out, "envoy mode (USE_STATSD set)") || src["charge-per-descriptor"] != "envoy default STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT" {
		t.Errorf("print-config:\n%s", out)
	}
	if strings.Contains(out, "USE_STATSD=") {
		t.Errorf("USE_STATSD=false is reported:\n%s", out)
	}
}

func TestEnvoyEnvMapping(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		args []string
		want map[string]string // flag: value
		src  map[string]string // flag: source
	}{{
		name: "runtime layout, ports, prometheus, logs",
		env: []string{"RUNTIME_ROOT", "/data", "RUNTIME_SUBDIRECTORY", "ratelimit", "RUNTIME_APPDIRECTORY", "limits",
			"HOST", "127.0.0.1", "PORT", "18080", "GRPC_HOST", "::1", "GRPC_PORT", "18081", "DEBUG_PORT", "16070",
			"USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", ":19090", "PROMETHEUS_PATH", "/prom", "USE_STATSD", "false",
			"LOG_LEVEL", "Warning", "LOG_FORMAT", "JSON"},
		want: map[string]string{"config": "/data/ratelimit/limits", "http": "127.0.0.1:18080", "grpc": "[::1]:18081",
			"admin": "0.0.0.0:16070", "metrics": ":19090", "metrics-path": "/prom", "log-level": "warn", "log-format": "json"},
		src: map[string]string{"admin": "env DEBUG_PORT; envoy default DEBUG_HOST", "metrics": "env USE_STATSD, USE_PROMETHEUS, PROMETHEUS_ADDR; envoy default USE_DOG_STATSD, DISABLE_STATS"},
	}, {
		name: "single redis over tcp, with a user, TLS and a prefix",
		env: []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "redis.svc:6379", "REDIS_AUTH", "rl:s3cret", "REDIS_TLS", "true",
			"REDIS_TLS_CACERT", "/ca.pem", "REDIS_POOL_SIZE", "42", "CACHE_KEY_PREFIX", "rl_"},
		want: map[string]string{"redis": "redis://redis.svc:6379", "redis-username": "rl", "redis-password": "(hidden)",
			"redis-tls": "true", "redis-tls-ca": "/ca.pem", "redis-pool-size": "42", "redis-prefix": "rl_", "redis-cluster": `""`},
		src: map[string]string{"redis": "env REDIS_SOCKET_TYPE, REDIS_URL; envoy default REDIS_TYPE", "redis-password": "env REDIS_AUTH"},
	}, {
		name: "a password alone",
		env:  []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "r:6379", "REDIS_AUTH", "only-a-password"},
		want: map[string]string{"redis-username": `""`, "redis-password": "(hidden)"},
	}, {
		name: "sentinel",
		env:  []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH", "x"},
		want: map[string]string{"redis-sentinel": "mymaster@s1:26379,s2:26379", "redis": `""`, "redis-sentinel-password": "(hidden)"},
	}, {
		name: "cluster",
		env:  []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "CLUSTER", "REDIS_URL", "n1:6379,n2:6379,n3:6379"},
		want: map[string]string{"redis-cluster": "n1:6379,n2:6379,n3:6379", "redis": `""`, "redis-sentinel": `""`},
	}, {
		name: "a -redis flag wins over REDIS_TYPE=cluster",
		env:  []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "CLUSTER", "REDIS_URL", "n1:6379"},
		args: []string{"-redis", "redis://other:6379"},
		want: map[string]string{"redis": "redis://other:6379", "redis-cluster": `""`},
		src:  map[string]string{"redis": "flag -redis", "redis-cluster": "default"},
	}, {
		name: "mTLS, headers, shadow, start",
		env: []string{"GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/tls/tls.crt", "GRPC_SERVER_TLS_KEY", "/tls/tls.key",
			"GRPC_CLIENT_TLS_CACERT", "/tls/ca.crt", "GRPC_CLIENT_TLS_SAN", "envoy.local",
			"LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_RESET_HEADER", "X-Reset", "SHADOW_MODE", "true",
			"FORCE_START_WITHOUT_INITIAL_CONFIG", "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true",
			"QUOTA_MODE", "true", "RESPONSE_DYNAMIC_METADATA", "true", "MERGE_DOMAIN_CONFIG", "true",
			"GRPC_MAX_CONNECTION_AGE", "1h", "GRPC_UDS", "/run/rl.sock"},
		want: map[string]string{"grpc-tls-cert": "/tls/tls.crt", "grpc-tls-key": "/tls/tls.key", "grpc-tls-client-ca": "/tls/ca.crt",
			"grpc-tls-client-san": "envoy.local", "response-headers": "envoy", "reset-header": "X-Reset", "limit-header": "RateLimit-Limit",
			"shadow": "true", "start-without-config": "true", "health-requires-config": "true", "grpc-max-connection-age": "1h0m0s",
			"grpc-uds": "/run/rl.sock", "http-tls-cert": `""`, "quota-mode": "true", "dynamic-metadata": "true", "merge-domains": "true"},
	}, {
		name: "TLS files without GRPC_SERVER_USE_TLS are not used",
		env:  []string{"GRPC_SERVER_TLS_CERT", "/tls/tls.crt"},
		want: map[string]string{"grpc-tls-cert": `""`},
	}, {
		name: "flags win",
		env:  []string{"RUNTIME_ROOT", "/data", "SHADOW_MODE", "true", "PORT", "1"},
		args: []string{"-config", "/etc/sluice", "-shadow=false", "-http", ":2", "-log-level", "debug"},
		want: map[string]string{"config": "/etc/sluice", "shadow": "false", "http": ":2", "log-level": "debug"},
		src:  map[string]string{"config": "flag -config", "shadow": "flag -shadow", "log-level": "flag -log-level"},
	}, {
		name: "-envoy-env=false ignores the variables",
		env:  []string{"RUNTIME_ROOT", "/data", "REDIS_URL", "r:1"},
		args: []string{"-envoy-env=false"},
		want: map[string]string{"config": `""`, "redis": `""`, "http": ":8080"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, src, out := printed(t, tt.env, tt.args...)
			for k, w := range tt.want {
				if v[k] != w {
					t.Errorf("-%s = %q, want %q\n%s", k, v[k], w, out)
				}
			}
			for k, w := range tt.src {
				if src[k] != w {
					t.Errorf("-%s comes from %q, want %q", k, src[k], w)
				}
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("the password is printed:\n%s", out)
			}
		})
	}
}

// Statistics go to a statsd over TCP by default, as in
// envoyproxy/ratelimit; to a DogStatsD over UDP under USE_DOG_STATSD; to
// Prometheus under USE_PROMETHEUS; nowhere under DISABLE_STATS.
func TestEnvoyEnvStatsd(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  []string
		want map[string]string
	}{
		{"default", []string{"RUNTIME_ROOT", "/x"},
			map[string]string{"statsd": "localhost:8125", "statsd-dog": "false", "statsd-flush": "10s", "metrics": `""`, "near-limit-ratio": "0.8"}},
		{"statsd's place, tags, flush and ratio", []string{"STATSD_HOST", "stats.svc", "STATSD_PORT", "9125", "EXTRA_TAGS", "env:prod,zone:a",
			"STATS_FLUSH_INTERVAL", "1s", "NEAR_LIMIT_RATIO", "0.5"},
			map[string]string{"statsd": "stats.svc:9125", "statsd-tags": "env:prod,zone:a", "statsd-flush": "1s", "near-limit-ratio": "0.5"}},
		{"DogStatsD", []string{"USE_STATSD", "false", "USE_DOG_STATSD", "true"},
			map[string]string{"statsd": "localhost:8125", "statsd-dog": "true"}},
		{"Prometheus", []string{"USE_STATSD", "false", "USE_PROMETHEUS", "true"},
			map[string]string{"statsd": `""`, "metrics": ":9090"}},
		{"DISABLE_STATS wins", []string{"USE_PROMETHEUS", "true", "USE_DOG_STATSD", "true", "DISABLE_STATS", "true"},
			map[string]string{"statsd": `""`, "metrics": `""`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, _, out := printed(t, tt.env)
			for k, w := range tt.want {
				if v[k] != w {
					t.Errorf("-%s = %q, want %q\n%s", k, v[k], w, out)
				}
			}
		})
	}
	// sluice's own mode sends none.
	if v, _, _ := printed(t, nil); v["statsd"] != `""` {
		t.Errorf("without envoyproxy/ratelimit's variables: -statsd %q, want none", v["statsd"])
	}
}

// HOST, PORT and the log's variables are common in environments that
// have nothing to do with envoyproxy/ratelimit: alone, they do not turn
// envoy mode on; -envoy-env does.
func TestEnvoyModeTrigger(t *testing.T) {
	v, _, out := printed(t, []string{"PORT", "9000", "HOST", "example", "LOG_LEVEL", "debug"})
	if v["http"] != ":8080" || v["log-level"] != "info" || !strings.Contains(out, "are not read") {
		t.Errorf("generic variables alone turned envoy mode on:\n%s", out)
	}
	v, _, out = printed(t, []string{"PORT", "9000"}, "-envoy-env")
	if v["http"] != "0.0.0.0:9000" || !strings.Contains(out, "envoy mode (-envoy-env=true)") {
		t.Errorf("-envoy-env:\n%s", out)
	}
}

// Variables sluice does not implement are named; those it cannot do
// without (another backend, xDS), and values it cannot read, are errors.
func TestEnvoyEnvNotesAndErrors(t *testing.T) {
	_, _, out := printed(t, []string{"LOCAL_CACHE_SIZE_IN_BYTES", "1000000",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "GRPC_CLIENT_TLS_CACERT", "/ca"})
	for _, want := range []string{"LOCAL_CACHE_SIZE_IN_BYTES=1000000: ignored",
		"GRPC_CLIENT_TLS_CACERT=/ca: ignored: GRPC_SERVER_USE_TLS is not true"} {
		if !strings.Contains(out, want) {
			t.Errorf("print-config does not say %q:\n%s", want, out)
		}
	}
	// REDIS_PERSECOND=true: a second Redis, by its own variables, with
	// the main one's TLS files
	v, src, _ := printed(t, []string{"REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "r2:6379",
		"REDIS_PERSECOND_AUTH", "u:p", "REDIS_PERSECOND_TLS", "true", "REDIS_TLS_CACERT", "/ca.pem", "REDIS_PERSECOND_POOL_SIZE", "7"})
	for flag, want := range map[string]string{"redis-persecond": "redis://r2:6379", "redis-persecond-username": "u", "redis-persecond-password": "p",
		"redis-persecond-tls": "true", "redis-persecond-tls-ca": "/ca.pem", "redis-persecond-pool-size": "7", "redis-tls-ca": "/ca.pem"} {
		if v[flag] != want {
			t.Errorf("REDIS_PERSECOND_*: -%s %q, want %q", flag, v[flag], want)
		}
	}
	if !strings.Contains(src["redis-persecond"], "REDIS_PERSECOND") {
		t.Errorf("-redis-persecond's source %q does not name REDIS_PERSECOND", src["redis-persecond"])
	}
	v, _, _ = printed(t, []string{"REDIS_PERSECOND_URL", "r2:6379"})
	if v["redis-persecond"] != `""` {
		t.Errorf("REDIS_PERSECOND unset: -redis-persecond %q, want none", v["redis-persecond"])
	}
	// REDIS_TIMEOUT and REDIS_PERSECOND_TIMEOUT only when set: unset,
	// the store keeps its own deadline, not envoyproxy/ratelimit's 10s.
	v, src, _ = printed(t, []string{"REDIS_PERSECOND", "true", "REDIS_TIMEOUT", "10s", "REDIS_PERSECOND_TIMEOUT", "250ms"})
	if v["redis-timeout"] != "10s" || v["redis-persecond-timeout"] != "250ms" || !strings.Contains(src["redis-persecond-timeout"], "REDIS_PERSECOND_TIMEOUT") {
		t.Errorf("REDIS_TIMEOUT=10s, REDIS_PERSECOND_TIMEOUT=250ms: -redis-timeout %q, -redis-persecond-timeout %q (from %q)", v["redis-timeout"], v["redis-persecond-timeout"], src["redis-persecond-timeout"])
	}
	if v, src, _ := printed(t, []string{"REDIS_PERSECOND", "true"}); v["redis-timeout"] != "50ms" || v["redis-persecond-timeout"] != "50ms" || strings.Contains(src["redis-timeout"], "REDIS_TIMEOUT") {
		t.Errorf("REDIS_TIMEOUT unset: -redis-timeout %q (from %q), -redis-persecond-timeout %q; want the store's own", v["redis-timeout"], src["redis-timeout"], v["redis-persecond-timeout"])
	}
	if v, _, _ := printed(t, []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"}); v["charge-per-descriptor"] != "false" {
		t.Errorf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: -charge-per-descriptor %q, want false (all or nothing)", v["charge-per-descriptor"])
	}
	badMapper := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badMapper, []byte("mappings: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"BACKEND_TYPE", "memcache"}, `BACKEND_TYPE="memcache": only redis is implemented`},
		{[]string{"CONFIG_TYPE", "GRPC"}, `CONFIG_TYPE="GRPC": want FILE or GRPC_XDS_SOTW`},
		{[]string{"REDIS_TYPE", "ring"}, `REDIS_TYPE="RING": want single, sentinel or cluster`},
		{[]string{"REDIS_TYPE", "sentinel", "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "mymaster"}, "wants the master's name and the sentinels"},
		{[]string{"REDIS_TYPE", "cluster", "REDIS_URL", "n1:1"}, "REDIS_TYPE=cluster: set REDIS_SOCKET_TYPE=tcp"},
		{[]string{"PORT", "http", "RUNTIME_ROOT", "/x"}, `PORT="http": want a whole number`},
		{[]string{"SHADOW_MODE", "yes"}, `SHADOW_MODE="yes": want true or false`},
		{[]string{"GRPC_MAX_CONNECTION_AGE", "1 day"}, `GRPC_MAX_CONNECTION_AGE="1 day": want a duration`},
		{[]string{"REDIS_TIMEOUT", "-1s"}, `REDIS_TIMEOUT="-1s": want a duration above 0 and at most 1m0s`},
		{[]string{"REDIS_TIMEOUT", "0"}, `REDIS_TIMEOUT="0": want a duration above 0`},
		{[]string{"REDIS_TIMEOUT", "soon"}, `REDIS_TIMEOUT="soon": want a duration`},
		{[]string{"REDIS_TIMEOUT", "2562047h"}, `REDIS_TIMEOUT="2562047h": want a duration above 0 and at most 1m0s`},
		{[]string{"REDIS_PERSECOND", "true", "REDIS_PERSECOND_TIMEOUT", "1h"}, `REDIS_PERSECOND_TIMEOUT="1h": want a duration`},
		{[]string{"LOG_LEVEL", "loud", "RUNTIME_ROOT", "/x"}, `LOG_LEVEL="loud"`},
		{[]string{"GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/tls.crt"}, "GRPC_SERVER_USE_TLS=true: set GRPC_SERVER_TLS_KEY too"},
		{[]string{"USE_PROMETHEUS", "true"}, "USE_STATSD=true, USE_DOG_STATSD=false, USE_PROMETHEUS=true: set one of them true, not 2"},
		{[]string{"USE_DOG_STATSD", "true"}, "USE_STATSD=true, USE_DOG_STATSD=true"},
		{[]string{"USE_STATSD", "false", "EXTRA_TAGS", "x", "USE_DOG_STATSD", "true"}, `-statsd-tags: "x": want name:value pairs`},
		{[]string{"NEAR_LIMIT_RATIO", "2"}, "-near-limit-ratio 2: want a number in (0, 1]"},
		{[]string{"USE_STATSD", "false", "USE_PROMETHEUS", "true", "PROMETHEUS_MAPPER_YAML", "/nonexistent/m.yaml"}, "PROMETHEUS_MAPPER_YAML: -envoy-metrics-mapper: open /nonexistent/m.yaml"},
		{[]string{"USE_STATSD", "false", "USE_PROMETHEUS", "true", "PROMETHEUS_MAPPER_YAML", badMapper}, "PROMETHEUS_MAPPER_YAML: -envoy-metrics-mapper " + badMapper + ": statsd_exporter mapping: yaml"},
		{dogMogrifier("(", "x", ""), `DOG_STATSD_MOGRIFIER_TAG_PATTERN="(" (mogrifier tag of USE_DOG_STATSD_MOGRIFIERS): PATTERN "(": error parsing regexp`},
		{dogMogrifier("", "x", ""), `DOG_STATSD_MOGRIFIER_TAG_PATTERN="" (mogrifier tag of USE_DOG_STATSD_MOGRIFIERS): no PATTERN`},
		{dogMogrifier("a", "", ""), "DOG_STATSD_MOGRIFIER_TAG_NAME is not set or empty"},
		{dogMogrifier("a", "x|y", ""), `DOG_STATSD_MOGRIFIER_TAG_NAME="x|y": a statistic's name cannot hold "|"`},
		{dogMogrifier("a", "x", "domain"), `DOG_STATSD_MOGRIFIER_TAG_TAGS="domain": tag "domain": want name:value`},
		{dogMogrifier("a", "x", "domain:"), `DOG_STATSD_MOGRIFIER_TAG_TAGS="domain:"`},
		{[]string{"USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "a,,b"}, `USE_DOG_STATSD_MOGRIFIERS="a,,b": an empty name`},
	} {
		withEnv(t, tt.env...)
		code, _, stderr := runArgs(t, "serve", "-print-config")
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("env %v: exit %d, stderr %q; want 2 saying %q", tt.env, code, stderr, tt.want)
		}
	}
}

// Every variable sluice knows is in the table of docs/envoy-environment.md,
// which the README links to, with the flags it sets or what sluice does
// instead.
func TestREADMEEnvTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/envoy-environment.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, v := range envoyVars {
		row := "| `" + v.name + "` |"
		i := strings.Index(readme, row)
		if i < 0 {
			t.Errorf("docs/envoy-environment.md has no row %q", row)
			continue
		}
		line := readme[i:]
		line = line[:strings.IndexByte(line, '\n')]
		for _, f := range strings.Split(v.flags, ", ") {
			if f != "" && !strings.Contains(line, "`-"+f) { // the table writes --flag
				t.Errorf("docs/envoy-environment.md's row for %s does not name %s: %s", v.name, f, line)
			}
		}
	}
	if len(envoyVarNames()) != len(envoyVars) {
		t.Fatal("envoyVarNames")
	}
}

// dogMogrifier is an environment with DogStatsD and one mogrifier, tag,
// of these pattern, name and tags.
func dogMogrifier(pattern, name, tags string) []string {
	return []string{"USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "tag",
		"DOG_STATSD_MOGRIFIER_TAG_PATTERN", pattern, "DOG_STATSD_MOGRIFIER_TAG_NAME", name, "DOG_STATSD_MOGRIFIER_TAG_TAGS", tags}
}

// USE_DOG_STATSD_MOGRIFIERS: each mogrifier it names (upper-cased, as
// envoyproxy/ratelimit reads them) becomes a -statsd-mogrifier, in order;
// without USE_DOG_STATSD they are not read, as there.
func TestEnvoyEnvMogrifiers(t *testing.T) {
	env := append(dogMogrifier(`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$2"),
		"USE_DOG_STATSD_MOGRIFIERS", "rpc,tag",
		"DOG_STATSD_MOGRIFIER_RPC_PATTERN", `^ratelimit_server\.(.*)\.(.*)$`, "DOG_STATSD_MOGRIFIER_RPC_NAME", "rpc.$2")
	_, src, out := printed(t, env)
	want := strconv.Quote(`^ratelimit_server\.(.*)\.(.*)$|rpc.$2|`) + " " +
		strconv.Quote(`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$|ratelimit.service.rate_limit.$3|domain:$1,descriptor:$2`)
	if !strings.Contains(out, "-statsd-mogrifier  "+want) && !strings.Contains(out, " "+want+" ") {
		t.Errorf("print-config does not show -statsd-mogrifier %s:\n%s", want, out)
	}
	if !strings.Contains(src["statsd-mogrifier"], "DOG_STATSD_MOGRIFIER_TAG_PATTERN") {
		t.Errorf("-statsd-mogrifier's source %q does not name the last mogrifier's variables", src["statsd-mogrifier"])
	}
	// Plain statsd: the mogrifiers are not read, bad ones included.
	if v, _, _ := printed(t, []string{"USE_DOG_STATSD_MOGRIFIERS", "tag", "DOG_STATSD_MOGRIFIER_TAG_PATTERN", "("}); v["statsd-mogrifier"] != `""` {
		t.Errorf("USE_DOG_STATSD unset: -statsd-mogrifier %q, want none", v["statsd-mogrifier"])
	}
	// On the command line: PATTERN|NAME|TAGS, the pattern free to hold "|".
	v, _, _ := printed(t, nil, "-statsd", "localhost:8125", "-statsd-dog", "-statsd-mogrifier", `^(a|b)\.x$|$1|`)
	if want := strconv.Quote(`^(a|b)\.x$|$1|`); v["statsd-mogrifier"] != want {
		t.Errorf("-statsd-mogrifier: %s, want %s", v["statsd-mogrifier"], want)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-statsd", "localhost:8125", "-statsd-mogrifier", "a|b|"}, "-statsd-mogrifier needs -statsd-dog"},
		{[]string{"-statsd-mogrifier", "a|b|"}, "-statsd-mogrifier needs -statsd and -statsd-dog"},
		{[]string{"-statsd", "localhost:8125", "-statsd-dog", "-statsd-mogrifier", "a|b"}, "want PATTERN|NAME|TAGS"},
		{[]string{"-statsd", "localhost:8125", "-statsd-dog", "-statsd-mogrifier", "(|b|"}, "error parsing regexp"},
		{[]string{"-envoy-metrics-mapper", "/m.yaml"}, "-envoy-metrics-mapper needs -envoy-metrics"},
	} {
		withEnv(t)
		code, _, stderr := runArgs(t, append([]string{"serve", "-print-config"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 saying %q", tt.args, code, stderr, tt.want)
		}
	}
}

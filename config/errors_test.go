package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// Each file in testdata/ holds one mistake; loading it must fail with the
// message below, which names the file, the line and the field.
var badConfigs = []struct {
	file string
	want string
}{
	{"misspelled_key.yaml", `misspelled_key.yaml:5: descriptors[0]: unknown key "ratelimit" (did you mean "rate_limit"?)`},
	{"misspelled_key2.yaml", `misspelled_key2.yaml:6: descriptors[0].rate_limit: unknown key "requestsperunit" (did you mean "requests_per_unit"?)`},
	{"misplaced_key.yaml", `misplaced_key.yaml:4: descriptors[0]: key "unit" does not belong here (it goes in rate_limit)`},
	{"unknown_key.yaml", `unknown_key.yaml:2: unknown key "colour" (want one of domain, descriptors, shadow_mode, failure, forward_auth, rlqs)`},
	{"duplicate_key.yaml", `duplicate_key.yaml:7: descriptors[0].rate_limit.unit: duplicate key: already set at line 5`},
	{"duplicate_descriptor.yaml", `duplicate_descriptor.yaml:6: descriptors[1]: duplicate descriptor key "key1" value "value1": already defined at line 3`},
	{"empty_domain.yaml", `empty_domain.yaml:1: domain: must not be empty`},
	{"missing_domain.yaml", `missing_domain.yaml:1: domain: missing`},
	{"empty_file.yaml", `empty_file.yaml: domain: missing: the file is empty`},
	{"empty_key.yaml", `empty_key.yaml:3: descriptors[0].key: must not be empty`},
	{"missing_key.yaml", `missing_key.yaml:3: descriptors[0].key: missing`},
	{"bad_unit.yaml", `bad_unit.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year`},
	{"negative_requests.yaml", `negative_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: -5 must not be negative`},
	{"non_numeric_requests.yaml", `non_numeric_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: want a whole number, got "ten"`},
	{"quoted_requests.yaml", `quoted_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: want a whole number, got "10"`},
	{"fractional_requests.yaml", `fractional_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: want a whole number, got "2.5"`},
	{"huge_requests.yaml", `huge_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: 99999999999999999999 is out of range`},
	{"missing_requests_per_unit.yaml", `missing_requests_per_unit.yaml:5: descriptors[0].rate_limit.requests_per_unit: missing`},
	{"missing_unit.yaml", `missing_unit.yaml:5: descriptors[0].rate_limit: missing unit or period`},
	{"unit_and_period.yaml", `unit_and_period.yaml:6: descriptors[0].rate_limit.period: give unit or period, not both`},
	{"bad_period.yaml", `bad_period.yaml:5: descriptors[0].rate_limit.period: "30 seconds": want a positive duration`},
	{"zero_period.yaml", `zero_period.yaml:5: descriptors[0].rate_limit.period: "0s": want a positive duration`},
	{"zero_unit_multiplier.yaml", `zero_unit_multiplier.yaml:7: descriptors[0].rate_limit.unit_multiplier: 0: must be at least 1`},
	{"bad_algorithm.yaml", `bad_algorithm.yaml:5: descriptors[0].rate_limit.algorithm: sluice: unknown algorithm "token-bucket"`},
	{"burst_without_bucket.yaml", `burst_without_bucket.yaml:7: descriptors[0].rate_limit.burst: the fixed_window algorithm has no burst`},
	{"negative_burst.yaml", `negative_burst.yaml:8: descriptors[0].rate_limit.burst: -1 must not be negative`},
	{"limit_too_large.yaml", `limit_too_large.yaml:5: descriptors[0].rate_limit: rule "test-domain.key1": sluice: limit too large`},
	{"bucket_too_large.yaml", `bucket_too_large.yaml:5: descriptors[0].rate_limit: rule "test-domain.key1": sluice: limit too large: a bucket of 4611686018427387903/8760h0m0s cannot be kept exactly: its refill takes more than 2^62 ticks of 1/rate of a time unit at every unit up to 1s; the nearest limit that fits is 4611686018403168000/8760h0m0s`},
	{"bad_failure.yaml", `bad_failure.yaml:7: descriptors[0].rate_limit.failure: unknown failure mode "ignore" (want open, closed or local)`},
	{"bad_charge.yaml", `bad_charge.yaml:7: descriptors[0].rate_limit.charge: unknown charge "tokens" (want gate or usage)`},
	{"unlimited_with_charge.yaml", `unlimited_with_charge.yaml:6: descriptors[0].rate_limit.charge: an unlimited limit takes no charge`},
	{"unlimited_with_unit.yaml", `unlimited_with_unit.yaml:6: descriptors[0].rate_limit.unit: an unlimited limit takes no unit`},
	{"unlimited_not_alone.yaml", `unlimited_not_alone.yaml:7: descriptors[0].rate_limits[1]: an unlimited limit must be the descriptor's only one`},
	{"lease_bad_renew.yaml", `lease_bad_renew.yaml:8: descriptors[0].rate_limit.lease.renew: "soon": want a positive duration such as 100ms or 2s`},
	{"lease_zero_ttl.yaml", `lease_zero_ttl.yaml:8: descriptors[0].rate_limit.lease.ttl: "0s": want a positive duration`},
	{"lease_unknown_key.yaml", `lease_unknown_key.yaml:8: descriptors[0].rate_limit.lease: unknown key "expiry" (want one of renew, ttl)`},
	{"lease_not_mapping.yaml", `lease_not_mapping.yaml:7: descriptors[0].rate_limit.lease: want a mapping of keys to values, got "true"`},
	{"unlimited_with_lease.yaml", `unlimited_with_lease.yaml:6: descriptors[0].rate_limit.lease: an unlimited limit takes no lease`},
	// Rule.Validate refuses these; the error is at the lease, which is
	// what to change.
	{"lease_sliding_log.yaml", `lease_sliding_log.yaml:8: descriptors[0].rate_limit.lease: sluice: rule "test-domain.key1": lease: algorithm sliding_log cannot be leased`},
	{"lease_sliding_counter.yaml", `lease_sliding_counter.yaml:8: descriptors[0].rate_limit.lease: sluice: rule "test-domain.key1": lease: algorithm sliding_counter cannot be leased`},
	{"lease_usage.yaml", `lease_usage.yaml:8: descriptors[0].rate_limit.lease: sluice: rule "test-domain.key1": lease: a rule charged by usage cannot be leased`},
	{"lease_ttl_below_renew.yaml", `lease_ttl_below_renew.yaml:8: descriptors[0].rate_limit.lease: sluice: rule "test-domain.key1": lease: ttl 200ms must not be shorter than renew 500ms`},
	{"rate_limit_and_rate_limits.yaml", `rate_limit_and_rate_limits.yaml:8: descriptors[0].rate_limits: give rate_limit or rate_limits, not both`},
	{"duplicate_limit_name.yaml", `duplicate_limit_name.yaml:8: descriptors[0].rate_limits[1]: two limits of one descriptor are both named "per_key" (the first at line 5)`},
	{"bad_name.yaml", `bad_name.yaml:5: descriptors[0].rate_limit.name: "per{key}": a name cannot hold`},
	{"replaces_empty.yaml", `replaces_empty.yaml:8: descriptors[0].rate_limit.replaces[0].name: missing`},
	{"replaces_self.yaml", `replaces_self.yaml:9: descriptors[0].rate_limit.replaces[0].name: "self": a limit cannot replace itself`},
	{"wildcard_key.yaml", `wildcard_key.yaml:3: descriptors[0].key: "header_*": a key cannot be a wildcard`},
	{"share_threshold_without_wildcard.yaml", `share_threshold_without_wildcard.yaml:5: descriptors[0].share_threshold: only a wildcard value (one holding *) can share its limit`},
	{"value_to_metric_secret.yaml", `value_to_metric_secret.yaml:5: descriptors[0].value_to_metric: a secret value never goes into a metric`},
	{"metadata_not_mapping.yaml", `metadata_not_mapping.yaml:7: descriptors[0].metadata: want a mapping of keys to values, got a list`},
	{"metadata_infinite.yaml", `metadata_infinite.yaml:9: descriptors[0].metadata.limits.weight: .inf: metadata numbers must be finite`},
	{"non_map_list.yaml", `non_map_list.yaml:3: descriptors[0]: want a mapping of keys to values, got "a"`},
	{"non_string_key.yaml", `non_string_key.yaml:4: descriptors[0]: keys must be plain names, got a list`},
	{"bad_bool.yaml", `bad_bool.yaml:4: descriptors[0].shadow_mode: want true or false, got "sometimes"`},
	{"bad_yaml.yaml", `bad_yaml.yaml:2: did not find expected '-' indicator`},
	{"two_documents.yaml", `two_documents.yaml:2: a file holds one YAML document, one domain`},
	{"deep_descriptors_error.yaml", `deep_descriptors_error.yaml:9: descriptors[0].descriptors[0].descriptors[0].rate_limit.unit: unknown unit "weekly"`},
	{"alias_bomb.yaml", `alias_bomb.yaml:5: descriptors[4]: the file is too complex: its aliases expand to too many nodes`},
	{"alias_cycle.yaml", `alias_cycle.yaml:3: descriptors: nested deeper than 64 levels`},
	{"rlqs_duplicate_bucket_key.yaml", `rlqs_duplicate_bucket_key.yaml:8: rlqs.bucket_keys[1]: "name" is listed twice (first at line 7)`},
	{"rlqs_unknown_key.yaml", `rlqs_unknown_key.yaml:6: rlqs: unknown key "bucket_key" (did you mean "bucket_keys"?)`},
	{"forward_auth_bad_from.yaml", `forward_auth_bad_from.yaml:11: forward_auth.descriptors[0].entries[0].from: unknown source "remote_addr" (want client_ip, method, path, host, header:NAME or query:NAME)`},
	{"forward_auth_bad_header.yaml", `forward_auth_bad_header.yaml:6: forward_auth.descriptors[0].entries[0].from: "header:X API Key": want header:NAME with a valid name`},
	{"forward_auth_bad_status.yaml", `forward_auth_bad_status.yaml:3: forward_auth.deny_status: 503: want 429, or 403 for nginx auth_request`},
	{"forward_auth_from_and_value.yaml", `forward_auth_from_and_value.yaml:7: forward_auth.descriptors[0].entries[0].value: give from or value, not both`},
	{"forward_auth_matches_nothing.yaml", `forward_auth_matches_nothing.yaml:18: forward_auth.descriptors[1]: (remote_addr) can reach no limit of domain "test-domain"`},
	{"forward_auth_matches_nothing.yaml", `forward_auth_matches_nothing.yaml:24: forward_auth.descriptors[3]: (tier=free) can reach no limit of domain "test-domain"`},
	{"forward_auth_quota_mode.yaml", `forward_auth_quota_mode.yaml:3: descriptors[0].quota_mode: domain "web" is served by forward auth (forward_auth at testdata/forward_auth_quota_mode.yaml:15), where quota mode would let a client leave its limits`},
	{"forward_auth_quota_mode.yaml", `forward_auth_quota_mode.yaml:8: descriptors[1].quota_mode: domain "web" is served by forward auth`},
	{"forward_auth_bad_path_match.yaml", `forward_auth_bad_path_match.yaml:11: forward_auth.descriptors[0].entries[0].path_match: unknown path_match "ignore_case" (want exact, the default, or case_insensitive)`},
	{"forward_auth_path_match_not_path.yaml", `forward_auth_path_match_not_path.yaml:11: forward_auth.descriptors[0].entries[0].path_match: only an entry from: path has a path_match`},
	{"forward_auth_upper_case_path.yaml", `forward_auth_upper_case_path.yaml:6: descriptors[1].value: "/Admin/*" holds upper-case letters, which a path matched with path_match: case_insensitive (forward_auth at testdata/forward_auth_upper_case_path.yaml:12) never has: write it in lower case`},
	{"forward_auth_no_proxy.yaml", `forward_auth_no_proxy.yaml:6: forward_auth.proxy: missing: name the proxy that calls /v1/auth, nginx, traefik or envoy`},
	{"forward_auth_bad_proxy.yaml", `forward_auth_bad_proxy.yaml:6: forward_auth.proxy: unknown proxy "haproxy" (want nginx, traefik or envoy)`},
	{"forward_auth_no_descriptors.yaml", `forward_auth_no_descriptors.yaml:3: forward_auth.descriptors: missing`},
}

func TestBadConfigs(t *testing.T) {
	for _, tt := range badConfigs {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			c, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = %v, nil; want an error", path, c.Domains())
			}
			if c != nil {
				t.Errorf("Load(%s) returned a Config with its error", path)
			}
			want := filepath.Join("testdata", tt.want)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Load(%s) error:\n%v\nwant it to contain:\n%s", path, err, want)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != path {
				t.Errorf("Load(%s) error %v: want an *Error for the file", path, err)
			}
		})
	}
}

// TestEveryFixtureIsChecked keeps the table and testdata/ in step.
func TestEveryFixtureIsChecked(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, tt := range badConfigs {
		listed[tt.file] = true
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s has no entry in badConfigs", f)
		}
	}
}

func TestErrorsWrapSentinels(t *testing.T) {
	for _, tt := range []struct {
		file string
		want error
	}{
		{"bad_algorithm.yaml", sluice.ErrUnknownAlgo},
		{"limit_too_large.yaml", sluice.ErrLimitTooLarge},
		{"bucket_too_large.yaml", sluice.ErrLimitTooLarge},
	} {
		_, err := Load(filepath.Join("testdata", tt.file))
		if !errors.Is(err, tt.want) {
			t.Errorf("Load(%s) = %v, want an error wrapping %v", tt.file, err, tt.want)
		}
	}
}

func TestManyProblemsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for range 100 {
		b.WriteString("  - kye: x\n")
	}
	_, err := Parse("many.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("Parse of 100 bad descriptors succeeded")
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != maxErrors+1 {
		t.Errorf("Parse reported %d problems, want %d and a note that it stopped:\n%v", n, maxErrors+1, err)
	}
	if !strings.Contains(err.Error(), `many.yaml:3: descriptors[0]: unknown key "kye" (did you mean "key"?)`) ||
		!strings.Contains(err.Error(), "too many problems") {
		t.Errorf("Parse error does not say it stopped:\n%v", err)
	}
}

// TestOrdinaryRatesLoad: prime rates over a day, a week and a year load
// on every algorithm, the buckets deciding at a coarser resolution where
// a nanosecond's would not fit.
func TestOrdinaryRatesLoad(t *testing.T) {
	for _, algo := range []string{"token_bucket", "leaky_bucket", "gcra", "fixed_window", "sliding_counter", "sliding_log"} {
		for _, rate := range []struct{ unit, n string }{{"day", "99991"}, {"day", "30011"}, {"week", "7"}, {"year", "1000003"}} {
			src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: " + algo + "\n      unit: " + rate.unit + "\n      requests_per_unit: " + rate.n + "\n"
			if _, err := Parse("rates.yaml", []byte(src)); err != nil {
				t.Errorf("%s %s/%s: %v", algo, rate.n, rate.unit, err)
			}
		}
	}
}

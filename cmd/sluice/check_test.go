package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(good, []byte(serveYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, "check", good)
	if code != exitOK || stdout != "ok: 1 domain, 1 rule\n  shop\n" || stderr != "" {
		t.Errorf("sluice check %s: exit %d, stdout %q, stderr %q", good, code, stdout, stderr)
	}
	code, stdout, _ = runArgs(t, "check", "../../examples/config", "../../examples/nginx/sluice.yaml")
	if code != exitOK || !strings.Contains(stdout, "nginx  forward_auth: nginx, deny 403;") {
		t.Errorf("sluice check on the examples: exit %d, stdout %q", code, stdout)
	}
}

// A glob names whatever is in the folder: files that are not YAML are
// skipped, each with a note, and the rest is checked as usual.
func TestCheckSkipsNonYAML(t *testing.T) {
	matches, err := filepath.Glob("../../examples/config/*")
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, append([]string{"check"}, matches...)...)
	readme := filepath.Join("../../examples/config", "README.md")
	if code != exitOK || !strings.HasPrefix(stdout, "ok: 4 domains") || stderr != "sluice check: skipped "+readme+": not a YAML file (*.yaml, *.yml)\n" {
		t.Errorf("sluice check examples/config/*: exit %d, stdout %q, stderr %q; want 0, the four domains, README.md skipped", code, stdout, stderr)
	}

	dir := t.TempDir()
	for name, text := range map[string]string{"notes.txt": "not a config", "shop.YML": serveYAML} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr = runArgs(t, "check", filepath.Join(dir, "notes.txt"), filepath.Join(dir, "shop.YML"))
	if code != exitOK || stdout != "ok: 1 domain, 1 rule\n  shop\n" || !strings.Contains(stderr, "skipped "+filepath.Join(dir, "notes.txt")) {
		t.Errorf("sluice check notes.txt shop.YML: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// Nothing left to check is a command line that checks nothing.
	code, stdout, stderr = runArgs(t, "check", filepath.Join(dir, "notes.txt"))
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "skipped") || !strings.Contains(stderr, "nothing to check") {
		t.Errorf("sluice check notes.txt: exit %d, stdout %q, stderr %q; want 2 and nothing to check", code, stdout, stderr)
	}
}

func TestCheckErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	text := "domain: shop\ndescriptors:\n  - key: user\n    ratelimit:\n      unit: minute\n  - key: ip\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 2\n"
	if err := os.WriteFile(bad, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, "check", bad)
	want := bad + `:4: descriptors[0]: unknown key "ratelimit" (did you mean "rate_limit"?)` + "\n" +
		bad + `:8: descriptors[1].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year, or a period such as 30s)` + "\n"
	if code != exitFail || stdout != "" || stderr != want {
		t.Errorf("sluice check %s: exit %d, stdout %q, stderr\n%s\nwant exit 1 and\n%s", bad, code, stdout, stderr, want)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "no config given"},
		{[]string{filepath.Join(dir, "missing.yaml")}, exitFail, "no such file"},
		{[]string{"-x", bad}, exitUsage, "flag provided but not defined: -x"},
		{[]string{"-store", "etcd", bad}, exitUsage, `-store "etcd": want memory or redis`},
	} {
		code, _, stderr := runArgs(t, append([]string{"check"}, tt.args...)...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("sluice check %v: exit %d, stderr %q; want %d saying %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

// -store redis checks the rules against the Redis store's exact range, as
// sluice serve -redis does, without a Redis.
func TestCheckStoreRedis(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daily.yaml")
	// One a year with bursts of 2^30: the memory store holds it in whole
	// seconds; the Redis store's doubles hold no unit of it.
	text := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      name: daily\n      algorithm: gcra\n      unit: year\n      requests_per_unit: 1\n      burst: 1073741824\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runArgs(t, "check", path); code != exitOK {
		t.Errorf("sluice check %s: exit %d, stderr %q; want 0 (the memory store holds it)", path, code, stderr)
	}
	code, stdout, stderr := runArgs(t, "check", "-store", "redis", path)
	if code != exitFail || stdout != "" || !strings.HasPrefix(stderr, path+":5: descriptors[0].rate_limit: ") || !strings.Contains(stderr, "exact range") {
		t.Errorf("sluice check -store redis %s: exit %d, stdout %q, stderr %q; want 1 at line 5, the limit", path, code, stdout, stderr)
	}
	if code, _, stderr := runArgs(t, "check", "-store", "redis", "../../examples/config"); code != exitOK {
		t.Errorf("sluice check -store redis on the examples: exit %d, stderr %q", code, stderr)
	}
}

func TestServeCheckHelpGolden(t *testing.T) {
	for _, name := range []string{"serve", "check"} {
		code, stdout, stderr := runArgs(t, "help", name)
		if code != exitOK || stderr != "" {
			t.Fatalf("sluice help %s: exit %d, stderr %q", name, code, stderr)
		}
		path := filepath.Join("testdata", "help_"+name+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if stdout != string(want) {
			t.Errorf("sluice help %s differs from %s (go test -update rewrites it):\n%s", name, path, stdout)
		}
		if _, out, _ := runArgs(t, name, "-h"); out != stdout {
			t.Errorf("sluice %s -h differs from sluice help %s", name, name)
		}
	}
}

// sluice check names each domain's limits charged by usage, and a charge
// it does not know is an error at its line.
func TestCheckCharge(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "llm.yaml")
	text := "domain: llm\ndescriptors:\n  - key: api_key\n    rate_limits:\n" +
		"      - {name: tokens, unit: hour, requests_per_unit: 100000, charge: usage}\n" +
		"      - {name: requests, unit: minute, requests_per_unit: 60}\n"
	if err := os.WriteFile(good, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, "check", good)
	if code != exitOK || stdout != "ok: 1 domain, 2 rules\n  llm  usage: tokens\n" || stderr != "" {
		t.Errorf("sluice check %s: exit %d, stdout %q, stderr %q", good, code, stdout, stderr)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(text, "charge: usage", "charge: tokens", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runArgs(t, "check", bad)
	want := bad + `:5: descriptors[0].rate_limits[0].charge: unknown charge "tokens" (want gate or usage)` + "\n"
	if code != exitFail || stdout != "" || stderr != want {
		t.Errorf("sluice check %s: exit %d, stdout %q, stderr %q; want 1 and %q", bad, code, stdout, stderr, want)
	}
}

// sluice check names each domain's leased limits, and refuses a lease on
// an algorithm that cannot be leased, or on a usage limit, at the lease.
func TestCheckLease(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "api.yaml")
	text := "domain: api\ndescriptors:\n  - key: user\n    rate_limits:\n" +
		"      - {name: per_second, algorithm: token_bucket, unit: second, requests_per_unit: 100, lease: {}}\n" +
		"      - {name: per_minute, unit: minute, requests_per_unit: 1000, lease: {renew: 1s, ttl: 3s}}\n" +
		"      - {name: per_day, unit: day, requests_per_unit: 10000}\n"
	if err := os.WriteFile(good, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, "check", good)
	if code != exitOK || stdout != "ok: 1 domain, 3 rules\n  api  leased: per_second, per_minute\n" || stderr != "" {
		t.Errorf("sluice check %s: exit %d, stdout %q, stderr %q", good, code, stdout, stderr)
	}
	for _, bad := range []struct{ from, to string }{
		{"algorithm: token_bucket", "algorithm: sliding_log"},
		{"algorithm: token_bucket", "algorithm: sliding_counter"},
		{"requests_per_unit: 100,", "requests_per_unit: 100, charge: usage,"},
	} {
		path := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(path, []byte(strings.Replace(text, bad.from, bad.to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runArgs(t, "check", path)
		want := path + `:5: descriptors[0].rate_limits[0].lease: sluice: rule "per_second": lease: `
		if code != exitFail || stdout != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("sluice check with %s: exit %d, stdout %q, stderr %q; want 1 and %q...", bad.to, code, stdout, stderr, want)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// splitDomain writes domain shop in two files of one directory.
func splitDomain(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"a.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
		"b.yaml": "domain: shop\ndescriptors:\n  - key: team\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata: {owner: platform}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// -merge-domains loads a domain split across files, as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG; without it, serve and check
// refuse the second definition.
func TestMergeDomainsFlag(t *testing.T) {
	dir := splitDomain(t)
	code, _, stderr := runServeOwnPorts(t, "-config", dir)
	if code != exitFail || !strings.Contains(stderr, `"shop" is already defined in`) {
		t.Errorf("serve without -merge-domains: exit %d, stderr %q; want 1 and the domain defined twice", code, stderr)
	}
	if code, stdout, stderr := runArgs(t, "check", "-merge-domains", dir); code != exitOK || stdout != "ok: 1 domain, 2 rules\n  shop\n" {
		t.Errorf("check -merge-domains: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, _ := runArgs(t, "check", dir); code != exitFail {
		t.Errorf("check without -merge-domains: exit %d, want 1", code)
	}

	s := startServe(t, "-config", dir, "-merge-domains", "-dynamic-metadata", "-quota-mode")
	if code, body := s.postJSON(t, "shop", "user", "u"); code != 200 || !strings.Contains(body, `"requestsPerUnit":2`) {
		t.Errorf("user, from a.yaml: %d %s, want 200 under its limit", code, body)
	}
	if code, body := s.postJSON(t, "shop", "team", "t"); code != 200 || !strings.Contains(body, `"owner":"platform"`) {
		t.Errorf("team, from b.yaml: %d %s, want 200 with its metadata (-dynamic-metadata)", code, body)
	}
	// -quota-mode: one descriptor, over its limit, is all the request's
	// quota: denied.
	if code, body := s.postJSON(t, "shop", "team", "t"); code != 429 {
		t.Errorf("team again: %d %s, want 429", code, body)
	}
}

// -charge-per-descriptor charges a descriptor within its limit beside one
// over (envoyproxy/ratelimit's default), and -refuse-limit-overrides
// refuses a request's limit override.
func TestChargeAndOverrideFlags(t *testing.T) {
	path := writeConfig(t, "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: team\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	post := func(s *serving, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.addr("http")+"/json", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const both = `{"domain":"shop","descriptors":[{"entries":[{"key":"team","value":"t"}]},{"entries":[{"key":"user","value":"u"}]}]}`
	const override = `{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"v"}],"limit":{"requests_per_unit":1,"unit":"MINUTE"}}]}`
	for _, tt := range []struct {
		flags    []string
		userCode int // user=u alone, after two requests of both, the second over
		ovCode   int // a request with an override
	}{
		{nil, 200, 200},
		{[]string{"-charge-per-descriptor", "-refuse-limit-overrides"}, 429, 400},
	} {
		s := startServe(t, append([]string{"-config", path}, tt.flags...)...)
		post(s, both)
		if code, body := post(s, both); code != 429 {
			t.Errorf("%v: both again: %d %s, want 429, team over", tt.flags, code, body)
		}
		if code, body := s.postJSON(t, "shop", "user", "u"); code != tt.userCode {
			t.Errorf("%v: user alone: %d %s, want %d", tt.flags, code, body, tt.userCode)
		}
		if code, body := post(s, override); code != tt.ovCode {
			t.Errorf("%v: an override: %d %s, want %d", tt.flags, code, body, tt.ovCode)
		}
	}
}

// Quota mode for every descriptor, by flag or by envoyproxy/ratelimit's
// QUOTA_MODE, refuses to start on a domain served by forward auth (the
// built-in policy's), naming it and where its section is written.
func TestQuotaModeRefusesForwardAuth(t *testing.T) {
	// A serve that starts is a failure, ended after a minute.
	runArgs := func(t *testing.T, args ...string) (int, string, string) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		return run(ctx, args, testEnv, &out, &errb), out.String(), errb.String()
	}
	code, _, stderr := runArgs(t, "serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "", "-quota-mode")
	if code != exitFail || !strings.Contains(stderr, `forward_auth: domain "sluice" is served by forward auth`) {
		t.Errorf("serve -quota-mode with the built-in policy: exit %d, stderr %q; want 1 and domain sluice refused", code, stderr)
	}
	path := filepath.Join(t.TempDir(), "web.yaml")
	web := "domain: web\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n" +
		"forward_auth:\n  proxy: traefik\n  descriptors:\n    - entries:\n        - {key: remote_address, from: client_ip}\n"
	if err := os.WriteFile(path, []byte(web), 0o644); err != nil {
		t.Fatal(err)
	}
	withEnv(t, "QUOTA_MODE", "true", "USE_STATSD", "false")
	code, _, stderr = runArgs(t, "serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "", "-redis", "", "-config", path)
	if code != exitFail || !strings.Contains(stderr, path+`:6: forward_auth: domain "web"`) {
		t.Errorf("serve with QUOTA_MODE=true and a forward_auth domain: exit %d, stderr %q; want 1 and domain web refused at %s:6", code, stderr, path)
	}
}

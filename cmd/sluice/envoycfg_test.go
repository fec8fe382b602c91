package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	code, _, stderr := runArgs(t, "serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-config", dir)
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

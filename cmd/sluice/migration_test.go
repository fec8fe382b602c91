package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The migration guide's promise: its two manifests differ in the image
// alone, the config they mount loads, and their environment gives sluice
// serve the settings the guide says.
func TestMigrationGuide(t *testing.T) {
	b, err := os.ReadFile("../../docs/migrating-from-envoy-ratelimit.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && line == "```yaml":
			in, cur = true, nil
		case in && line == "```":
			in = false
			blocks = append(blocks, cur)
		case in:
			cur = append(cur, line)
		}
	}
	if len(blocks) != 2 {
		t.Fatalf("the guide has %d yaml blocks, want the two manifests", len(blocks))
	}
	envoy, sluice := blocks[0], blocks[1]
	if len(envoy) != len(sluice) {
		t.Fatalf("the manifests have %d and %d lines", len(envoy), len(sluice))
	}
	var diff []string
	for i := range envoy {
		if envoy[i] != sluice[i] {
			diff = append(diff, envoy[i]+" -> "+sluice[i])
		}
	}
	if len(diff) != 1 || !strings.Contains(diff[0], "image: envoyproxy/ratelimit") || !strings.Contains(diff[0], "image: registry.example.com/sluice") {
		t.Errorf("the manifests differ in %q, want the image alone", diff)
	}

	// The environment, and the ConfigMap's config.yaml.
	var env []string
	var cfg []string
	inCfg := false
	for i, line := range envoy {
		trim := strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(trim, "- name: "); ok && i+1 < len(envoy) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(envoy[i+1]), "value: "); ok {
				env = append(env, name, strings.Trim(v, `"`))
			}
		}
		switch {
		case trim == "config.yaml: |":
			inCfg = true
		case inCfg && strings.HasPrefix(line, "    "):
			cfg = append(cfg, strings.TrimPrefix(line, "    "))
		case inCfg:
			inCfg = false
		}
	}
	if len(env) < 10 || len(cfg) < 5 {
		t.Fatalf("read %d variables and %d config lines from the first manifest", len(env)/2, len(cfg))
	}
	v, src, out := printed(t, env)
	for k, w := range map[string]string{
		"config":           "/data/ratelimit/config",
		"redis":            "redis://redis.ratelimit.svc:6379",
		"http":             "0.0.0.0:8080",
		"grpc":             "0.0.0.0:8081",
		"admin":            "0.0.0.0:6070",
		"response-headers": "envoy",
		"log-level":        "info",
	} {
		if v[k] != w {
			t.Errorf("-%s = %q, want %q\n%s", k, v[k], w, out)
		}
	}
	if src["config"] != "env RUNTIME_ROOT, RUNTIME_SUBDIRECTORY; envoy default RUNTIME_APPDIRECTORY" {
		t.Errorf("-config from %q", src["config"])
	}
	dir := filepath.Join(t.TempDir(), "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(strings.Join(cfg, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runArgs(t, "check", dir); code != exitOK {
		t.Errorf("the guide's config does not load: %s%s", stdout, stderr)
	}
}

package server

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// New's error is a *SettingsError for a setting it cannot use, and never
// for a config that does not load, so that a caller can tell the two
// apart.
func TestNewErrorTypes(t *testing.T) {
	bad := []Settings{
		{},
		{DrainDelay: -time.Second},
		{MaxHitsAddend: MaxCost + 1},
		{GRPCMaxStreams: -1},
		{RLQS: RLQS{MaxStreamsPerPeer: -1}},
		{RLQS: RLQS{MaxBucketsPerPeer: MaxGRPCStreams + 1}},
		{RLQS: RLQS{AbandonAfter: -time.Second}},
		{ResponseHeaders: HeadersNone + 1},
		{GRPCTLS: &TLS{CertFile: "missing.crt", KeyFile: "missing.key"}},
	}
	for i, cfg := range bad {
		if i > 0 {
			cfg.Store = newStore(t)
		}
		_, err := New(cfg)
		var se *SettingsError
		if !errors.As(err, &se) {
			t.Errorf("New(%+v) = %v, want a *SettingsError", cfg, err)
		}
	}

	dir := t.TempDir()
	for _, tt := range []struct {
		name  string
		paths []string
	}{
		{"a field unknown", []string{writeFile(t, dir, "bad.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n")}},
		{"no such file", []string{filepath.Join(dir, "missing.yaml")}},
	} {
		_, err := New(Settings{Paths: tt.paths, Store: newStore(t)})
		var se *SettingsError
		if err == nil || errors.As(err, &se) {
			t.Errorf("New with %s = %v, want an error that is not a *SettingsError", tt.name, err)
		}
		var ce *config.Error
		if tt.name == "a field unknown" && !errors.As(err, &ce) {
			t.Errorf("New with %s = %v, want a *config.Error", tt.name, err)
		}
	}
}

package server

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/server/console"
)

// leaseYAML leases per_user; per_ip is exact.
const leaseYAML = `domain: test
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 100
      lease: {}
  - key: ip
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 3
`

// leaseServer serves leaseYAML, from a file it returns, with a memory
// authority.
func leaseServer(t *testing.T, cfg Settings) (*Server, *lease.MemoryAuthority, string) {
	t.Helper()
	a := lease.NewMemoryAuthority()
	path := writeFile(t, t.TempDir(), "test.yaml", leaseYAML)
	cfg.Paths, cfg.Authority = []string{path}, a
	s, _ := newServer(t, cfg)
	return s, a, path
}

// heldKeys lists the keys of the server's leases, "rule key".
func heldKeys(s *Server) []string {
	var out []string
	for _, h := range s.consoleLeases().Held() {
		out = append(out, h.Rule+" "+h.Key)
	}
	return out
}

// With an authority, a leased rule is decided on a lease, which the
// server holds, and a rule without one exactly, as before.
func TestLeaseDecides(t *testing.T) {
	s, _, _ := leaseServer(t, Settings{})
	for i := range 5 {
		if code := jsonPost(t, s, "test", "user", "alice"); code != 200 {
			t.Fatalf("leased per_user, request %d: %d, want 200", i+1, code)
		}
	}
	if got, want := heldKeys(s), []string{"per_user test|user=alice"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("leases held: %q, want %q", got, want)
	}
	for i, want := range []int{200, 200, 200, 429} {
		if code := jsonPost(t, s, "test", "ip", "198.51.100.7"); code != want {
			t.Errorf("exact per_ip, request %d: %d, want %d", i+1, code, want)
		}
	}
	if got := heldKeys(s); len(got) != 1 {
		t.Errorf("leases held after the exact rule's requests: %q, want only per_user's", got)
	}
}

// A reload keeps the leases of the rules it leaves as they were: the
// key's lease is still held, and the next request is decided on it, not
// on a second one.
func TestLeaseReloadKeeps(t *testing.T) {
	s, a, path := leaseServer(t, Settings{})
	if code := jsonPost(t, s, "test", "user", "alice"); code != 200 {
		t.Fatalf("per_user: %d, want 200", code)
	}
	before := s.consoleLeases().Held()
	writeFile(t, filepath.Dir(path), "test.yaml", strings.Replace(leaseYAML, "requests_per_unit: 3", "requests_per_unit: 4", 1))
	if err := s.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	after := s.consoleLeases().Held()
	if len(before) != 1 || len(after) != 1 || after[0].Rule != before[0].Rule || after[0].Key != before[0].Key {
		t.Fatalf("leases before the reload %+v, after %+v: want the same", before, after)
	}
	if code := jsonPost(t, s, "test", "user", "alice"); code != 200 {
		t.Fatalf("per_user after the reload: %d, want 200", code)
	}
	if got := heldKeys(s); len(got) != 1 {
		t.Errorf("leases after the reload and a request: %q, want the one kept", got)
	}
	hs, err := s.consoleLeases().Holdings(t.Context(), after[0])
	if err != nil || len(hs) != 1 || hs[0].Holder != s.leaseHolder() {
		t.Errorf("the authority's holders of the key: %+v, %v; want this server alone", hs, err)
	}
	_ = a
}

// When Serve returns, the server has given its leases back: the
// authority holds none for the key.
func TestLeaseReleasedAtShutdown(t *testing.T) {
	s, _, _ := leaseServer(t, Settings{})
	e := serve(t, s, nil)
	e.waitReady(t)
	if code := jsonPost(t, s, "test", "user", "alice"); code != 200 {
		t.Fatalf("per_user: %d, want 200", code)
	}
	held := s.consoleLeases().Held()
	if len(held) != 1 {
		t.Fatalf("leases held: %+v, want one", held)
	}
	e.stop(t)
	hs, err := s.consoleLeases().Holdings(t.Context(), held[0])
	if err != nil || len(hs) != 0 {
		t.Errorf("after Serve returned, the authority's holders of the key: %+v, %v; want none", hs, err)
	}
}

// Without an authority, a leased rule is decided exactly, and the server
// says so in its log; the console reports no leasing.
func TestLeaseWithoutAuthority(t *testing.T) {
	var log logBuffer
	path := writeFile(t, t.TempDir(), "test.yaml", strings.Replace(leaseYAML, "requests_per_unit: 100", "requests_per_unit: 2", 1))
	s, _ := newServer(t, Settings{Paths: []string{path}, Logger: log.logger()})
	for i, want := range []int{200, 200, 429} {
		if code := jsonPost(t, s, "test", "user", "alice"); code != want {
			t.Errorf("per_user, request %d: %d, want %d (exact)", i+1, code, want)
		}
	}
	if !strings.Contains(log.String(), "leased limits decided exactly") || !strings.Contains(log.String(), "per_user") {
		t.Errorf("the log does not say per_user is decided exactly:\n%s", log.String())
	}
	var r console.LeasesReport
	if code, _, body := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/v1/leases", "", &r); code != 200 || r.Leasing || len(r.Keys) != 0 {
		t.Errorf("GET /v1/leases: %d %s, want no leasing", code, body)
	}
}

// GET /v1/leases shows this process's leases with the key's holders at
// the authority, the keys as a digest unless the key lookup is on.
func TestLeaseConsole(t *testing.T) {
	s, a, _ := leaseServer(t, Settings{})
	for range 3 {
		if code := jsonPost(t, s, "test", "user", "alice"); code != 200 {
			t.Fatalf("per_user: %d, want 200", code)
		}
	}
	const key = "test|user=alice"
	for _, lookup := range []bool{false, true} {
		var r console.LeasesReport
		code, _, body := adminDo(t, s.AdminHandler(AdminOptions{Lookup: lookup}), "GET", "/v1/leases", "", &r)
		if code != 200 || !r.Leasing || r.Holder != s.leaseHolder() || r.Held != 1 || len(r.Keys) != 1 || r.KeysShown != lookup {
			t.Fatalf("lookup %v: GET /v1/leases: %d %s", lookup, code, body)
		}
		k := r.Keys[0]
		want := config.SecretLabel(key)
		if lookup {
			want = key
		}
		if k.Rule != "per_user" || k.Key != want || k.Error != "" {
			t.Errorf("lookup %v: lease %+v, want per_user's of %q", lookup, k, want)
		}
		if len(k.Holders) != 1 || !k.Holders[0].Self || k.Holders[0].Holder != s.leaseHolder() || k.Holders[0].Share <= 0 {
			t.Errorf("lookup %v: holders %+v, want this process with a share", lookup, k.Holders)
		}
		if strings.Contains(body, "alice") != lookup {
			t.Errorf("lookup %v: the answer names the key: %s", lookup, body)
		}
	}
	_ = a
}

// Under ChargePerDescriptor every limit is charged as envoyproxy/ratelimit
// counts, but a leased one, which stays a gate. GET /v1/policy gives a
// leased limit's times, the defaults filled in.
func TestLeaseChargePerDescriptor(t *testing.T) {
	s, _, _ := leaseServer(t, Settings{ChargePerDescriptor: true})
	var p policyReport
	if code, _, body := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/v1/policy", "", &p); code != 200 {
		t.Fatalf("GET /v1/policy: %d %s", code, body)
	}
	want := map[string]string{"per_user": sluice.ChargeGate.String(), "per_ip": sluice.ChargeCount.String()}
	for _, l := range p.Domains[0].Limits {
		if l.Charge != want[l.Name] {
			t.Errorf("limit %s: charge %q, want %q", l.Name, l.Charge, want[l.Name])
		}
		if wantLease := map[string]string{"per_user": "renew 6s, ttl 18s"}[l.Name]; l.Lease != wantLease {
			t.Errorf("limit %s: lease %q, want %q", l.Name, l.Lease, wantLease)
		}
	}
}

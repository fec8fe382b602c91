package config

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// charge: on a limit sets its rule's Charge: gate (the default) or usage.
func TestCharge(t *testing.T) {
	c := mustParse(t, `
domain: llm
descriptors:
  - key: api_key
    rate_limits:
      - {name: tokens, unit: hour, requests_per_unit: 100000, charge: usage}
      - {name: requests, unit: minute, requests_per_unit: 60, charge: gate}
      - {name: bursts, algorithm: token_bucket, unit: second, requests_per_unit: 5}
`)
	want := map[string]sluice.Charge{"tokens": sluice.ChargeUsage, "requests": sluice.ChargeGate, "bursts": sluice.ChargeGate}
	ms, err := c.Match("llm", []Entry{{"api_key", "k"}})
	if err != nil || len(ms) != 3 {
		t.Fatalf("Match = %v, %v; want three limits", ms, err)
	}
	for _, m := range ms {
		if got, ok := want[m.Name]; !ok || m.Rule.Charge != got {
			t.Errorf("limit %q: Charge %v, want %v", m.Name, m.Rule.Charge, got)
		}
	}
}

// A reload that changes only a limit's charge makes a new rule, which
// decides with the new charge; the store keeps the key's counts, as the
// charge is not part of the state's identity.
func TestChargeReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "llm.yaml")
	const yaml = "domain: llm\ndescriptors:\n  - key: api_key\n    rate_limit: {name: tokens, unit: hour, requests_per_unit: 100%s}\n"
	writeFile(t, path, fmt.Sprintf(yaml, ""))
	old, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, fmt.Sprintf(yaml, ", charge: usage"))
	c, err := old.Reload(path)
	if err != nil {
		t.Fatal(err)
	}
	o, n := old.Rules()[0], c.Rules()[0]
	if o == n || n.Charge != sluice.ChargeUsage || o.Charge != sluice.ChargeGate {
		t.Errorf("after the reload: rule %+v (was %+v), want a new rule charged by usage", n, o)
	}
	po, err := o.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	pn, err := n.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if was, ns := algo.Of(po), algo.Of(pn); was.Ident != ns.Ident {
		t.Errorf("the reloaded rule's state is %v, was %v: want the same, so that counts survive", ns.Key, was.Key)
	}
}

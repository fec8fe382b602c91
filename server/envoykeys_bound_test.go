package server

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server/internal/decide"
)

// Under EnvoyKeys a key holds a request's values raw: a short value must
// not spell the digest a long key is cut to (decide.BoundKey), or one
// client's requests would count against another's limit.
func TestEnvoyKeysBoundNoPose(t *testing.T) {
	const yaml = `domain: test
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	cfg, err := config.Options{EnvoyKeys: true}.Parse(config.Document{Name: "t.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	// A long value whose cut key ends as the envoy key of a short value
	// would: its digest ends in '_' and holds no other.
	var victim, attacker string
	for i := 0; i < 100_000 && victim == ""; i++ {
		v := "a|" + strings.Repeat("x", 600) + strings.Repeat("y", i)
		ms, err := cfg.Match("test", []config.Entry{{Key: "path", Value: v}})
		if err != nil || len(ms) != 1 {
			t.Fatalf("Match: %v, %v", ms, err)
		}
		dom, d, _ := strings.Cut(decide.BoundKey(ms[0].Key), "|%#")
		if strings.HasSuffix(d, "_") && !strings.Contains(d[:len(d)-1], "_") && strings.HasSuffix(dom, "_path_a") {
			victim, attacker = v, "a|%#"+d[:len(d)-1]
		}
	}
	if victim == "" {
		t.Fatal("no long value found whose cut key a short one could spell")
	}
	e := start(t, Settings{Paths: []string{writeFile(t, t.TempDir(), "t.yaml", yaml)}, EnvoyKeys: true})
	if _, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 5, "path="+attacker)); err != nil {
		t.Fatal(err)
	}
	resp, err := e.rls.ShouldRateLimit(t.Context(), rlReq("test", 1, "path="+victim))
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetStatuses()[0]; resp.GetOverallCode().String() != "OK" || st.GetLimitRemaining() != 4 {
		t.Errorf("the long value's first request after 5 of the short one's: %v, remaining %d; want OK, 4",
			resp.GetOverallCode(), st.GetLimitRemaining())
	}
}

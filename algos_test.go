package sluice

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/algo"
)

// Every algorithm of the registry is whole: a name of its own, a summary,
// a single-key limiter, and a state that says what its Bucket says.
func TestRegistry(t *testing.T) {
	ids, names := map[Algo]bool{}, map[string]bool{}
	for _, a := range AlgoInfos() {
		if a.ID == "" || a.Name == "" || a.Summary == "" || ids[a.ID] || names[a.Name] {
			t.Errorf("%+v: want an ID, a name and a summary, and an ID and a name no other algorithm has", a)
		}
		ids[a.ID], names[a.Name] = true, true
		if got, err := ParseAlgo(string(a.ID)); got != a.ID || err != nil {
			t.Errorf("ParseAlgo(%q) = %q, %v", a.ID, got, err)
		}
		if lim, err := a.ID.New(PerSecond(5)); lim == nil || err != nil {
			t.Errorf("%s.New(5/s) = %v, %v", a.ID, lim, err)
		}
		if lim, err := a.ID.New(Limit{Rate: 5}); lim != nil || err == nil {
			t.Errorf("%s.New with no period = %v, %v; want a nil Algorithm and an error", a.ID, lim, err)
		}
		p, err := Rule{Name: "r", Algorithm: a.ID, Limit: Limit{Rate: 5, Period: 1e9, Burst: 8}}.Prepare()
		if err != nil {
			t.Fatalf("%s: %v", a.ID, err)
		}
		k := algo.Of(p).Kind
		if bucket := k == algo.KindBucket || k == algo.KindWide; bucket != a.Bucket {
			t.Errorf("%s: state of kind %d, Bucket %v", a.ID, k, a.Bucket)
		}
		if want := map[bool]int64{true: 8, false: 5}[a.Bucket]; p.Quota() != want {
			t.Errorf("%s: Quota of 5/s, burst 8 = %d, want %d", a.ID, p.Quota(), want)
		}
	}
	if len(ids) != len(Algos()) {
		t.Errorf("Algos has %d, AlgoInfos %d", len(Algos()), len(ids))
	}
	for _, s := range []string{"", "token bucket", "Token_Bucket", "leaky_queue"} {
		if info, ok := Algo(s).Info(); ok {
			t.Errorf("Algo(%q).Info() = %+v, true; want false", s, info)
		}
		if _, err := ParseAlgo(s); !errors.Is(err, ErrUnknownAlgo) {
			t.Errorf("ParseAlgo(%q): %v, want ErrUnknownAlgo", s, err)
		}
		if lim, err := Algo(s).New(PerSecond(1)); lim != nil || !errors.Is(err, ErrUnknownAlgo) {
			t.Errorf("Algo(%q).New = %v, %v; want ErrUnknownAlgo", s, lim, err)
		}
	}
}

// The registry reads as JSON its exported fields, for a console to list.
func TestAlgoInfoJSON(t *testing.T) {
	b, err := json.Marshal(AlgoInfos()[0])
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got["id"] != "token_bucket" || got["name"] != "token bucket" || got["bucket"] != true || got["summary"] == "" {
		t.Errorf("AlgoInfos()[0] as JSON = %s", b)
	}
}

// StateBytes counts a sliding log's cells, and a few words for the others.
func TestStateBytes(t *testing.T) {
	for _, a := range AlgoInfos() {
		got := a.StateBytes(PerSecond(1000))
		if (a.ID == AlgoSlidingLog) != (got >= 1000*logCellBytes) {
			t.Errorf("%s: StateBytes(1000/s) = %d", a.ID, got)
		}
	}
}

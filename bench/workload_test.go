package bench

import (
	"sync/atomic"
	"testing"
)

// TestWorkloads holds the explicit-time workloads to what BENCHMARKS.md says
// of them: in traffic=allowed every contender allows everything, in
// traffic=denied each allows about 1% (1000/s offered 100000/s; the first
// 1000 ride on the full burst). A benchmark comparing contenders that made
// different decisions would compare different work.
func TestWorkloads(t *testing.T) {
	const steps = 1_000_000 // 2000s of traffic=allowed, 10s of traffic=denied
	want := map[string][2]float64{
		"allowed": {1, 1},
		"denied":  {0.0095, 0.0115},
	}
	for _, tr := range traffics {
		for _, c := range explicitContenders {
			if c.name == "baseline" {
				continue
			}
			allow, err := c.mk(limit)
			if err != nil {
				t.Fatal(err)
			}
			seq := newTimeSeq(tr.step, new(atomic.Int64))
			n := 0
			for range steps {
				if allow(seq.next()) {
					n++
				}
			}
			got, w := float64(n)/steps, want[tr.name]
			if got < w[0] || got > w[1] {
				t.Errorf("traffic=%s alg=%s: allowed %d of %d (%.4f), want a fraction in [%v, %v]", tr.name, c.name, n, steps, got, w[0], w[1])
			}
		}
	}
}

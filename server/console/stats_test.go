package console

import "testing"

// The ring keeps at most statsSeconds seconds, and at most statsMaxCells
// cells, the oldest going first.
func TestStatsRingBounded(t *testing.T) {
	var r statsRing
	for i := range statsSeconds + 10 {
		r.push(second{at: int64(i), cells: make([]cell, 1000)})
	}
	if r.cells > statsMaxCells || r.n > statsSeconds {
		t.Errorf("%d seconds and %d cells held, want at most %d and %d", r.n, r.cells, statsSeconds, statsMaxCells)
	}
	if newest := r.secs[(r.head+r.n-1)%statsSeconds].at; newest != statsSeconds+9 {
		t.Errorf("newest second %d, want %d", newest, statsSeconds+9)
	}
	// A second sampled twice is one second.
	n := r.n
	r.push(second{at: statsSeconds + 9, decisions: 1})
	if r.n != n {
		t.Errorf("a repeated second added a second: %d, want %d", r.n, n)
	}
}

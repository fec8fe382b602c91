package redis

import (
	"reflect"
	"testing"
)

// Counters names every count of Stats, by its field's name, so that a
// count added to Stats cannot be left out of what the console shows.
func TestCountersNameEveryCount(t *testing.T) {
	var st Stats
	v := reflect.ValueOf(&st).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Int64 {
			f.SetInt(int64(i + 1))
		}
	}
	st.Breaker = "half-open"
	counts, breaker := st.counters()
	if breaker != st.Breaker {
		t.Errorf("breaker = %q, want %q", breaker, st.Breaker)
	}
	n := 0
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Int64 {
			continue
		}
		n++
		if got, ok := counts[f.Name]; !ok || got != int64(i+1) {
			t.Errorf("counts[%q] = %d, %v; want %d", f.Name, got, ok, i+1)
		}
	}
	if len(counts) != n {
		t.Errorf("counts holds %d names, want %d: %v", len(counts), n, counts)
	}
}

package ring

import (
	"slices"
	"testing"
)

func collect[T any](b *Buffer[T]) []T { return slices.Collect(b.All()) }

func TestPushOverwritesOldest(t *testing.T) {
	b := New[int](3)
	for i, tt := range []struct {
		push           int
		all            []int
		oldest, newest int
	}{
		{1, []int{1}, 1, 1},
		{2, []int{1, 2}, 1, 2},
		{3, []int{1, 2, 3}, 1, 3},
		{4, []int{2, 3, 4}, 2, 4}, // full: 1 is overwritten
		{5, []int{3, 4, 5}, 3, 5},
		{6, []int{4, 5, 6}, 4, 6},
		{7, []int{5, 6, 7}, 5, 7}, // round the array more than once
	} {
		b.Push(tt.push)
		if got := collect(b); !slices.Equal(got, tt.all) {
			t.Errorf("after Push #%d: All() = %v, want %v", i+1, got, tt.all)
		}
		if v, ok := b.PeekOldest(); !ok || v != tt.oldest {
			t.Errorf("after Push #%d: PeekOldest() = %v, %v; want %v, true", i+1, v, ok, tt.oldest)
		}
		if v, ok := b.PeekNewest(); !ok || v != tt.newest {
			t.Errorf("after Push #%d: PeekNewest() = %v, %v; want %v, true", i+1, v, ok, tt.newest)
		}
		if b.Len() != len(tt.all) || b.Cap() != 3 {
			t.Errorf("after Push #%d: Len() = %d, Cap() = %d; want %d, 3", i+1, b.Len(), b.Cap(), len(tt.all))
		}
	}
}

func TestPopOldestFirst(t *testing.T) {
	b := New[string](4)
	for _, s := range []string{"a", "b", "c", "d", "e", "f"} {
		b.Push(s)
	}
	for _, want := range []string{"c", "d", "e", "f"} {
		if v, ok := b.Pop(); !ok || v != want {
			t.Fatalf("Pop() = %q, %v; want %q, true", v, ok, want)
		}
	}
	if v, ok := b.Pop(); ok || v != "" {
		t.Errorf("Pop() on empty = %q, %v; want \"\", false", v, ok)
	}
	// Interleaved pushes and pops, the head and tail chasing round.
	for i := range 10 {
		b.Push(string(rune('a' + i)))
		b.Push(string(rune('A' + i)))
		if v, _ := b.Pop(); v != string(rune('a'+i)) {
			t.Fatalf("round %d: Pop() = %q, want %q", i, v, string(rune('a'+i)))
		}
		if v, _ := b.Pop(); v != string(rune('A'+i)) {
			t.Fatalf("round %d: Pop() = %q, want %q", i, v, string(rune('A'+i)))
		}
		if b.Len() != 0 {
			t.Fatalf("round %d: Len() = %d, want 0", i, b.Len())
		}
	}
}

func TestEmpty(t *testing.T) {
	for _, b := range []*Buffer[int]{New[int](3), New[int](0), New[int](-5), {}} {
		if v, ok := b.Pop(); ok || v != 0 {
			t.Errorf("cap %d: Pop() = %v, %v; want 0, false", b.Cap(), v, ok)
		}
		if v, ok := b.PeekOldest(); ok || v != 0 {
			t.Errorf("cap %d: PeekOldest() = %v, %v; want 0, false", b.Cap(), v, ok)
		}
		if v, ok := b.PeekNewest(); ok || v != 0 {
			t.Errorf("cap %d: PeekNewest() = %v, %v; want 0, false", b.Cap(), v, ok)
		}
		if got := collect(b); len(got) != 0 {
			t.Errorf("cap %d: All() = %v, want nothing", b.Cap(), got)
		}
		if b.Len() != 0 {
			t.Errorf("cap %d: Len() = %d, want 0", b.Cap(), b.Len())
		}
	}
}

// TestZeroCapacity: a buffer of capacity 0 (or a negative one, taken as 0,
// or the zero value) holds nothing and never panics.
func TestZeroCapacity(t *testing.T) {
	for _, b := range []*Buffer[int]{New[int](0), New[int](-1), {}} {
		b.Push(1)
		b.Push(2)
		if b.Len() != 0 || b.Cap() != 0 {
			t.Errorf("Len() = %d, Cap() = %d after Push; want 0, 0", b.Len(), b.Cap())
		}
		if _, ok := b.Pop(); ok {
			t.Error("Pop() = ok, want nothing to pop")
		}
	}
}

func TestCapacityOne(t *testing.T) {
	b := New[int](1)
	b.Push(1)
	b.Push(2)
	if got := collect(b); !slices.Equal(got, []int{2}) {
		t.Errorf("All() = %v, want [2]", got)
	}
	if o, _ := b.PeekOldest(); o != 2 {
		t.Errorf("PeekOldest() = %d, want 2", o)
	}
	if n, _ := b.PeekNewest(); n != 2 {
		t.Errorf("PeekNewest() = %d, want 2", n)
	}
}

// TestAllStopsEarly: All's sequence honours a break.
func TestAllStopsEarly(t *testing.T) {
	b := New[int](5)
	for i := range 8 {
		b.Push(i)
	}
	var got []int
	for v := range b.All() {
		if v == 5 {
			break
		}
		got = append(got, v)
	}
	if !slices.Equal(got, []int{3, 4}) {
		t.Errorf("All() up to 5 = %v, want [3 4]", got)
	}
}

// TestPopReleasesReferences: a popped cell no longer points at its value.
func TestPopReleasesReferences(t *testing.T) {
	b := New[*int](2)
	b.Push(new(int))
	b.Pop()
	if b.data[0] != nil {
		t.Error("Pop left its pointer in the array")
	}
}

// TestAgainstSlice: random pushes and pops agree with a plain slice that
// keeps the last Cap elements.
func TestAgainstSlice(t *testing.T) {
	for _, capacity := range []int{1, 2, 3, 7, 16} {
		b := New[int](capacity)
		var want []int
		x := uint32(capacity)
		for i := range 1000 {
			x = x*1664525 + 1013904223 // a fixed LCG: reproducible
			if x>>30 == 0 {
				v, ok := b.Pop()
				if len(want) == 0 {
					if ok {
						t.Fatalf("cap %d, op %d: Pop() = %d on empty", capacity, i, v)
					}
					continue
				}
				if !ok || v != want[0] {
					t.Fatalf("cap %d, op %d: Pop() = %d, %v; want %d", capacity, i, v, ok, want[0])
				}
				want = want[1:]
				continue
			}
			b.Push(i)
			want = append(want, i)
			if len(want) > capacity {
				want = want[1:]
			}
			if got := collect(b); !slices.Equal(got, want) {
				t.Fatalf("cap %d, op %d: All() = %v, want %v", capacity, i, got, want)
			}
		}
	}
}

// TestNoAllocs: Push, Pop and the Peeks never allocate.
func TestNoAllocs(t *testing.T) {
	type entry struct{ at, n int64 }
	b := New[entry](8)
	var sink entry
	allocs := testing.AllocsPerRun(1000, func() {
		for i := range 10 {
			b.Push(entry{int64(i), 1})
		}
		v, _ := b.PeekOldest()
		w, _ := b.PeekNewest()
		x, _ := b.Pop()
		y, _ := b.Pop()
		sink = entry{v.at + w.at + x.at + y.at, int64(b.Len() + b.Cap())}
	})
	if allocs != 0 {
		t.Errorf("Push/Pop/Peek allocated %v times per run, want 0", allocs)
	}
	_ = sink
}

func TestSetNewest(t *testing.T) {
	b := New[int](2)
	if b.SetNewest(9) || b.Len() != 0 {
		t.Fatalf("SetNewest on an empty buffer = true or Len %d, want false and 0", b.Len())
	}
	b.Push(1)
	b.Push(2)
	b.Push(3) // overwrites 1; the newest is at index 0
	if !b.SetNewest(7) {
		t.Fatal("SetNewest on a full buffer = false")
	}
	if got := collect(b); len(got) != 2 || got[0] != 2 || got[1] != 7 {
		t.Errorf("after SetNewest(7): %v, want [2 7]", got)
	}
	if v, _ := b.PeekNewest(); v != 7 {
		t.Errorf("PeekNewest() = %d, want 7", v)
	}
}

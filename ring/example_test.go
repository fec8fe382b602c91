package ring_test

import (
	"fmt"

	"github.com/sluicehq/sluice/ring"
)

// A ring buffer keeps the last Cap elements: when it is full, Push
// overwrites the oldest.
func Example() {
	b := ring.New[int](3)
	for i := 1; i <= 5; i++ {
		b.Push(i)
	}
	for v := range b.All() {
		fmt.Println(v)
	}

	oldest, _ := b.Pop()
	newest, _ := b.PeekNewest()
	fmt.Println("popped", oldest, "newest", newest, "len", b.Len(), "cap", b.Cap())
	// Output:
	// 3
	// 4
	// 5
	// popped 3 newest 5 len 2 cap 3
}

func ExampleNew() {
	b := ring.New[string](2)
	_, ok := b.PeekOldest()
	fmt.Println("empty:", !ok)
	b.Push("a")
	b.Push("b")
	b.Push("c")
	v, _ := b.PeekOldest()
	fmt.Println("oldest:", v)
	// Output:
	// empty: true
	// oldest: b
}

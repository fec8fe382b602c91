// Package ring is a fixed-capacity ring buffer: an array allocated once and
// two indexes that chase each other round it. When it is full, Push
// overwrites the oldest element, which is exactly what a sliding window
// needs: old timestamps leave by themselves.
//
// Push, Pop and the Peeks are O(1) and never allocate. A Buffer is not safe
// for concurrent use; its owner locks.
package ring

import "iter"

// Buffer holds up to Cap elements of T, oldest first. The zero value is a
// buffer of capacity 0, which holds nothing.
type Buffer[T any] struct {
	data  []T
	head  int // index of the oldest element
	tail  int // index the next Push writes
	count int // tells empty from full when head == tail
}

// New returns an empty buffer that holds up to capacity elements. A
// negative capacity is taken as 0.
func New[T any](capacity int) *Buffer[T] {
	return &Buffer[T]{data: make([]T, max(capacity, 0))}
}

// Push appends v as the newest element. When the buffer is full it
// overwrites the oldest one. On a buffer of capacity 0 it does nothing.
func (b *Buffer[T]) Push(v T) {
	if len(b.data) == 0 {
		return
	}
	b.data[b.tail] = v
	b.tail = b.next(b.tail)
	if b.count == len(b.data) {
		b.head = b.next(b.head)
	} else {
		b.count++
	}
}

// Pop removes and returns the oldest element; ok is false when empty.
func (b *Buffer[T]) Pop() (v T, ok bool) {
	if b.count == 0 {
		return v, false
	}
	v = b.data[b.head]
	var zero T
	b.data[b.head] = zero // let the garbage collector have what it pointed to
	b.head = b.next(b.head)
	b.count--
	return v, true
}

// PeekOldest returns the oldest element without removing it.
func (b *Buffer[T]) PeekOldest() (v T, ok bool) {
	if b.count == 0 {
		return v, false
	}
	return b.data[b.head], true
}

// PeekNewest returns the newest element without removing it.
func (b *Buffer[T]) PeekNewest() (v T, ok bool) {
	if b.count == 0 {
		return v, false
	}
	i := b.tail - 1
	if i < 0 {
		i = len(b.data) - 1
	}
	return b.data[i], true
}

// SetNewest replaces the newest element with v; ok is false, and nothing
// changes, when the buffer is empty.
func (b *Buffer[T]) SetNewest(v T) (ok bool) {
	if b.count == 0 {
		return false
	}
	i := b.tail - 1
	if i < 0 {
		i = len(b.data) - 1
	}
	b.data[i] = v
	return true
}

// Len is the number of elements held.
func (b *Buffer[T]) Len() int { return b.count }

// Cap is the most elements the buffer holds.
func (b *Buffer[T]) Cap() int { return len(b.data) }

// All yields the elements oldest first. The buffer must not change while
// the sequence is being read.
func (b *Buffer[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for i, j := 0, b.head; i < b.count; i++ {
			if !yield(b.data[j]) {
				return
			}
			j = b.next(j)
		}
	}
}

func (b *Buffer[T]) next(i int) int {
	i++
	if i == len(b.data) {
		return 0
	}
	return i
}

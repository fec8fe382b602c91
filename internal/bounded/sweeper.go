package bounded

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Sweeper is a structure's lifecycle: the background goroutine that drops
// idle keys, and the closed flag that Close sets after stopping it. The
// zero Sweeper is open and runs no goroutine.
type Sweeper struct {
	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// Start runs sweep every d in a goroutine of its own until Close; d = 0
// runs none. It is called once, before the structure is shared.
func (s *Sweeper) Start(d time.Duration, sweep func()) {
	if d <= 0 {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				sweep()
			}
		}
	}()
}

// Closed reports whether Close has been called.
func (s *Sweeper) Closed() bool { return s.closed.Load() }

// Close marks the structure closed, stops the goroutine and waits for it
// to return. It is idempotent.
func (s *Sweeper) Close() {
	s.once.Do(func() {
		s.closed.Store(true)
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
}

// CopyKey returns a copy of key that shares no memory with the caller's
// (whose string may pin a larger buffer), and its size as allocated:
// append rounds the capacity up to the allocator's size class, which
// reports it, and the byte bound counts that.
func CopyKey(key string) (string, int64) {
	if key == "" {
		return "", 0
	}
	b := append([]byte(nil), key...)
	return unsafe.String(unsafe.SliceData(b), len(b)), int64(cap(b))
}

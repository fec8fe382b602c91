package main

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
)

// The garbage collector's floor. Go collects when the heap has grown by
// GOGC percent (100) over what the last collection left live. The
// service's live heap is small (a few MiB on the Redis store), while each
// request allocates a few KiB that die at once, so with Go's default it
// collects tens to hundreds of times a second under load, and the
// collector's work is a large share of the service's CPU. A floor lets
// the heap grow to at least that many bytes before a collection: GOGC is
// raised after each collection for as long as the live heap is small, and
// is GOGC again once the live heap is large enough on its own, as the
// memory store's can be with many keys.

// defaultGCFloor is -gc-floor's default.
const defaultGCFloor = 64 << 20

// gcFloorFlag is -gc-floor: a size as -max-memory's, or 0 for none.
type gcFloorFlag struct{ bytesFlag }

func (f *gcFloorFlag) Set(s string) error {
	if strings.TrimSpace(s) == "0" {
		f.bytesFlag = 0
		return nil
	}
	if err := f.bytesFlag.Set(s); err != nil {
		return fmt.Errorf("%q: want 0 (none) or a size such as 67108864, 64MiB or 1GiB", s)
	}
	return nil
}

// minHeap: Go's heap goal is never below 4 MiB × GOGC/100, so the
// percent is figured as if what it scans were at least that; figured from
// less, the goal would pass the floor.
const minHeap = 4 << 20

// gcFloorPercent is the GOGC that makes a heap of live bytes grow to
// floor before the next collection, never below base, Go's percent
// without the floor. Go's goal is live + (live + roots)·GOGC/100, roots
// being the stacks and globals it scans.
func gcFloorPercent(live, roots, floor uint64, base int) int {
	if live >= floor {
		return base
	}
	scan := max(live+roots, minHeap)
	d := floor - live
	p := d/scan*100 + d%scan*100/scan // (floor-live)·100/scan, not overflowing
	return max(int(min(p, math.MaxInt32)), base)
}

// gcFloor keeps the heap from being collected before it reaches floor
// bytes, as the package comment above says, until stop, which sets back
// the percent it found. It does nothing for a floor of 0, or when GOGC is
// off. Its percent starts at the one GOGC set (100 by default): the floor
// only ever raises it. GOMEMLIMIT, if set, still holds: Go collects at
// the limit whatever the percent.
//
// The percent is the process's: while several serve in one process (as
// tests run them), the first floor holds and the last stop sets the
// percent back.
func gcFloor(floor int64) (stop func()) {
	tuner.mu.Lock()
	defer tuner.mu.Unlock()
	if floor <= 0 {
		return func() {}
	}
	if tuner.users == 0 {
		tuner.base = gogc()
		if tuner.base < 0 {
			return func() {}
		}
		tuner.floor = uint64(floor)
		tuner.tuneLocked()
		if !tuner.armed {
			tuner.armed = true
			tuner.arm()
		}
	}
	tuner.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			tuner.mu.Lock()
			defer tuner.mu.Unlock()
			if tuner.users--; tuner.users == 0 {
				debug.SetGCPercent(tuner.base)
			}
		})
	}
}

// tuner is the process's floor.
var tuner floorTuner

type floorTuner struct {
	mu    sync.Mutex
	users int // the floors not stopped
	floor uint64
	base  int  // the percent before the first
	armed bool // a sentinel waits for the next collection
	// samples are read under mu
	samples [3]metrics.Sample
}

// sentinel is an object whose finalizer runs once a collection finds it
// unreachable: once per collection, a new one each time. It holds a
// pointer so that it is never one of the tiny allocations Go batches,
// whose finalizers may never run.
type sentinel struct{ _ *int }

// arm has tune run after the next collection, which arms again while a
// floor holds.
func (f *floorTuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.users == 0 {
			f.armed = false
			return
		}
		f.tuneLocked()
		f.arm()
	})
}

// tuneLocked sets the percent for the live heap the last collection left,
// with f.mu held.
func (f *floorTuner) tuneLocked() {
	s := &f.samples
	s[0].Name, s[1].Name, s[2].Name = "/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"
	metrics.Read(s[:])
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	debug.SetGCPercent(gcFloorPercent(v[0], v[1]+v[2], f.floor, f.base))
}

// gogc is the process's GOGC percent, -1 for off, read without setting it.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	return int(int64(s[0].Value.Uint64()))
}

package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCFloorPercent(t *testing.T) {
	const MiB = 1 << 20
	for _, c := range []struct {
		live, roots, floor uint64
		base, want         int
	}{
		{0, 0, 64 * MiB, 100, 1600},       // before any collection: from 4 MiB
		{1 * MiB, 0, 64 * MiB, 100, 1575}, // Go's goal is never below 4 MiB × percent
		{8 * MiB, 0, 64 * MiB, 100, 700},  // 8 MiB grows to 64 before the next
		{10 * MiB, 0, 64 * MiB, 100, 540},
		{8 * MiB, 8 * MiB, 64 * MiB, 100, 350}, // stacks and globals count towards the goal
		{8 * MiB, 32 * MiB, 64 * MiB, 100, 140},
		{40 * MiB, 0, 64 * MiB, 100, 100}, // 60 would do: never below the base
		{64 * MiB, 0, 64 * MiB, 100, 100},
		{1 << 40, 0, 64 * MiB, 100, 100},
		{8 * MiB, 0, 64 * MiB, 1000, 1000}, // GOGC=1000: the floor raises only
		{4 * MiB, 0, 1<<63 - 1, 100, 1<<31 - 1},
	} {
		if got := gcFloorPercent(c.live, c.roots, c.floor, c.base); got != c.want {
			t.Errorf("gcFloorPercent(%d, %d, %d, %d) = %d, want %d", c.live, c.roots, c.floor, c.base, got, c.want)
		}
	}
}

// With the floor, the same garbage is collected several times less often,
// and the percent is set back once the floor stops, however many floors
// overlapped.
func TestGCFloor(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)

	cycles := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	// garbage allocates 512 MiB in 4 KiB blocks, none kept, and returns
	// the collections meanwhile.
	var sink []byte
	garbage := func() uint64 {
		runtime.GC()
		c0 := cycles()
		for range 512 << 8 {
			sink = make([]byte, 4<<10)
		}
		return cycles() - c0
	}
	without := garbage()

	stop := gcFloor(256 << 20)
	stop2 := gcFloor(64 << 20) // a second serve in the process: the first floor holds
	runtime.GC()               // the floor's percent is set after each collection
	// The finalizer that sets it runs soon after the collection, on a
	// goroutine of its own: wait for it, within a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for gogc() < 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d 10s after a collection, want the floor's", gogc())
		}
		time.Sleep(time.Millisecond)
	}
	with := garbage()
	if p := gogc(); p < 1000 {
		t.Errorf("GOGC %d after collections with the floor, want it kept raised", p)
	}
	stop2()
	stop2() // twice: counted once
	if p := gogc(); p < 1000 {
		t.Errorf("GOGC %d with one floor still on, want it kept raised", p)
	}
	stop()
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d after the last floor stopped, want 100", p)
	}
	runtime.GC()
	time.Sleep(10 * time.Millisecond) // a finalizer still pending must not raise it again
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d after a collection with no floor, want 100", p)
	}
	t.Logf("512 MiB of garbage: %d collections without the floor, %d with a floor of 256 MiB", without, with)
	// 512 MiB at 100% of a live heap of under 4 MiB: a collection per 4
	// MiB or so; with 256 MiB, two or three.
	if with*8 > without {
		t.Errorf("%d collections with the floor against %d without, want at most an eighth", with, without)
	}
	if sink == nil {
		t.Fatal("nothing allocated")
	}

	// GOGC=off: the floor leaves it off.
	debug.SetGCPercent(-1)
	gcFloor(64 << 20)()
	if p := gogc(); p != -1 {
		t.Errorf("GOGC %d after a floor with GOGC off, want off", p)
	}
	debug.SetGCPercent(100)
	gcFloor(0)()
	if p := gogc(); p != 100 {
		t.Errorf("GOGC %d after a floor of 0, want 100", p)
	}
}

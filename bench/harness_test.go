package bench

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// allowFunc is one contender deciding one unit at now. Every contender is
// called through the same kind of closure, so the call costs the same for
// all; BenchmarkAllowN/alg=baseline measures that cost alone.
type allowFunc func(now time.Time) bool

// t0 is where every time sequence starts. It carries no monotonic reading,
// like any time that did not come from time.Now.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// blockLen is how many consecutive times a goroutine takes at once.
const blockLen = 64

// timeSeq hands out the times t0 + i·step, i = 0, 1, 2, ..., in blocks of
// blockLen consecutive times. The loop reads a precomputed time instead of
// making one; filling a block costs one time.Add per time, amortised, the
// same for every contender.
//
// The goroutines of a parallel run share the block counter, so together
// they offer exactly the serial sequence and no goroutine runs ahead of the
// others by more than about a block (128ms of simulated time at the
// slowest step): far less than the 1s a full bucket holds. Were each
// goroutine to walk its own sequence, a few µs of descheduling would put it
// seconds of simulated time behind, and the limiters would be judging
// clocks that go backwards rather than the traffic.
type timeSeq struct {
	ts     [blockLen]time.Time
	i      int
	step   time.Duration
	blocks *atomic.Int64 // blocks handed out so far
}

func newTimeSeq(step time.Duration, blocks *atomic.Int64) *timeSeq {
	return &timeSeq{i: blockLen, step: step, blocks: blocks}
}

func (s *timeSeq) next() time.Time {
	if s.i == blockLen {
		s.fill()
	}
	t := s.ts[s.i]
	s.i++
	return t
}

func (s *timeSeq) fill() {
	k := s.blocks.Add(1) - 1
	first := t0.Add(time.Duration(k*blockLen) * s.step)
	for j := range s.ts {
		s.ts[j] = first.Add(time.Duration(j) * s.step)
	}
	s.i = 0
}

// runSerial calls allow b.N times with the times t0, t0+step, ... and
// reports the fraction allowed, so a reader can check that the contenders
// did the same work.
func runSerial(b *testing.B, allow allowFunc, step time.Duration) {
	b.ReportAllocs()
	seq := newTimeSeq(step, new(atomic.Int64))
	n := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if allow(seq.next()) {
			n++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/float64(b.N), "allowed/op")
}

// runParallel shares one limiter between RunParallel's goroutines, which
// together offer the serial sequence of times (see timeSeq).
func runParallel(b *testing.B, allow allowFunc, step time.Duration) {
	b.ReportAllocs()
	var blocks, gs, allowed atomic.Int64
	seqs := make([]*timeSeq, runtime.GOMAXPROCS(0)) // RunParallel's goroutines at parallelism 1
	for g := range seqs {
		seqs[g] = newTimeSeq(step, &blocks)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		seq := seqs[gs.Add(1)-1]
		n := int64(0)
		for pb.Next() {
			if allow(seq.next()) {
				n++
			}
		}
		allowed.Add(n)
	})
	b.StopTimer()
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
}

// run runs a fresh limiter from mk serially and another in parallel, as the
// sub-benchmarks run=serial and run=parallel.
func run(b *testing.B, mk func(b *testing.B) allowFunc, step time.Duration) {
	b.Run("run=serial", func(b *testing.B) { runSerial(b, mk(b), step) })
	b.Run("run=parallel", func(b *testing.B) { runParallel(b, mk(b), step) })
}

// runClock is run for limiters that read the clock themselves: no time
// sequence, nothing in the loop but the call.
func runClock(b *testing.B, mk func(b *testing.B) func() bool) {
	b.Run("run=serial", func(b *testing.B) {
		allow := mk(b)
		b.ReportAllocs()
		n := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if allow() {
				n++
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(n)/float64(b.N), "allowed/op")
	})
	b.Run("run=parallel", func(b *testing.B) {
		allow := mk(b)
		b.ReportAllocs()
		var allowed atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			n := int64(0)
			for pb.Next() {
				if allow() {
					n++
				}
			}
			allowed.Add(n)
		})
		b.StopTimer()
		b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
	})
}

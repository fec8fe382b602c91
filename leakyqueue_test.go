package sluice

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const refused = time.Duration(-1)

func TestLeakyQueueReserve(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit Limit
		steps []struct {
			at      time.Duration
			n       int64
			release time.Duration // since t0, or refused
			want    Decision
		}
	}{
		{
			// A queue of 3 at 5/s: releases 200ms apart; a 4th is refused
			// until the head has left.
			name:  "5/s queue 3",
			limit: Limit{Rate: 5, Period: time.Second, Burst: 3},
			steps: []struct {
				at      time.Duration
				n       int64
				release time.Duration
				want    Decision
			}{
				{0, 1, 0, allow(3, 2, 200*ms)},
				{0, 1, 200 * ms, allow(3, 1, 400*ms)},
				{0, 1, 400 * ms, allow(3, 0, 600*ms)},
				{0, 1, refused, deny(3, 0, 200*ms, 600*ms)},
				{200*ms - 1, 1, refused, deny(3, 0, 1, 400*ms+1)},
				{200 * ms, 1, 600 * ms, allow(3, 0, 600*ms)},
				{200 * ms, 1, refused, deny(3, 0, 200*ms, 600*ms)},
				{time.Second, 2, time.Second, allow(3, 1, 400*ms)},
				{time.Second, 1, 1400 * ms, allow(3, 0, 600*ms)},
				{time.Second, 4, refused, deny(3, 0, Never, 600*ms)},
				{time.Second, -1, refused, deny(3, 0, Never, 600*ms)},
			},
		},
		{
			// 3/s: releases at exactly ⌈k·10^9/3⌉ ns.
			name:  "3/s",
			limit: PerSecond(3),
			steps: []struct {
				at      time.Duration
				n       int64
				release time.Duration
				want    Decision
			}{
				{0, 1, 0, allow(3, 2, 333333334)},
				{0, 1, 333333334, allow(3, 1, 666666667)},
				{0, 1, 666666667, allow(3, 0, time.Second)},
				{0, 1, refused, deny(3, 0, 333333334, time.Second)},
				{333333333, 1, refused, deny(3, 0, 1, 666666667)},
				{333333334, 1, time.Second, allow(3, 0, time.Second)},
				{333333334, 1, refused, deny(3, 0, 333333333, time.Second)},
				{time.Second, 1, 1333333334, allow(3, 1, 666666667)},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q, err := NewLeakyQueue(tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.steps {
				rel, d := q.Reserve(t0.Add(s.at), s.n)
				want := time.Time{}
				if s.release != refused {
					want = t0.Add(s.release)
				}
				if !rel.Equal(want) || d != s.want {
					t.Errorf("Reserve(t0+%v, %d) = t0+%v, %+v; want t0+%v, %+v", s.at, s.n, rel.Sub(t0), d, s.release, s.want)
				}
			}
		})
	}
}

func newQueue(t *testing.T, l Limit, opts ...QueueOption) *LeakyQueue {
	t.Helper()
	q, err := NewLeakyQueue(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestLeakyQueueWait: one caller after another waits exactly its turn, in
// fake time.
func TestLeakyQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, PerSecond(3))
		start := time.Now()
		for i, want := range []time.Duration{0, 333333334, 666666667, time.Second, 1333333334} {
			if err := q.Wait(t.Context(), 1); err != nil {
				t.Fatalf("Wait #%d: %v", i+1, err)
			}
			if got := time.Since(start); got != want {
				t.Errorf("Wait #%d returned at start+%v, want start+%v", i+1, got, want)
			}
		}
	})
}

// TestLeakyQueueWaitConcurrent: callers arriving together leave evenly
// spaced, Period/Rate apart.
func TestLeakyQueueWaitConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, PerSecond(5))
		start := time.Now()
		var mu sync.Mutex
		var left []time.Duration
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if err := q.Wait(t.Context(), 1); err != nil {
					t.Error(err)
				}
				mu.Lock()
				left = append(left, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(left)
		if want := []time.Duration{0, 200 * ms, 400 * ms, 600 * ms, 800 * ms}; !slices.Equal(left, want) {
			t.Errorf("5 callers at once left at %v, want %v", left, want)
		}
	})
}

// TestLeakyQueueWaitCancel: a caller whose context ends while it waits
// gets the context's error at once and gives its place back.
func TestLeakyQueueWaitCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, Limit{Rate: 5, Period: time.Second, Burst: 3})
		start := time.Now()
		q.Reserve(start, 1) // leaves at once; the next leaves at +200ms
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- q.Wait(ctx, 1) }()
		time.Sleep(50 * ms)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Wait returned %v before its turn", err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Wait after cancel = %v, want context.Canceled", err)
		}
		if got := time.Since(start); got != 50*ms {
			t.Errorf("Wait returned at start+%v, want start+50ms, when cancelled", got)
		}
		if rel, d := q.Reserve(time.Now(), 1); !d.Allowed || !rel.Equal(start.Add(200*ms)) {
			t.Errorf("Reserve after the cancel = start+%v, %+v; want the place given back, start+200ms", rel.Sub(start), d)
		}
	})
}

// TestLeakyQueueWaitDeadline: a caller whose turn comes after its
// deadline is told at once, and gives its place back.
func TestLeakyQueueWaitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, Limit{Rate: 5, Period: time.Second, Burst: 3})
		start := time.Now()
		q.Reserve(start, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 100*ms)
		defer cancel()
		if err := q.Wait(ctx, 1); !errors.Is(err, ErrWouldExceedDeadline) {
			t.Errorf("Wait with 100ms to go and a turn in 200ms = %v, want ErrWouldExceedDeadline", err)
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("Wait took %v to refuse, want 0", got)
		}
		if rel, _ := q.Reserve(start, 1); !rel.Equal(start.Add(200 * ms)) {
			t.Errorf("Reserve after the refusal = start+%v, want the place given back, start+200ms", rel.Sub(start))
		}
		// With a deadline after its turn, the caller waits its turn.
		ctx, cancel = context.WithTimeout(t.Context(), 500*ms)
		defer cancel()
		if err := q.Wait(ctx, 1); err != nil {
			t.Errorf("Wait with 500ms to go and a turn in 400ms = %v", err)
		}
		if got := time.Since(start); got != 400*ms {
			t.Errorf("Wait returned at start+%v, want start+400ms", got)
		}
	})
}

// TestLeakyQueueWaitFull: past the queue's size a caller is refused at
// once with ErrQueueFull, and nothing is queued.
func TestLeakyQueueWaitFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, Limit{Rate: 5, Period: time.Second, Burst: 2})
		start := time.Now()
		q.Reserve(start, 2)
		for _, n := range []int64{1, 3} {
			if err := q.Wait(t.Context(), n); !errors.Is(err, ErrQueueFull) {
				t.Errorf("Wait(ctx, %d) on a full queue = %v, want ErrQueueFull", n, err)
			}
		}
		if err := q.Wait(t.Context(), -1); err == nil {
			t.Errorf("Wait(ctx, -1) = nil, want an error")
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("refusals took %v, want 0", got)
		}
		if rel, d := q.Reserve(start.Add(200*ms), 1); !d.Allowed || !rel.Equal(start.Add(400*ms)) {
			t.Errorf("Reserve(start+200ms, 1) = start+%v, %+v; want start+400ms: the refusals queued nothing", rel.Sub(start), d)
		}
	})
}

// TestLeakyQueueWaitDone: a context already done consumes nothing.
func TestLeakyQueueWaitDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, PerSecond(5))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := q.Wait(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait(cancelled ctx) = %v, want context.Canceled", err)
		}
		if _, d := q.Reserve(time.Now(), 0); d.Remaining != 5 {
			t.Errorf("after Wait(cancelled ctx), Reserve(now, 0) = %+v, want the queue empty", d)
		}
	})
}

// TestLeakyQueueClock: Wait reads the clock it is given.
func TestLeakyQueueClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		reads := 0
		clock := ClockFunc(func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			reads++
			return time.Now()
		})
		q := newQueue(t, PerSecond(5), WithClock(clock), WithClock(nil))
		for range 2 {
			if err := q.Wait(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
		}
		if reads != 2 {
			t.Errorf("the clock was read %d times by 2 Waits, want 2", reads)
		}
		if got := time.Since(start); got != 200*ms {
			t.Errorf("2 Waits took %v, want 200ms", got)
		}
	})
}

package redis

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// A timer that fired unread goes back to the pool empty, so that the next
// queued caller to get it does not time out at once. Since Go 1.23 Stop
// drops such a value; under GODEBUG=asynctimerchan=1 it does not, so the
// test runs itself again in a child process with that setting, where it
// first waits until the timer's value sits in its channel: the check is
// then of a timer that did fire unread, however late the machine ran it.
func TestPutTimerDrains(t *testing.T) {
	child := os.Getenv("SLUICE_TIMER_CHILD") != ""
	tm := time.NewTimer(time.Millisecond)
	if child {
		// With asynchronous timer channels the value lands in a buffer
		// of one when the timer fires; len sees it.
		deadline := time.Now().Add(10 * time.Second)
		for len(tm.C) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("a 1ms timer has not fired after 10s (is GODEBUG=asynctimerchan=1 still honoured? %q)", os.Getenv("GODEBUG"))
			}
			time.Sleep(time.Millisecond)
		}
	} else {
		// Synchronous timer channels hold no value until a receive asks;
		// once the timer is due, a receive would get one.
		time.Sleep(2 * time.Millisecond)
	}
	putTimer(tm)
	select {
	case <-tm.C:
		t.Fatal("a timer that fired unread went back to the pool holding its value")
	default:
	}
	// The next caller resets it, as getTimer does: it must not fire at once.
	tm.Reset(time.Hour)
	select {
	case <-tm.C:
		t.Fatal("a pooled timer reset for an hour fired at once")
	default:
	}
	tm.Stop()
	if child {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPutTimerDrains$", "-test.count=1", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), "GODEBUG=asynctimerchan=1", "SLUICE_TIMER_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("with GODEBUG=asynctimerchan=1: %v\n%s", err, out)
	}
}

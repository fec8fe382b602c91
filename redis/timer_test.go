package redis

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// A timer that fired unread goes back to the pool empty, so that the next
// queued caller to get it does not time out at once. Since Go 1.23 Stop
// drops such a value; under GODEBUG=asynctimerchan=1 it does not, so the
// test runs itself again in a child process with that setting.
func TestPutTimerDrains(t *testing.T) {
	tm := time.NewTimer(time.Millisecond)
	time.Sleep(20 * time.Millisecond) // fired, unread
	putTimer(tm)
	select {
	case <-tm.C:
		t.Fatal("a timer that fired unread went back to the pool holding its value")
	default:
	}
	if os.Getenv("SLUICE_TIMER_CHILD") != "" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPutTimerDrains$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=asynctimerchan=1", "SLUICE_TIMER_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("with GODEBUG=asynctimerchan=1: %v\n%s", err, out)
	}
}

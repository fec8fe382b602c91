package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// failureLog logs the requests that the rules' failure modes decided,
// because the store failed, at warning level: at most a line a second,
// which says how many there were since the last, so that an outage under
// load neither goes unseen nor floods the log.
type failureLog struct {
	n    atomic.Int64 // since the last line
	mu   sync.Mutex
	last time.Time // of the last line
}

// note counts one such request, in domain, at now, and logs a line if
// none was logged in the last second.
func (f *failureLog) note(ctx context.Context, log *slog.Logger, now time.Time, domain string, err error) {
	f.n.Add(1)
	if !f.mu.TryLock() {
		return // another is logging: this one is in its count or the next
	}
	defer f.mu.Unlock()
	if !f.last.IsZero() && now.Sub(f.last) < time.Second {
		return
	}
	f.last = now
	log.WarnContext(ctx, "store failed; the rules' failure modes decided", "requests", f.n.Swap(0), "domain", domain, "err", err)
}

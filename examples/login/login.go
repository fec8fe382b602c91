package main

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/httplimit"
)

// The rules count failed logins only.
var (
	// Five failures per 15 minutes for one user from one address. The
	// sliding log is exact (no 15 minutes ever hold more than five) and
	// holds five times per key.
	perUserAndAddr = sluice.Rule{
		Name:      "failures_per_user_and_address",
		Algorithm: sluice.AlgoSlidingLog,
		Limit:     sluice.Limit{Rate: 5, Period: 15 * time.Minute},
	}
	// A hundred failures an hour from one address, whatever the users:
	// this stops one address trying a common password on every account.
	// GCRA keeps one number per address.
	perAddr = sluice.Rule{
		Name:      "failures_per_address",
		Algorithm: sluice.AlgoGCRA,
		Limit:     sluice.PerHour(100),
	}
)

// maxUserLen bounds the user name, which is part of a key.
const maxUserLen = 64

// attemptTimeout is how long an attempt may hold its address's place; the
// place comes back by itself after that if the handler never releases it.
const attemptTimeout = 10 * time.Second

// login is the handler of POST /login. It checks a password only if
// neither rule is spent, and charges the rules only when the password was
// wrong, so a user who logs in a hundred times a day is never limited.
type login struct {
	limiter  *sluice.Limiter         // failures, by the rules above
	rules    [2]*sluice.PreparedRule // perUserAndAddr and perAddr, prepared
	inFlight *concurrency.Limiter    // attempts in progress, per address
	clock    sluice.Clock            // the limiter's
	clientIP httplimit.KeyFunc       // the client's address
	verify   func(user, password string) bool
}

func (l *login) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, password := r.PostFormValue("user"), r.PostFormValue("password")
	if user == "" || len(user) > maxUserLen {
		http.Error(w, "a user name of 1 to 64 bytes is required", http.StatusBadRequest)
		return
	}
	addr, err := l.clientIP(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	// A check's zero Cost is one failure; Peek makes it cost nothing.
	failure := []sluice.Check{
		{Rule: l.rules[0], Key: addr + " " + user}, // an address has no spaces
		{Rule: l.rules[1], Key: addr},
	}
	peek := []sluice.Check{failure[0], failure[1]}
	peek[0].Peek, peek[1].Peek = true, true

	// One attempt at a time per address, so that each failure is charged
	// before the next attempt from there peeks: a thousand guesses sent
	// at once would otherwise all pass the peek below together.
	lease, d, err := l.inFlight.Acquire(l.clock.Now(), addr, 1, attemptTimeout)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !d.Allowed {
		tooMany(w, time.Second, "another login from your address is in progress")
		return
	}
	defer l.inFlight.Release(lease)

	// Peek before the password is checked: a peek charges nothing and
	// reports what is left.
	res, err := l.limiter.Take(ctx, peek, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	charged := false
	if res.Remaining == 0 {
		// Locked out. A peek is always allowed, so ask for one failure to
		// learn for how long: with none left it is denied, and a denial
		// charges nothing and says exactly when one would pass.
		if res, err = l.limiter.Take(ctx, failure, nil); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if !res.Allowed {
			tooMany(w, res.RetryAfter, "too many failed logins")
			return
		}
		// A failure aged out between the peek and this call, which was
		// allowed: it has charged this attempt's failure ahead.
		charged = true
	}

	if l.verify(user, password) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "welcome, %s\n", user)
		return
	}
	// Charge the failure now that it is one.
	if !charged {
		if _, err := l.limiter.Take(ctx, failure, nil); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	http.Error(w, "wrong user name or password", http.StatusUnauthorized)
}

// tooMany answers 429 with the wait in whole seconds, rounded up, in
// Retry-After and in the message.
func tooMany(w http.ResponseWriter, retry time.Duration, why string) {
	secs := (retry + time.Second - 1) / time.Second
	w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	http.Error(w, fmt.Sprintf("%s: try again in %v", why, secs*time.Second), http.StatusTooManyRequests)
}

package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httpclient"
)

// ErrBudgetSpent is wrapped by the error of a call the day's budget cannot
// pay for.
var ErrBudgetSpent = errors.New("daily budget spent")

// budget pays for calls to a metered API out of a daily budget in cents.
// Money is counted in whole cents, as sluice counts everything in
// integers, so nothing is lost to rounding.
type budget struct {
	day   *sluice.FixedWindow       // cents a day, renewed at 00:00 UTC
	price func(*http.Request) int64 // what a call costs, in cents
	clock sluice.Clock
}

// newClient returns a client for the metered API behind base: each call
// is refused at once if the budget cannot pay for it, then waits its turn
// in queue (httpclient, which also rides out the API's 429s), then is
// paid for just before it is sent.
func newClient(base http.RoundTripper, b *budget, queue *sluice.LeakyQueue) (*http.Client, error) {
	paced, err := httpclient.NewTransport(b.pay(base), httpclient.WithPacer(queue))
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: b.check(paced)}, nil
}

// check refuses a call the budget cannot pay for before it waits its turn
// in next: a peek (a cost of 0) charges nothing and says what is left.
func (b *budget) check(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if d := b.day.AllowN(b.clock.Now(), 0); d.Remaining < b.price(req) {
			return nil, b.refuse(req, d)
		}
		return next.RoundTrip(req)
	})
}

// pay pays for a call just before next sends it, when it has had its
// turn: a call that gives up waiting (its context ended) costs nothing,
// and one that others left nothing for while it waited is refused. Every
// attempt sent is paid for, retries included, so the API can never bill
// more than the budget.
func (b *budget) pay(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if d := b.day.AllowN(b.clock.Now(), b.price(req)); !d.Allowed {
			return nil, b.refuse(req, d)
		}
		return next.RoundTrip(req)
	})
}

// refuse closes the request's body, as a RoundTripper must, and says why
// the call cannot be paid for.
func (b *budget) refuse(req *http.Request, d sluice.Decision) error {
	if req.Body != nil {
		req.Body.Close()
	}
	price := b.price(req)
	if price > d.Limit {
		return fmt.Errorf("%w: %s %s costs %s, more than the whole day's budget of %s",
			ErrBudgetSpent, req.Method, req.URL.Path, cents(price), cents(d.Limit))
	}
	// A fixed window is back to its full quota when it resets: at
	// midnight, for a day. The wait is rounded up, never promising too
	// soon.
	renew := (d.ResetAfter + time.Second - 1).Truncate(time.Second)
	return fmt.Errorf("%w: %s %s costs %s and %s is left; the budget renews in %v",
		ErrBudgetSpent, req.Method, req.URL.Path, cents(price), cents(d.Remaining), renew)
}

// cents formats an amount in cents as dollars: 105 is "$1.05".
func cents(n int64) string { return fmt.Sprintf("$%d.%02d", n/100, n%100) }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

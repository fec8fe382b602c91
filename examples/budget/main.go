// Command budget caps the spend on a paid dependency: calls to a metered
// API are paced by httpclient with a leaky queue, at the rate the API
// allows, and paid for out of a daily budget; when the budget is spent,
// calls fail at once with an error that says so.
//
//	go run ./examples/budget
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Stdout, os.Stderr))
}

func run(ctx context.Context, stdout, stderr io.Writer) int {
	if err := demo(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "budget:", err)
		return 1
	}
	return 0
}

// The metered API's price list, in cents.
var prices = map[string]int64{
	"/v1/geocode": 5,
	"/v1/route":   20,
}

// price is what a call costs. A path the list lacks costs the most, so
// that a new endpoint never goes unpaid.
func price(r *http.Request) int64 {
	if p, ok := prices[r.URL.Path]; ok {
		return p
	}
	return 20
}

// meteredAPI stands for the paid service, called in memory rather than
// over the network: it answers every call and keeps the bill.
type meteredAPI struct {
	mu    sync.Mutex
	calls []time.Time // when each call arrived
	bill  int64       // cents
}

func (a *meteredAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.calls = append(a.calls, time.Now())
	a.bill += price(req)
	a.mu.Unlock()
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(`{"ok": true}`)),
		Request:    req,
	}, nil
}

// demo spends a day's budget. It runs on the real clock, and the queue
// really waits (0.7s in all); its test runs it on synctest's fake clock.
func demo(ctx context.Context, w io.Writer) error {
	api := &meteredAPI{}

	day, err := sluice.NewFixedWindow(sluice.Limit{Rate: 100, Period: 24 * time.Hour}) // $1.00 a day
	if err != nil {
		return err
	}
	b := &budget{day: day, price: price, clock: sluice.SystemClock}
	// The API takes 10 calls a second: the queue sends them 100ms apart,
	// and holds at most 10 waiting.
	queue, err := sluice.NewLeakyQueue(sluice.PerSecond(10))
	if err != nil {
		return err
	}
	client, err := newClient(api, b, queue) // http.DefaultTransport, for a real API
	if err != nil {
		return err
	}

	start := time.Now()
	call := func(ctx context.Context, path string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com"+path, nil)
		if err != nil {
			fmt.Fprintln(w, err)
			return
		}
		resp, err := client.Do(req)
		fmt.Fprintf(w, "%+5.1fs  GET %-12s ", time.Since(start).Seconds(), path)
		if err != nil {
			fmt.Fprintf(w, "%v\n", errors.Unwrap(err)) // the *url.Error's cause
			return
		}
		resp.Body.Close()
		left := day.AllowN(sluice.SystemClock.Now(), 0).Remaining
		fmt.Fprintf(w, "%d, %s left\n", resp.StatusCode, cents(left))
	}

	fmt.Fprintln(w, "A budget of $1.00 a day; a route costs $0.20 and a geocode $0.05;")
	fmt.Fprintln(w, "the API takes 10 calls a second, so they leave 100ms apart.")
	for range 4 {
		call(ctx, "/v1/route")
	}
	fmt.Fprintln(w, "\nA call whose turn would come after its deadline fails at once, unpaid:")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	call(short, "/v1/geocode")
	cancel()
	fmt.Fprintln(w, "\nThe last 20 cents, then nothing: a call the budget cannot pay for fails at once.")
	for range 5 {
		call(ctx, "/v1/geocode")
	}
	call(ctx, "/v1/route")
	fmt.Fprintf(w, "\nThe API billed %s for %d calls.\n", cents(api.bill), len(api.calls))
	return nil
}

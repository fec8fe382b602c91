package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// The tests run in a synctest bubble, where time is fake and starts at
// midnight UTC, 2000-01-01: the queue's waits take no real time, and
// every time below is exact.

// setup returns a client of the metered API with a budget of budgetCents
// a day, paced at 10 calls a second with room for queued calls.
func setup(t *testing.T, budgetCents, queued int64) (*http.Client, *meteredAPI, *sluice.FixedWindow) {
	t.Helper()
	day, err := sluice.NewFixedWindow(sluice.Limit{Rate: budgetCents, Period: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	queue, err := sluice.NewLeakyQueue(sluice.Limit{Rate: 10, Period: time.Second, Burst: queued})
	if err != nil {
		t.Fatal(err)
	}
	api := &meteredAPI{}
	client, err := newClient(api, &budget{day: day, price: price, clock: sluice.SystemClock}, queue)
	if err != nil {
		t.Fatal(err)
	}
	return client, api, day
}

func get(ctx context.Context, client *http.Client, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com"+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// The budget runs out: calls it cannot pay for fail at once, naming the
// price and the renewal, and reach no API; the next day it is back.
func TestBudgetRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, api, _ := setup(t, 100, 10)
		ctx := t.Context()
		for _, path := range []string{"/v1/route", "/v1/route", "/v1/route", "/v1/route", "/v1/geocode", "/v1/geocode"} {
			if err := get(ctx, client, path); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		// 90 cents spent at 00:00:00.5: a route no longer fits, a
		// geocode does.
		before := time.Now()
		err := get(ctx, client, "/v1/route")
		if !errors.Is(err, ErrBudgetSpent) {
			t.Fatalf("GET /v1/route with 10 cents left: %v, want ErrBudgetSpent", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "costs $0.20 and $0.10 is left; the budget renews in 24h0m0s") {
			t.Errorf("error %q does not say the price, what is left and when it renews", msg)
		}
		if waited := time.Since(before); waited != 0 {
			t.Errorf("a refused call waited %v", waited)
		}
		for _, path := range []string{"/v1/geocode", "/v1/geocode"} {
			if err := get(ctx, client, path); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		if err := get(ctx, client, "/v1/geocode"); !errors.Is(err, ErrBudgetSpent) {
			t.Fatalf("GET /v1/geocode with nothing left: %v, want ErrBudgetSpent", err)
		}
		if len(api.calls) != 8 || api.bill != 100 {
			t.Fatalf("the API saw %d calls and billed %s; want 8 and $1.00", len(api.calls), cents(api.bill))
		}

		time.Sleep(time.Until(time.Date(2000, 1, 2, 0, 0, 0, 0, time.UTC)))
		if err := get(ctx, client, "/v1/route"); err != nil {
			t.Fatalf("the next day: %v", err)
		}
	})
}

// A call that costs more than a whole day's budget says so.
func TestPriceAboveBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, api, _ := setup(t, 10, 10)
		err := get(t.Context(), client, "/v1/route")
		if !errors.Is(err, ErrBudgetSpent) || !strings.Contains(err.Error(), "more than the whole day's budget of $0.10") {
			t.Fatalf("GET /v1/route on a 10 cent budget: %v", err)
		}
		if len(api.calls) != 0 {
			t.Fatalf("the API saw %d calls", len(api.calls))
		}
	})
}

// Calls made together leave the queue 100ms apart, in order; those past
// the queue's room are refused at once and not paid for.
func TestPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, api, day := setup(t, 1000, 4)
		start := time.Now()
		errs := make(chan error, 6)
		for range 6 {
			go func() { errs <- get(t.Context(), client, "/v1/geocode") }()
		}
		var full int
		for range 6 {
			if err := <-errs; errors.Is(err, sluice.ErrQueueFull) {
				full++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
		if full != 2 || len(api.calls) != len(want) {
			t.Fatalf("%d calls refused as the queue was full and %d arrived; want 2 and 4", full, len(api.calls))
		}
		for i, at := range api.calls {
			if at.Sub(start) != want[i] {
				t.Errorf("call %d arrived at +%v, want +%v", i, at.Sub(start), want[i])
			}
		}
		if left := day.AllowN(time.Now(), 0).Remaining; left != 1000-4*5 {
			t.Errorf("%s left, want $9.80: only the calls sent are paid for", cents(left))
		}
	})
}

// Waits end with the caller's context, and a call that did not go out is
// not paid for: one whose turn would come after its deadline fails at
// once; one whose context is cancelled while it waits fails then.
func TestContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, api, day := setup(t, 100, 10)
		ctx := t.Context()
		if err := get(ctx, client, "/v1/route"); err != nil { // the next turn is 100ms away
			t.Fatal(err)
		}

		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		before := time.Now()
		if err := get(short, client, "/v1/route"); !errors.Is(err, sluice.ErrWouldExceedDeadline) {
			t.Fatalf("a call due after its deadline: %v, want ErrWouldExceedDeadline", err)
		}
		if waited := time.Since(before); waited != 0 {
			t.Errorf("it waited %v", waited)
		}

		cancelled, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- get(cancelled, client, "/v1/route") }()
		time.Sleep(50 * time.Millisecond)
		synctest.Wait() // the call is waiting its turn
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a call cancelled while waiting: %v, want context.Canceled", err)
		}

		if left := day.AllowN(time.Now(), 0).Remaining; len(api.calls) != 1 || left != 80 {
			t.Fatalf("the API saw %d calls and %s is left; want 1 and $0.80", len(api.calls), cents(left))
		}
	})
}

// Callers at once never overspend: each call pays when it is sent, and
// those that others left nothing for while they waited are refused.
func TestNeverOverspent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, api, _ := setup(t, 100, 10)
		errs := make(chan error, 10)
		for range 10 {
			go func() { errs <- get(t.Context(), client, "/v1/route") }()
		}
		var spent int
		for range 10 {
			if err := <-errs; errors.Is(err, ErrBudgetSpent) {
				spent++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if spent != 5 || len(api.calls) != 5 || api.bill != 100 {
			t.Fatalf("%d calls refused, the API saw %d and billed %s; want 5, 5 and $1.00", spent, len(api.calls), cents(api.bill))
		}
	})
}

// The demo, in the bubble, prints the same every time.
func TestDemo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out, errOut strings.Builder
		if code := run(t.Context(), &out, &errOut); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		if got := out.String(); got != demoOutput {
			t.Fatalf("the demo printed\n%s\nwant\n%s", got, demoOutput)
		}
	})
}

const demoOutput = `A budget of $1.00 a day; a route costs $0.20 and a geocode $0.05;
the API takes 10 calls a second, so they leave 100ms apart.
 +0.0s  GET /v1/route    200, $0.80 left
 +0.1s  GET /v1/route    200, $0.60 left
 +0.2s  GET /v1/route    200, $0.40 left
 +0.3s  GET /v1/route    200, $0.20 left

A call whose turn would come after its deadline fails at once, unpaid:
 +0.3s  GET /v1/geocode  sluice: release would exceed context deadline

The last 20 cents, then nothing: a call the budget cannot pay for fails at once.
 +0.4s  GET /v1/geocode  200, $0.15 left
 +0.5s  GET /v1/geocode  200, $0.10 left
 +0.6s  GET /v1/geocode  200, $0.05 left
 +0.7s  GET /v1/geocode  200, $0.00 left
 +0.7s  GET /v1/geocode  daily budget spent: GET /v1/geocode costs $0.05 and $0.00 is left; the budget renews in 24h0m0s
 +0.7s  GET /v1/route    daily budget spent: GET /v1/route costs $0.20 and $0.00 is left; the budget renews in 24h0m0s

The API billed $1.00 for 8 calls.
`

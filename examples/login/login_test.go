package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, time.March, 2, 9, 0, 0, 0, time.UTC)

const (
	guesser = "203.0.113.9"
	home    = "198.51.100.4"
	right   = "correct horse battery staple"
)

// newTestLogin returns the handler on a clock stopped at t0.
func newTestLogin(t *testing.T, verify func(user, password string) bool) (*login, *manualClock) {
	t.Helper()
	clock := &manualClock{now: t0}
	l, release, err := newLogin(clock, verify)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return l, clock
}

// post sends POST /login from the address and returns the answer.
func post(h http.Handler, from, user, password string) (code int, retryAfter, body string) {
	form := url.Values{"user": {user}, "password": {password}}
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = net.JoinHostPort(from, "50000")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code, rec.Header().Get("Retry-After"), rec.Body.String()
}

// Five failures in 15 minutes lock one user at one address; the lock
// lifts when the oldest failure is 15 minutes old, as Retry-After said.
func TestLockoutPerUserAndAddress(t *testing.T) {
	l, clock := newTestLogin(t, checkPassword)
	for _, step := range []struct {
		at             time.Duration
		from, password string
		code           int
		retryAfter     string
	}{
		{0, guesser, "123456", 401, ""},
		{1 * time.Minute, guesser, "password", 401, ""},
		{2 * time.Minute, guesser, "qwerty", 401, ""},
		{3 * time.Minute, guesser, "letmein", 401, ""},
		{4 * time.Minute, guesser, "dragon", 401, ""},
		// Locked: the right password is not even checked.
		{4 * time.Minute, guesser, right, 429, "660"},
		// The same user from another address is not.
		{4 * time.Minute, home, right, 200, ""},
		{14*time.Minute + 59*time.Second + 500*time.Millisecond, guesser, right, 429, "1"},
		// The failure of 09:00 has aged out: one more try.
		{15 * time.Minute, guesser, "monkey", 401, ""},
		{15 * time.Minute, guesser, right, 429, "60"},
		{16 * time.Minute, guesser, right, 200, ""},
	} {
		clock.set(t0.Add(step.at))
		code, ra, body := post(l, step.from, "alice", step.password)
		if code != step.code || ra != step.retryAfter {
			t.Fatalf("at +%v from %s with %q: %d, Retry-After %q (%q); want %d, Retry-After %q",
				step.at, step.from, step.password, code, ra, strings.TrimSpace(body), step.code, step.retryAfter)
		}
		if code == 429 && !strings.Contains(body, "too many failed logins: try again in ") {
			t.Errorf("at +%v: lockout message %q", step.at, body)
		}
	}
}

// A success charges nothing: four failures and any number of successes
// leave room for a fifth failure.
func TestSuccessesAreNotCharged(t *testing.T) {
	l, _ := newTestLogin(t, checkPassword)
	for i := range 4 {
		if code, _, _ := post(l, home, "alice", "typo"); code != 401 {
			t.Fatalf("failure %d: %d, want 401", i+1, code)
		}
	}
	for i := range 50 {
		if code, _, _ := post(l, home, "alice", right); code != 200 {
			t.Fatalf("success %d: %d, want 200", i+1, code)
		}
	}
	if code, _, _ := post(l, home, "alice", "typo"); code != 401 {
		t.Fatalf("fifth failure: %d, want 401", code)
	}
	if code, ra, _ := post(l, home, "alice", right); code != 429 || ra != "900" {
		t.Fatalf("after five failures: %d, Retry-After %q; want 429, 900", code, ra)
	}
}

// A hundred failures an hour from one address, on any users, lock the
// address for every user; another address is not affected, and the next
// failure is allowed 36s later (an hour / 100).
func TestLockoutPerAddress(t *testing.T) {
	l, clock := newTestLogin(t, checkPassword)
	for i := range 100 {
		if code, _, _ := post(l, guesser, fmt.Sprintf("user%03d", i), "123456"); code != 401 {
			t.Fatalf("user%03d: %d, want 401", i, code)
		}
	}
	if code, ra, _ := post(l, guesser, "bob", "hunter2"); code != 429 || ra != "36" {
		t.Fatalf("bob from the address: %d, Retry-After %q; want 429, 36", code, ra)
	}
	if code, _, _ := post(l, home, "bob", "hunter2"); code != 200 {
		t.Fatalf("bob from another address: %d, want 200", code)
	}
	clock.set(t0.Add(35 * time.Second))
	if code, ra, _ := post(l, guesser, "bob", "hunter2"); code != 429 || ra != "1" {
		t.Fatalf("bob at +35s: %d, Retry-After %q; want 429, 1", code, ra)
	}
	clock.set(t0.Add(36 * time.Second))
	if code, _, _ := post(l, guesser, "bob", "hunter2"); code != 200 {
		t.Fatalf("bob at +36s: %d, want 200", code)
	}
}

// While an attempt from an address is being checked, another from there
// is refused, so that guesses sent at once cannot all pass the peek
// before the first failure is charged. Other addresses go on.
func TestOneAttemptAtATimePerAddress(t *testing.T) {
	checking, done := make(chan struct{}), make(chan struct{})
	l, _ := newTestLogin(t, func(user, password string) bool {
		if user == "slow" {
			close(checking)
			<-done
		}
		return checkPassword(user, password)
	})
	first := make(chan int)
	go func() {
		code, _, _ := post(l, guesser, "slow", "123456")
		first <- code
	}()
	<-checking
	if code, ra, body := post(l, guesser, "alice", "123456"); code != 429 || ra != "1" || !strings.Contains(body, "in progress") {
		t.Errorf("a second attempt from the address: %d, Retry-After %q, %q; want 429, 1, in progress", code, ra, body)
	}
	if code, _, _ := post(l, home, "alice", right); code != 200 {
		t.Errorf("an attempt from another address: %d, want 200", code)
	}
	close(done)
	if code := <-first; code != 401 {
		t.Errorf("the first attempt: %d, want 401", code)
	}
	if code, _, _ := post(l, guesser, "alice", "123456"); code != 401 {
		t.Errorf("after the first attempt ended: %d, want 401", code)
	}
}

func TestBadRequest(t *testing.T) {
	l, _ := newTestLogin(t, checkPassword)
	for _, user := range []string{"", strings.Repeat("a", maxUserLen+1)} {
		if code, _, _ := post(l, guesser, user, "x"); code != 400 {
			t.Errorf("user of %d bytes: %d, want 400", len(user), code)
		}
	}
}

func Example() {
	if code := run(context.Background(), nil, os.Stdout, os.Stderr); code != 0 {
		fmt.Println("exit", code)
	}
	// Output:
	// A guesser tries alice's password once a minute; five failures in 15 minutes lock
	// that user from that address, and then not even the right password is checked:
	// 09:00:00  203.0.113.9   alice  "123456"                       401  wrong user name or password
	// 09:01:00  203.0.113.9   alice  "password"                     401  wrong user name or password
	// 09:02:00  203.0.113.9   alice  "qwerty"                       401  wrong user name or password
	// 09:03:00  203.0.113.9   alice  "letmein"                      401  wrong user name or password
	// 09:04:00  203.0.113.9   alice  "dragon"                       401  wrong user name or password
	// 09:05:00  203.0.113.9   alice  "correct horse battery staple" 429 Retry-After: 600  too many failed logins: try again in 10m0s
	//
	// Alice herself, from home, is not locked out:
	// 09:05:00  198.51.100.4  alice  "correct horse battery staple" 200  welcome, alice
	//
	// At 09:15 the first failure is 15 minutes old: the guesser has one more try.
	// 09:15:00  203.0.113.9   alice  "monkey"                       401  wrong user name or password
	// 09:15:00  203.0.113.9   alice  "shadow"                       429 Retry-After: 60  too many failed logins: try again in 1m0s
	//
	// Then it tries one password on many accounts; a hundred failures an hour
	// lock its address, for every user:
	// 09:16:00  203.0.113.9   150 users, "123456": 100 × 401, then 50 × 429
	// 09:16:00  203.0.113.9   bob    "hunter2"                      429 Retry-After: 36  too many failed logins: try again in 36s
	// 09:16:36  203.0.113.9   bob    "hunter2"                      200  welcome, bob
}

// Command login slows password guessing: it counts failed logins per user
// and client address and per address, checks no password once either
// count is spent, and answers 429 with Retry-After.
//
//	go run ./examples/login              # replays a guesser's morning, on a clock it moves
//	go run ./examples/login -http :8080  # serves POST /login on the real clock
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memory"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("login", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http", "", "serve POST /login at `ADDR` on the real clock, instead of the demo")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if *addr != "" {
		err = serve(ctx, *addr, stdout)
	} else {
		err = demo(ctx, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "login:", err)
		return 1
	}
	return 0
}

// users are the demo's accounts. A real service keeps password hashes
// (argon2id, bcrypt) and compares those.
var users = map[string]string{
	"alice": "correct horse battery staple",
	"bob":   "hunter2",
}

func checkPassword(user, password string) bool {
	want, ok := users[user]
	return ok && subtle.ConstantTimeCompare([]byte(password), []byte(want)) == 1
}

// newLogin returns the handler, deciding at clock's time, and a function
// that releases what it holds.
func newLogin(clock sluice.Clock, verify func(user, password string) bool) (*login, func(), error) {
	store, err := memory.New() // or redis.New, to share the counts between instances
	if err != nil {
		return nil, nil, err
	}
	limiter, err := sluice.NewLimiter(store, sluice.WithClock(clock))
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	var rules [2]*sluice.PreparedRule
	for i, r := range []sluice.Rule{perUserAndAddr, perAddr} {
		if rules[i], err = limiter.Prepare(r); err != nil {
			store.Close()
			return nil, nil, err
		}
	}
	inFlight, err := concurrency.New()
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	l := &login{
		limiter:  limiter,
		rules:    rules,
		inFlight: inFlight,
		clock:    clock,
		clientIP: httplimit.ClientIP(), // no proxies in front; name them if there are
		verify:   verify,
	}
	return l, func() { inFlight.Close(); store.Close() }, nil
}

// serve runs POST /login at addr until ctx ends.
func serve(ctx context.Context, addr string, stdout io.Writer) error {
	l, release, err := newLogin(sluice.SystemClock, checkPassword)
	if err != nil {
		return err
	}
	defer release()
	mux := http.NewServeMux()
	mux.Handle("POST /login", l)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "POST /login on %s; try it six times:\n  curl -i -d user=alice -d password=guess http://%s/login\n", ln.Addr(), ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// demo replays a guesser's morning through the handler, on a clock it
// moves itself, so that it prints the same every time.
func demo(ctx context.Context, w io.Writer) error {
	t0 := time.Date(2026, time.March, 2, 9, 0, 0, 0, time.UTC)
	clock := &manualClock{now: t0}
	l, release, err := newLogin(clock, checkPassword)
	if err != nil {
		return err
	}
	defer release()

	post := func(at time.Duration, from, user, password string) *http.Response {
		clock.set(t0.Add(at))
		form := url.Values{"user": {user}, "password": {password}}
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = net.JoinHostPort(from, "50000")
		rec := httptest.NewRecorder()
		l.ServeHTTP(rec, r)
		return rec.Result()
	}
	try := func(at time.Duration, from, user, password string) {
		resp := post(at, from, user, password)
		body, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(w, "%s  %-13s %-6s %-30q %d", t0.Add(at).Format("15:04:05"), from, user, password, resp.StatusCode)
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Fprintf(w, " Retry-After: %s", ra)
		}
		fmt.Fprintf(w, "  %s", body)
	}
	const guesser, home = "203.0.113.9", "198.51.100.4"

	fmt.Fprintln(w, "A guesser tries alice's password once a minute; five failures in 15 minutes lock")
	fmt.Fprintln(w, "that user from that address, and then not even the right password is checked:")
	for i, p := range []string{"123456", "password", "qwerty", "letmein", "dragon", "correct horse battery staple"} {
		try(time.Duration(i)*time.Minute, guesser, "alice", p)
	}
	fmt.Fprintln(w, "\nAlice herself, from home, is not locked out:")
	try(5*time.Minute, home, "alice", "correct horse battery staple")
	fmt.Fprintln(w, "\nAt 09:15 the first failure is 15 minutes old: the guesser has one more try.")
	try(15*time.Minute, guesser, "alice", "monkey")
	try(15*time.Minute, guesser, "alice", "shadow")

	fmt.Fprintln(w, "\nThen it tries one password on many accounts; a hundred failures an hour")
	fmt.Fprintln(w, "lock its address, for every user:")
	codes := map[int]int{}
	for i := range 150 {
		codes[post(16*time.Minute, guesser, fmt.Sprintf("user%03d", i), "123456").StatusCode]++
	}
	fmt.Fprintf(w, "09:16:00  %-13s 150 users, \"123456\": %d × 401, then %d × 429\n", guesser, codes[401], codes[429])
	try(16*time.Minute, guesser, "bob", "hunter2")
	try(16*time.Minute+36*time.Second, guesser, "bob", "hunter2")
	return nil
}

// manualClock is a sluice.Clock that the demo and the tests move by hand.
// A server uses sluice.SystemClock.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

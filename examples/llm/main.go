// Command llm keeps an LLM token budget per API key, 1000 tokens an hour:
// each request is checked when it arrives and charged the tokens the
// model used when its answer is done, whatever was left, so an answer
// longer than what was left takes the key into debt and its next requests
// are refused until the hour is over. The budget is kept twice: by the
// app itself, with httplimit (library.go), and by sluice serve on
// llm.yaml, asked as Envoy asks (gateway.go), over gRPC and POST /json.
//
//	go run ./examples/llm
package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/server"
)

//go:embed llm.yaml
var llmYAML string

func main() {
	os.Exit(run(context.Background(), os.Stdout, os.Stderr))
}

func run(ctx context.Context, stdout, stderr io.Writer) int {
	if err := demo(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "llm:", err)
		return 1
	}
	return 0
}

// answerTokens is what every answer of the demo's model comes to.
const answerTokens = 400

// fixedModel answers every prompt with answerTokens tokens.
func fixedModel(prompt string) (string, int64) {
	return "an answer to " + prompt, answerTokens
}

// t0 is where the demo's clock starts: ten minutes into an hour, so that
// the hour's window ends 50 minutes on.
var t0 = time.Date(2026, time.March, 2, 12, 10, 0, 0, time.UTC)

// demo runs on a clock it moves itself, so that it prints the same every
// time.
func demo(ctx context.Context, w io.Writer) error {
	clock := &manualClock{now: t0}

	fmt.Fprintf(w, "The library (library.go): POST /v1/chat behind httplimit, %d tokens an hour\n", tokensPerHour.Limit.Rate)
	fmt.Fprintf(w, "per API key, every answer %d tokens, at 12:10:\n", answerTokens)
	store, err := memory.New()
	if err != nil {
		return err
	}
	defer store.Close()
	limiter, err := sluice.NewLimiter(store, sluice.WithClock(clock))
	if err != nil {
		return err
	}
	app, err := chat(limiter, fixedModel)
	if err != nil {
		return err
	}
	post := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat", strings.NewReader(url.Values{"prompt": {"hello"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, r)
		return rec
	}
	for i := 1; ; i++ {
		rec := post("sk-alice")
		if rec.Code != http.StatusOK {
			fmt.Fprintf(w, "  request %d: %d, Retry-After: %s (the hour's end); RateLimit: %s\n", i, rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("RateLimit"))
			break
		}
		fmt.Fprintf(w, "  request %d: %d, RateLimit: %s%s\n", i, rec.Code, rec.Header().Get("RateLimit"), debt(rec.Header().Get("RateLimit")))
		if i == 10 {
			return fmt.Errorf("the budget never ran out")
		}
	}
	fmt.Fprintf(w, "  another key: %d\n", post("sk-bob").Code)
	clock.set(t0.Add(50 * time.Minute))
	fmt.Fprintf(w, "  at 13:00, the first key again: %d\n", post("sk-alice").Code)

	clock.set(t0)
	fmt.Fprintln(w, "\nsluice serve on llm.yaml, asked as Envoy asks: a check (the descriptor's")
	fmt.Fprintln(w, "hits_addend 0) when a request arrives, and when its answer ends a charge of")
	fmt.Fprintf(w, "the %d tokens it used, at 12:10:\n", answerTokens)
	svc, stop, err := startService(ctx, clock)
	if err != nil {
		return err
	}
	defer stop()
	for _, via := range []struct {
		name string
		svc  asker
	}{{"over gRPC (RLS)", svc.grpc}, {"over POST /json", svc.json}} {
		fmt.Fprintf(w, "  %s:\n", via.name)
		for i := 1; ; i++ {
			ok, left, err := gatewayRequest(ctx, via.svc, "sk-"+strings.Fields(via.name)[1], answerTokens)
			if err != nil {
				return err
			}
			if !ok {
				fmt.Fprintf(w, "    request %d: check OVER_LIMIT, %d left: refused\n", i, left)
				break
			}
			fmt.Fprintf(w, "    request %d: check OK, %d left; charged %d%s\n", i, left, answerTokens, debt(fmt.Sprintf("r=%d;", left)))
			if i == 10 {
				return fmt.Errorf("the budget never ran out")
			}
		}
	}
	return nil
}

// debt says how far an answer of answerTokens takes a key into debt,
// from the RateLimit field's r (what was left before it), or "".
func debt(rateLimit string) string {
	var left int64
	if _, r, ok := strings.Cut(rateLimit, "r="); ok {
		fmt.Sscanf(r, "%d", &left)
	}
	if left >= answerTokens {
		return ""
	}
	return fmt.Sprintf(": %d into debt", answerTokens-left)
}

// service is sluice serve on llm.yaml, reached over gRPC and through POST
// /json.
type service struct {
	grpc asker
	json asker
}

// startService runs the rate-limit service on llm.yaml, its gRPC port on
// a loopback port of its own, as `sluice serve --config llm.yaml` runs
// it; stop stops it.
func startService(ctx context.Context, clock sluice.Clock) (svc *service, stop func(), err error) {
	dir, err := os.MkdirTemp("", "sluice-llm-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := []func(){func() { os.RemoveAll(dir) }}
	stop = func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	path := filepath.Join(dir, "llm.yaml")
	if err := os.WriteFile(path, []byte(llmYAML), 0o644); err != nil {
		return nil, nil, err
	}
	store, err := memory.New()
	if err != nil {
		return nil, nil, err
	}
	cleanup = append(cleanup, func() { store.Close() })
	srv, err := server.New(server.Settings{Paths: []string{path}, Store: store, Clock: clock, ReloadInterval: -1})
	if err != nil {
		return nil, nil, err
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hl.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, hl, gl) }()
	cleanup = append(cleanup, func() { cancel(); <-done })
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	cleanup = append(cleanup, func() { conn.Close() })
	return &service{grpc: rls{rlspb.NewRateLimitServiceClient(conn)}, json: jsonRLS{srv.Handler()}}, stop, nil
}

// manualClock is a sluice.Clock that the demo and the tests move by hand.
// A service uses sluice.SystemClock.
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

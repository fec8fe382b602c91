// Command rlsload measures the rate-limit service: a closed-loop gRPC load
// generator for envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit,
// and the bare servers it is compared with in the same run.
//
//	rlsload grpc -addr 127.0.0.1:8081 -c 32 -d 10s   # load, then a report
//	rlsload bare-grpc -addr 127.0.0.1:9081           # an RLS that decides nothing
//	rlsload bare-http -addr 127.0.0.1:9080           # an HTTP handler that decides nothing
//	rlsload pair-grpc -addr 127.0.0.1:9082 -redis redis://127.0.0.1:6379/0
//	                                                 # an RLS deciding by INCRBY + PEXPIRE, as the inexact peers do
//	rlsload floor-grpc -addr 127.0.0.1:9083 -redis redis://127.0.0.1:6379/0
//	                                                 # an RLS deciding by the least exact script, in runs as sluice's
//
// pair-grpc and floor-grpc with -http ADDR also serve POST /json there, as
// sluice serve does: the same decisions under the HTTP load.
//
// The load is bounded in time and sent to one address, which must be a
// loopback one. run.sh beside this file starts sluice and the bare
// servers, and measures them all with this command and wrk.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: rlsload grpc|bare-grpc|bare-http|pair-grpc|floor-grpc [flags]")
		return 2
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "the address to load, or to serve on (loopback only)")
	conc := fs.Int("c", 32, "concurrent calls in flight")
	conns := fs.Int("conns", 2, "gRPC connections the calls share")
	dur := fs.Duration("d", 10*time.Second, "how long to load, at most 1m")
	keys := fs.Int("keys", 1000, "distinct descriptor values, sent in turn")
	domain := fs.String("domain", "bench", "the request's domain")
	key := fs.String("key", "user", "the descriptor's key")
	redisURL := fs.String("redis", "", "pair-grpc, floor-grpc: the Redis to count in (loopback only)")
	httpAddr := fs.String("http", "", "pair-grpc, floor-grpc: also serve POST /json on this address (loopback only)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	for i, a := range []string{*addr, *httpAddr} {
		if i == 1 && a == "" {
			break // no -http
		}
		if err := loopback(a); err != nil {
			fmt.Fprintln(stderr, "rlsload:", err)
			return 2
		}
	}
	var err error
	switch args[0] {
	case "grpc":
		if *conc < 1 || *conns < 1 || *keys < 1 || *dur <= 0 || *dur > time.Minute {
			fmt.Fprintln(stderr, "rlsload: want -c, -conns, -keys >= 1 and 0 < -d <= 1m")
			return 2
		}
		err = load(ctx, stdout, *addr, *conc, *conns, *dur, *keys, *domain, *key)
	case "bare-grpc":
		err = bareGRPC(ctx, *addr)
	case "bare-http":
		err = bareHTTP(ctx, *addr)
	case "pair-grpc":
		err = pairGRPC(ctx, *addr, *httpAddr, *redisURL)
	case "floor-grpc":
		err = floorGRPC(ctx, *addr, *httpAddr, *redisURL)
	default:
		fmt.Fprintf(stderr, "rlsload: unknown mode %q\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "rlsload:", err)
		return 1
	}
	return 0
}

// loopback refuses any address but a loopback one: this tool sends load.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s is not a loopback address", addr)
	}
	return nil
}

// load runs conc closed loops of ShouldRateLimit for dur and reports the
// rate and the latency percentiles.
func load(ctx context.Context, w io.Writer, addr string, conc, nconn int, dur time.Duration, keys int, domain, key string) error {
	cs := make([]*grpc.ClientConn, nconn)
	for i := range cs {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer c.Close()
		cs[i] = c
	}
	// Requests are built before the clock starts.
	reqs := make([]*rlspb.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitpb.RateLimitDescriptor{{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: key, Value: "k" + strconv.Itoa(i)}},
		}}}
	}
	// Warm up: connections, and the server's first keys. run.sh counts
	// these calls too, since it reads the server's CPU around the whole
	// command.
	warm := min(keys, 1000)
	for i := range warm {
		if _, err := rlspb.NewRateLimitServiceClient(cs[i%nconn]).ShouldRateLimit(ctx, reqs[i]); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	// The calls run on ctx, not on a deadline, so that the end of the run
	// never fails a call in flight: each loop stops at its next call.
	var done atomic.Bool
	stop := time.AfterFunc(dur, func() { done.Store(true) })
	defer stop.Stop()
	lat := make([][]time.Duration, conc)
	over := make([]int, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Go(func() {
			client := rlspb.NewRateLimitServiceClient(cs[g%nconn])
			ls := make([]time.Duration, 0, 1<<16)
			for i := g; !done.Load() && ctx.Err() == nil; i += conc {
				t := time.Now()
				resp, err := client.ShouldRateLimit(ctx, reqs[i%keys])
				if err != nil {
					if ctx.Err() == nil {
						errs[g] = err
					}
					break
				}
				ls = append(ls, time.Since(t))
				if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
					over[g]++
				}
			}
			lat[g] = ls
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	n := len(all)
	if n == 0 {
		return errors.New("no call completed")
	}
	denied := 0
	for _, o := range over {
		denied += o
	}
	// Microseconds are the resolution worth reading here.
	pct := func(p float64) time.Duration { return all[min(n-1, int(float64(n)*p))].Round(time.Microsecond) }
	fmt.Fprintf(w, "%s: %d calls in %v, %d connections, %d in flight, %d keys\n", addr, n, elapsed.Round(time.Millisecond), nconn, conc, keys)
	fmt.Fprintf(w, "  warm-up calls before %d\n", warm)
	fmt.Fprintf(w, "  requests/s %.0f\n", float64(n)/elapsed.Seconds())
	fmt.Fprintf(w, "  latency p50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n", pct(0.50), pct(0.90), pct(0.99), pct(0.999), all[n-1].Round(time.Microsecond))
	fmt.Fprintf(w, "  over limit %d (%.1f%%)\n", denied, 100*float64(denied)/float64(n))
	return nil
}

// bareRLS answers every request OK without deciding anything: what gRPC
// and the protobuf encoding cost alone.
type bareRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (bareRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	st := make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: st}, nil
}

func bareGRPC(ctx context.Context, addr string) error {
	return serveGRPC(ctx, addr, bareRLS{})
}

// serveRLS serves rls over gRPC on addr and, if httpAddr is not empty,
// POST /json on httpAddr (see serveJSON), until ctx is done or either
// fails.
func serveRLS(ctx context.Context, addr, httpAddr string, rls rlspb.RateLimitServiceServer) error {
	if httpAddr == "" {
		return serveGRPC(ctx, addr, rls)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- serveGRPC(ctx, addr, rls) }()
	go func() { errs <- serveJSON(ctx, httpAddr, rls) }()
	err := <-errs
	cancel()
	if err2 := <-errs; err == nil {
		err = err2
	}
	return err
}

// serveGRPC serves rls on addr until ctx is done.
func serveGRPC(ctx context.Context, addr string, rls rlspb.RateLimitServiceServer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(s, rls)
	go func() {
		<-ctx.Done()
		s.Stop()
	}()
	return s.Serve(l)
}

// serveJSON serves POST /json on addr until ctx is done: a
// RateLimitRequest in proto3 JSON (of the fields jsonRequest reads),
// decided by rls as a gRPC call is, its answer in proto3 JSON (overall and
// per descriptor codes), 429 when over the limit, as sluice serve's
// POST /json.
func serveJSON(ctx context.Context, addr string, rls rlspb.RateLimitServiceServer) error {
	return serveHTTP(ctx, addr, jsonHandler(rls))
}

// jsonRequest is what the pair and the floor read of a RateLimitRequest
// in proto3 JSON, by encoding/json: protojson would cost their servers
// three times sluice's own reader, and a slower server sends the floor
// runs of fewer requests than sluice's under the same load, which is not
// the comparison its rows are for.
type jsonRequest struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"entries"`
	} `json:"descriptors"`
	HitsAddend uint32 `json:"hitsAddend"`
}

// jsonHandler is serveJSON's handler.
func jsonHandler(rls rlspb.RateLimitServiceServer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		var in jsonRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		if err := dec.Decode(&in); err != nil {
			http.Error(w, "malformed JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		req := &rlspb.RateLimitRequest{Domain: in.Domain, HitsAddend: in.HitsAddend}
		for _, d := range in.Descriptors {
			rd := &ratelimitpb.RateLimitDescriptor{}
			for _, e := range d.Entries {
				rd.Entries = append(rd.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
			req.Descriptors = append(req.Descriptors, rd)
		}
		resp, err := rls.ShouldRateLimit(r.Context(), req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := append(make([]byte, 0, 128), `{"overallCode":"`...)
		out = append(out, resp.GetOverallCode().String()...)
		out = append(out, `","statuses":[`...)
		for i, st := range resp.GetStatuses() {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"code":"`...)
			out = append(out, st.GetCode().String()...)
			out = append(out, `"}`...)
		}
		out = append(out, "]}\n"...)
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
	return mux
}

// serveHTTP serves h on addr until ctx is done.
func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	s := &http.Server{Addr: addr, ReadHeaderTimeout: 10 * time.Second, Handler: h}
	go func() {
		<-ctx.Done()
		s.Close()
	}()
	if err := s.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bareOK is the answer of the bare HTTP handler: the shape of sluice's
// POST /json answer, decided by nobody.
const bareOK = `{"overallCode":"OK","statuses":[{"code":"OK"}]}` + "\n"

// bareHTTP reads the body and answers 200 with a constant JSON body: what
// net/http costs alone, for GET /v1/auth and POST /json alike.
func bareHTTP(ctx context.Context, addr string) error {
	return serveHTTP(ctx, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, bareOK)
	}))
}

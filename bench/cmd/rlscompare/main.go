// Command rlscompare sends the same sequence of RLS requests to several
// rate-limit services, one after the other, and prints each answer's
// overall_code and per-descriptor codes side by side. It exits 1 when the
// services answer differently, 2 when one cannot be asked.
//
//	rlscompare -rounds 20 envoyproxy=127.0.0.1:9081 sluice=127.0.0.1:9181
//
// The sequence is an LLM gateway's, under the config beside this file
// (llm.yaml): each round checks the API key's token budget at cost 0 (a
// descriptor's hits_addend of 0) with the user's request limit at the
// request's cost, then charges the tokens the answer used (-tokens) with
// the user at cost 0. A first part does the same without the user: the
// bare "check 0, charge N" sequence. run.sh beside this file builds
// envoyproxy/ratelimit, starts it and sluice with that config, and runs
// this command. Each run uses keys of its own, so that a service's
// counts from an earlier run do not meet it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func main() { os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }

// service is one rate-limit service asked.
type service struct {
	name string
	rls  rlspb.RateLimitServiceClient
}

// step is one request of the sequence.
type step struct {
	label string
	req   *rlspb.RateLimitRequest
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlscompare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rounds := fs.Int("rounds", 20, "rounds of check and charge in each part")
	tokens := fs.Uint64("tokens", 150, "the tokens each charge costs")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for every service to answer a first request")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 2 || *rounds < 1 || *rounds > 1000 {
		fmt.Fprintln(stderr, "usage: rlscompare [-rounds 1..1000] [-tokens N] NAME=HOST:PORT NAME=HOST:PORT...")
		return 2
	}
	var svcs []service
	for _, a := range fs.Args() {
		name, addr, ok := strings.Cut(a, "=")
		if !ok || name == "" || !loopback(addr) {
			fmt.Fprintf(stderr, "rlscompare: %q: want NAME=HOST:PORT on a loopback address\n", a)
			return 2
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintf(stderr, "rlscompare: %s: %v\n", name, err)
			return 2
		}
		defer conn.Close()
		svcs = append(svcs, service{name, rlspb.NewRateLimitServiceClient(conn)})
	}
	for _, s := range svcs {
		if err := ready(ctx, s, *wait); err != nil {
			fmt.Fprintf(stderr, "rlscompare: %s: %v\n", s.name, err)
			return 2
		}
	}

	run := fmt.Sprintf("%x", time.Now().UnixNano())
	steps := sequence("k-"+run, "", *rounds, *tokens)
	steps = append(steps, sequence("k2-"+run, "u-"+run, *rounds, *tokens)...)

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "STEP\tREQUEST"
	for _, s := range svcs {
		header += "\t" + s.name
	}
	fmt.Fprintln(tw, header+"\t")
	diffs := 0
	for i, st := range steps {
		line := fmt.Sprintf("%d\t%s", i+1, st.label)
		var first string
		same := true
		for j, s := range svcs {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := s.rls.ShouldRateLimit(c, st.req)
			cancel()
			if err != nil {
				tw.Flush()
				fmt.Fprintf(stderr, "rlscompare: %s: step %d: %v\n", s.name, i+1, err)
				return 2
			}
			a := answer(resp)
			if j == 0 {
				first = a
			}
			same = same && a == first
			line += "\t" + a
		}
		if !same {
			line += "\tDIFFERENT"
			diffs++
		}
		fmt.Fprintln(tw, line+"\t")
	}
	tw.Flush()
	if diffs > 0 {
		fmt.Fprintf(stdout, "%d of %d answers differ\n", diffs, len(steps))
		return 1
	}
	fmt.Fprintf(stdout, "all %d answers the same\n", len(steps))
	return 0
}

// sequence is rounds of the gateway's pair for an API key (and a user,
// if not ""): a check of cost 0, then a charge of tokens.
func sequence(key, user string, rounds int, tokens uint64) []step {
	desc := func(k, v string, hits *uint64) *ratelimitpb.RateLimitDescriptor {
		d := &ratelimitpb.RateLimitDescriptor{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
		if hits != nil {
			d.HitsAddend = wrapperspb.UInt64(*hits)
		}
		return d
	}
	zero := uint64(0)
	var out []step
	for range rounds {
		check := &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("api_key", key, &zero)}}
		charge := &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("api_key", key, &tokens)}}
		label := "api_key"
		if user != "" {
			check.Descriptors = append(check.Descriptors, desc("user", user, nil))
			charge.Descriptors = append(charge.Descriptors, desc("user", user, &zero))
			label = "api_key, user"
		}
		out = append(out,
			step{fmt.Sprintf("check (%s: 0%s)", label, map[bool]string{true: ", 1", false: ""}[user != ""]), check},
			step{fmt.Sprintf("charge (%s: %d%s)", label, tokens, map[bool]string{true: ", 0", false: ""}[user != ""]), charge})
	}
	return out
}

// answer is a response's overall code and its descriptors' codes.
func answer(resp *rlspb.RateLimitResponse) string {
	var ds []string
	for _, st := range resp.GetStatuses() {
		ds = append(ds, st.GetCode().String())
	}
	return resp.GetOverallCode().String() + " [" + strings.Join(ds, " ") + "]"
}

// ready waits, for wait at most, until s answers a request of a domain
// of its own, which charges nothing.
func ready(ctx context.Context, s service, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	req := &rlspb.RateLimitRequest{Domain: "rlscompare-ready", Descriptors: []*ratelimitpb.RateLimitDescriptor{{
		Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.rls.ShouldRateLimit(c, req)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %v: %w", wait, err)
		}
		time.Sleep(100 * time.Millisecond) // the service is starting
	}
}

// loopback reports whether addr is HOST:PORT on a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

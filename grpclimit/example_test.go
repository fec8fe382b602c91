package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memory"
)

// A server that allows each client address two health checks a minute.
func Example() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	// A fixed clock keeps the output the same; servers leave it out.
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := sluice.NewLimiter(store, sluice.WithClock(sluice.ClockFunc(func() time.Time { return now })))
	if err != nil {
		log.Fatal(err)
	}
	perIP := sluice.Rule{Name: "per-ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(2)}
	lim, err := grpclimit.New(l, grpclimit.WithRule(perIP, grpclimit.PeerIP()))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary), grpc.ChainStreamInterceptor(lim.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		st := status.Convert(err)
		fmt.Print(st.Code())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Print(", retry in ", d.GetRetryDelay().AsDuration().Round(time.Second))
			case *errdetails.QuotaFailure:
				for _, v := range d.GetViolations() {
					fmt.Printf(", over %s (%d a minute)", v.GetQuotaId(), v.GetQuotaValue())
				}
			}
		}
		fmt.Println()
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted, retry in 30s, over per-ip (2 a minute)
}

// Keys: an API key when the call has one, the caller's /64 otherwise. The
// API key is counted by its digest, and each part apart from the other: a
// client cannot send an address as its API key to spend that address's
// quota.
func ExampleFirst() {
	key := grpclimit.First(grpclimit.APIKey("x-api-key"), grpclimit.PeerIP())

	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:7:8::42"), Port: 50000}})
	k, _ := key(ctx, "/shop.Cart/Add")
	fmt.Println(k)

	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-api-key", "2001:db8:7:8::42"))
	k, _ = key(ctx, "/shop.Cart/Add")
	fmt.Println(k)
	// Output:
	// 1:2001:db8:7:8::/64
	// 0:#cWDfmXof_eIm5bqKXyXlVg
}

// One limit per method and client.
func ExampleJoin() {
	key := grpclimit.Join(grpclimit.Method(), grpclimit.PeerIP())
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("::ffff:203.0.113.7"), Port: 50000}})
	k, _ := key(ctx, "/shop.Cart/Add")
	fmt.Println(k)
	// Output: /shop.Cart/Add|203.0.113.7
}

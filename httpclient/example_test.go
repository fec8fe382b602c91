package httpclient_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httpclient"
)

// A client that keeps under 10 requests a second and rides out the
// server's 429s.
func ExampleNewTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0") // come back at once
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	pace, err := sluice.NewGCRA(sluice.PerSecond(10))
	if err != nil {
		log.Fatal(err)
	}
	tr, err := httpclient.NewTransport(nil,
		httpclient.WithAlgorithm(pace),
		httpclient.WithMaxRetries(3),
		httpclient.WithMaxWait(30*time.Second),
	)
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}

	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	// Output: 200 hello after 2 attempts
}

package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func simBody(algs, limit, pattern string) string {
	return fmt.Sprintf(`{"algorithms":[%s],"limit":%s,"pattern":%s}`, algs, limit, pattern)
}

// The boundary scenario gives the counts sluice demo boundary prints.
func TestSimulateBoundary(t *testing.T) {
	s, _ := newServer(t, Settings{})
	h := s.AdminHandler(AdminOptions{UI: true})
	var r simResponse
	code, _, body := adminDo(t, h, "POST", "/v1/simulate",
		simBody(`"token_bucket","fixed_window","sliding_log"`, `{"rate":5,"period":"1s"}`, `{"kind":"scenario","scenario":"boundary"}`), &r)
	if code != http.StatusOK {
		t.Fatalf("simulate: %d %s", code, body)
	}
	want := map[string]string{"token_bucket": "5 5 100ms #####|.....", "fixed_window": "10 0 - #####|#####", "sliding_log": "5 5 900ms #####|....."}
	if len(r.Results) != 3 {
		t.Fatalf("%d results, want 3", len(r.Results))
	}
	for _, res := range r.Results {
		if got := fmt.Sprintf("%d %d %s %s", res.Allowed, res.Denied, res.RetryAfter, res.Timeline); got != want[res.ID] {
			t.Errorf("%s: %s, want %s", res.ID, got, want[res.ID])
		}
		sum := 0
		for i := range res.BinAllowed {
			sum += res.BinAllowed[i] + res.BinDenied[i]
		}
		if sum != 10 {
			t.Errorf("%s: the bins hold %d answers, want 10", res.ID, sum)
		}
	}
	if r.Arrivals != 10 || !strings.Contains(r.Description, "boundary") || len(r.Counts) > maxBins {
		t.Errorf("arrivals %d, %d bins, description %q", r.Arrivals, len(r.Counts), r.Description)
	}
}

// The same Poisson stream twice gives the same answer; a pasted list is
// sorted and replayed.
func TestSimulatePatterns(t *testing.T) {
	s, _ := newServer(t, Settings{})
	h := s.AdminHandler(AdminOptions{UI: true})
	poisson := simBody(`"gcra","sliding_counter","leaky_queue"`, `{"rate":10,"period":"1s","burst":5}`, `{"kind":"poisson","rate":20,"duration":"30s","seed":42}`)
	_, _, a := adminDo(t, h, "POST", "/v1/simulate", poisson, nil)
	_, _, b := adminDo(t, h, "POST", "/v1/simulate", poisson, nil)
	if a != b || !strings.Contains(a, `"results"`) {
		t.Errorf("two runs of one Poisson stream differ, or failed: %.200s", a)
	}
	var r simResponse
	code, _, body := adminDo(t, h, "POST", "/v1/simulate",
		simBody(`"fixed_window"`, `{"rate":2,"period":"1s"}`, `{"kind":"list","times":"1.5s, 0\n0.5s 999 1000ms"}`), &r)
	if code != http.StatusOK || r.Results[0].Timeline != "##.|##" || r.Arrivals != 5 {
		t.Errorf("list: %d %s", code, body)
	}
}

// Input out of bounds is a 400 that names the bound, never a panic.
func TestSimulateBounds(t *testing.T) {
	s, _ := newServer(t, Settings{})
	h := s.AdminHandler(AdminOptions{UI: true})
	lim := `{"rate":5,"period":"1s"}`
	boundary := `{"kind":"scenario","scenario":"boundary"}`
	many := strings.Repeat("1 ", MaxSimArrivals+1)
	for _, tt := range []struct{ body, want string }{
		{simBody(``, lim, boundary), "at least one"},
		{simBody(`"gcra","token_bucket","fixed_window","sliding_log"`, lim, boundary), "at most 3"},
		{simBody(`"gcra","gcra"`, lim, boundary), "already chosen"},
		{simBody(`"magic"`, lim, boundary), `unknown algorithm \"magic\"`},
		{simBody(`"sliding_log"`, `{"rate":1000000,"period":"1s"}`, boundary), "MiB"},
		{simBody(`"gcra"`, `{"rate":0,"period":"1s"}`, boundary), "limit.rate"},
		{simBody(`"gcra"`, `{"rate":5,"period":"-1s"}`, boundary), "limit.period"},
		{simBody(`"gcra"`, `{"rate":5,"period":"soon"}`, boundary), "limit.period"},
		{simBody(`"gcra"`, `{"rate":5,"period":"1s","burst":-1}`, boundary), "limit"},
		{simBody(`"gcra"`, `{"rate":60000,"period":"1s"}`, boundary), "at most 100000"},
		{simBody(`"token_bucket"`, `{"rate":4611686018427387904,"period":"1s"}`, `{"kind":"scenario","scenario":"burst"}`), "at most 100000"},
		{simBody(`"token_bucket"`, `{"rate":4611686018427387904,"period":"1s"}`, `{"kind":"scenario","scenario":"steady"}`), "at most 100000"},
		{simBody(`"gcra"`, lim, `{"kind":"scenario","scenario":"surge"}`), "unknown scenario"},
		{simBody(`"gcra"`, lim, `{"kind":"poisson","rate":1000,"duration":"1h","seed":1}`), "more than 100000"},
		{simBody(`"gcra"`, lim, `{"kind":"poisson","rate":-1,"duration":"1s"}`), "rate"},
		{simBody(`"gcra"`, lim, `{"kind":"list","times":"0 1s abc"}`), `arrival 3, \"abc\"`},
		{simBody(`"gcra"`, lim, `{"kind":"list","times":"-5ms"}`), "arrival 1"},
		{simBody(`"gcra"`, lim, `{"kind":"list","times":" "}`), "empty"},
		{simBody(`"gcra"`, lim, `{"kind":"list","times":"`+many+`"}`), "at most 100000"},
		{simBody(`"gcra"`, lim, `{"kind":"wave"}`), "pattern.kind"},
		{`{"algorithms":["gcra"],"limit":` + lim + `,"pattern":` + boundary + `,"extra":1}`, "unknown field"},
		{`not json`, "malformed JSON"},
	} {
		code, _, body := adminDo(t, h, "POST", "/v1/simulate", tt.body, nil)
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) || !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("simulate %.100s: %d %s, want 400 with %q", tt.body, code, body, tt.want)
		}
	}
	// 100,000 arrivals is within bounds.
	code, _, body := adminDo(t, h, "POST", "/v1/simulate", simBody(`"sliding_log","gcra","leaky_queue"`, `{"rate":50000,"period":"1s"}`, boundary), nil)
	if code != http.StatusOK {
		t.Errorf("100000 arrivals: %d %.200s", code, body)
	}
}

func FuzzSimulate(f *testing.F) {
	f.Add(`"gcra"`, int64(5), "1s", int64(0), "0 1 2 3s")
	f.Add(`"sliding_log","fixed_window"`, int64(3), "10ms", int64(2), "1e3, 5ms")
	s, _ := newServer(f, Settings{})
	h := s.AdminHandler(AdminOptions{UI: true})
	f.Fuzz(func(t *testing.T, algs string, rate int64, period string, burst int64, times string) {
		body := fmt.Sprintf(`{"algorithms":[%s],"limit":{"rate":%d,"period":%q,"burst":%d},"pattern":{"kind":"list","times":%q}}`, algs, rate, period, burst, times)
		code, _, _ := adminDo(t, h, "POST", "/v1/simulate", body, nil)
		if code != http.StatusOK && code != http.StatusBadRequest && code != http.StatusServiceUnavailable {
			t.Errorf("simulate %s: %d", body, code)
		}
	})
}

package httpclient

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 7 ", 7 * time.Second, true},
		{"0", 0, true},
		{"007", 7 * time.Second, true},
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", sluice.Never, true}, // seconds that overflow a Duration
		{"99999999999999999999999", sluice.Never, true},
		{"Tue, 01 Jan 2030 00:00:09 GMT", 9 * time.Second, true},
		{"Mon, 31 Dec 2029 23:59:00 GMT", 0, true},
		{"Tuesday, 01-Jan-30 00:00:03 GMT", 3 * time.Second, true},
		{"Tue Jan  1 00:00:04 2030", 4 * time.Second, true},
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
		{"\x00", 0, false},
		{"1 2", 0, false},
		{"Tue, 01 Jan 2030 00:00:09 PST", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := parseRetryAfter(tc.in, now)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzFields: no header value panics or makes a negative wait.
func FuzzFields(f *testing.F) {
	f.Add(`"a";r=0;t=5, b;r=1`)
	f.Add(`"\`)
	f.Add("Tue, 01 Jan 2030 00:00:09 GMT")
	f.Add("18446744073709551616")
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d, ok := parseRetryAfter(v, now); d < 0 || !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, %v", v, d, ok)
		}
		if d, ok := quotaSpent([]string{v}); d < 0 || !ok && d != 0 {
			t.Fatalf("quotaSpent(%q) = %v, %v", v, d, ok)
		}
	})
}

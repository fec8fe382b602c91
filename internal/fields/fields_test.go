package fields

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestString(t *testing.T) {
	tests := []struct {
		in, want string // want "" for an error
	}{
		{"per-ip", `"per-ip"`},
		{"", `""`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{" ~!", `" ~!"`},
		{"caf\u00e9", ""},
		{"a\tb", ""},
		{"a\nb", ""},
		{"a\x7f", ""},
	}
	for _, tt := range tests {
		got, err := String(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("String(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("String(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Second - 1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{90 * time.Minute, 5400},
		{sluice.Never, math.MaxInt64/int64(time.Second) + 1},
	}
	for _, tt := range tests {
		if got := Seconds(tt.d); got != tt.want {
			t.Errorf("Seconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestRefillSeconds(t *testing.T) {
	tests := []struct {
		q, rate int64
		period  time.Duration
		want    int64
	}{
		{100, 100, time.Minute, 60},
		{100, 10, time.Second, 10},
		{2, 3, 10 * time.Second, 7},
		{1, 1000, time.Second, 1}, // at least 1
		{5, 0, time.Second, 0},    // never refills
		{math.MaxInt64, 1, time.Duration(math.MaxInt64), MaxInteger},
	}
	for _, tt := range tests {
		if got := refillSeconds(tt.q, tt.rate, tt.period); got != tt.want {
			t.Errorf("refillSeconds(%d, %d, %v) = %d, want %d", tt.q, tt.rate, tt.period, got, tt.want)
		}
	}
}

// The window of a bucket is the time to refill its burst, so that q/w is
// the sustained rate; that of a window algorithm is its Period.
func TestPolicy(t *testing.T) {
	tests := []struct {
		rule sluice.Rule
		want string
	}{
		{sluice.Rule{Name: "ip", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerMinute(100)}, `"ip";q=100;w=60`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerMinute(100)}, `"r";q=100;w=60`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: 10, Period: 90 * time.Second, Burst: 50}}, `"r";q=10;w=90`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.Limit{Rate: 5, Period: 1500 * time.Millisecond}}, `"r";q=5;w=2`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.Limit{Rate: 5, Period: time.Millisecond}}, `"r";q=5;w=1`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoSlidingCounter, Limit: sluice.Limit{Rate: 5, Period: time.Millisecond, Burst: 50}}, `"r";q=5;w=1`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerMinute(100)}, `"r";q=100;w=60`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.Limit{Rate: 10, Period: time.Second, Burst: 50}}, `"r";q=50;w=5`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.Limit{Rate: 3, Period: 10 * time.Second, Burst: 2}}, `"r";q=2;w=7`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 10, Period: time.Second, Burst: 100}}, `"r";q=100;w=10`},
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoLeakyBucket, Limit: sluice.Limit{Rate: 3, Period: time.Second, Burst: 1}}, `"r";q=1;w=1`},
		// Never refills: no w.
		{sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.Limit{Rate: 0, Period: time.Second, Burst: 5}}, `"r";q=5`},
		{sluice.Rule{Name: "never refills", Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Period: time.Second, Burst: 3}}, `"never refills";q=3`},
		// Beyond RFC 8941's 15 digits, clamped so the field parses.
		{sluice.Rule{Name: "huge", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.Limit{Rate: math.MaxInt64, Period: time.Duration(math.MaxInt64)}}, `"huge";q=999999999999999;w=9223372037`},
		{sluice.Rule{Name: `q"\`, Algorithm: sluice.AlgoGCRA, Limit: sluice.Limit{Rate: 1, Period: 1 << 62, Burst: 1 << 62}}, `"q\"\\";q=999999999999999;w=999999999999999`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/%v", tt.rule.Name, tt.rule.Algorithm, tt.rule.Limit), func(t *testing.T) {
			name, member, err := Policy(&tt.rule)
			if err != nil || member != tt.want {
				t.Fatalf("Policy = %q, %q, %v; want member %q", name, member, err, tt.want)
			}
			if want, _ := String(tt.rule.Name); name != want {
				t.Fatalf("Policy name = %q, want %q", name, want)
			}
		})
	}
	if _, _, err := Policy(&sluice.Rule{Name: "tab\there"}); err == nil {
		t.Fatal("a name with a tab: no error")
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		d    sluice.Decision
		want int64
	}{
		{sluice.Decision{Allowed: true}, -1},
		{sluice.Decision{Allowed: true, RetryAfter: time.Second}, -1},
		{sluice.Decision{RetryAfter: sluice.Never}, -1},
		{sluice.Decision{RetryAfter: 0}, 0},
		{sluice.Decision{RetryAfter: time.Nanosecond}, 1},
		{sluice.Decision{RetryAfter: 20 * time.Second}, 20},
		{sluice.Decision{RetryAfter: 20*time.Second + 1}, 21},
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.d); got != tt.want {
			t.Errorf("RetryAfter(%+v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestAppendLimit(t *testing.T) {
	tests := []struct {
		name  string
		list  string
		d     sluice.Decision
		retry int64
		want  string
	}{
		{"allowed", "", sluice.Decision{Allowed: true, Remaining: 2, ResetAfter: 20 * time.Second}, -1, `"a";r=2;t=20`},
		{"t rounded up", "", sluice.Decision{Allowed: true, Remaining: 0, ResetAfter: 59*time.Second + 1}, -1, `"a";r=0;t=60`},
		{"idle", "", sluice.Decision{Allowed: true, Remaining: 5}, -1, `"a";r=5;t=0`},
		{"never idle: no t", "", sluice.Decision{Allowed: true, Remaining: 1, ResetAfter: sluice.Never}, -1, `"a";r=1`},
		{"t capped at retry", "", sluice.Decision{Remaining: 0, ResetAfter: 60 * time.Second}, 20, `"a";r=0;t=20`},
		{"t under retry kept", "", sluice.Decision{Remaining: 3, ResetAfter: 5 * time.Second}, 20, `"a";r=3;t=5`},
		{"never idle, capped at retry", "", sluice.Decision{Remaining: 0, ResetAfter: sluice.Never}, 7, `"a";r=0;t=7`},
		{"r clamped", "", sluice.Decision{Allowed: true, Remaining: math.MaxInt64, ResetAfter: time.Second}, -1, `"a";r=999999999999999;t=1`},
		{"longest finite wait", "", sluice.Decision{Allowed: true, ResetAfter: sluice.Never - 1}, -1, `"a";r=0;t=9223372037`},
		{"second member", `"x";r=1`, sluice.Decision{Allowed: true, Remaining: 2, ResetAfter: time.Second}, -1, `"x";r=1, "a";r=2;t=1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendLimit([]byte(tt.list), `"a"`, tt.d, tt.retry)
			if string(got) != tt.want {
				t.Fatalf("AppendLimit(%q, %+v, retry %d) = %q, want %q", tt.list, tt.d, tt.retry, got, tt.want)
			}
		})
	}
}

func TestAppend(t *testing.T) {
	var b []byte
	for _, m := range []string{`"a";q=1`, `"b";q=2;w=3`} {
		b = Append(b, m)
	}
	if want := `"a";q=1, "b";q=2;w=3`; string(b) != want {
		t.Fatalf("Append = %q, want %q", b, want)
	}
}

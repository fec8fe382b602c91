package sluice

import (
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestLimitConstructors(t *testing.T) {
	for _, tt := range []struct {
		got, want Limit
	}{
		{PerSecond(10), Limit{Rate: 10, Period: time.Second}},
		{PerMinute(7), Limit{Rate: 7, Period: time.Minute}},
		{PerHour(1000), Limit{Rate: 1000, Period: time.Hour}},
		{PerDay(1), Limit{Rate: 1, Period: 24 * time.Hour}},
	} {
		if tt.got != tt.want {
			t.Errorf("got %+v, want %+v", tt.got, tt.want)
		}
	}
	for _, tt := range []struct {
		l        Limit
		capacity int64
		s        string
	}{
		{PerSecond(10), 10, "10/1s"},
		{Limit{Rate: 3, Period: time.Minute, Burst: 20}, 20, "3/1m0s burst 20"},
		{Limit{Rate: 0, Period: time.Second, Burst: 2}, 2, "0/1s burst 2"},
	} {
		if got := tt.l.Capacity(); got != tt.capacity {
			t.Errorf("%+v.Capacity() = %d, want %d", tt.l, got, tt.capacity)
		}
		if got := tt.l.String(); got != tt.s {
			t.Errorf("%+v.String() = %q, want %q", tt.l, got, tt.s)
		}
	}
}

var invalidLimits = []Limit{
	{},
	{Rate: 5},
	{Rate: 5, Period: -time.Second},
	{Rate: 5, Period: math.MinInt64},
	{Rate: -1, Period: time.Second},
	{Rate: math.MinInt64, Period: time.Second},
	{Rate: 5, Period: time.Second, Burst: -1},
	{Rate: 5, Period: time.Second, Burst: math.MinInt64},
	{Rate: -5, Period: -time.Second, Burst: -5},
}

func TestValidate(t *testing.T) {
	for _, l := range invalidLimits {
		err := l.Validate()
		if !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v.Validate() = %v, want an error wrapping ErrInvalidLimit", l, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "sluice: ") {
			t.Errorf("%+v.Validate() = %q, want it prefixed with the package name", l, err)
		}
	}
	for _, l := range []Limit{
		PerSecond(0), PerSecond(1), {Rate: 0, Period: 1, Burst: 0},
		{Rate: math.MaxInt64, Period: math.MaxInt64, Burst: math.MaxInt64},
	} {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v, want nil", l, err)
		}
	}
}

// constructors are all of the package's constructors, each returning
// whether the value it gave back is nil.
var constructors = []struct {
	name string
	new  func(Limit) (any, error)
}{
	{"NewTokenBucket", func(l Limit) (any, error) { return NewTokenBucket(l) }},
	{"NewLeakyBucket", func(l Limit) (any, error) { return NewLeakyBucket(l) }},
	{"NewGCRA", func(l Limit) (any, error) { return NewGCRA(l) }},
	{"NewFixedWindow", func(l Limit) (any, error) { return NewFixedWindow(l) }},
	{"NewSlidingLog", func(l Limit) (any, error) { return NewSlidingLog(l) }},
	{"NewSlidingCounter", func(l Limit) (any, error) { return NewSlidingCounter(l) }},
	{"NewLeakyQueue", func(l Limit) (any, error) { return NewLeakyQueue(l) }},
}

func isNil(x any) bool { return x == nil || reflect.ValueOf(x).IsNil() }

func TestConstructorsRejectInvalidLimits(t *testing.T) {
	for _, c := range constructors {
		for _, l := range invalidLimits {
			x, err := c.new(l)
			if !errors.Is(err, ErrInvalidLimit) || !isNil(x) {
				t.Errorf("%s(%+v) = %v, %v; want nil and an error wrapping ErrInvalidLimit", c.name, l, x, err)
			}
		}
	}
}

// TestExtremeLimits: limits at the edges of what the package keeps
// exactly either work, exactly as their models say, or are refused with
// ErrLimitTooLarge; none panics.
func TestExtremeLimits(t *testing.T) {
	year := 365 * 24 * time.Hour
	for _, tt := range []struct {
		l        Limit
		tooLarge []string // constructors that refuse l
	}{
		{Limit{Rate: 1, Period: year}, nil},
		{Limit{Rate: 1, Period: year, Burst: 100}, nil},
		{Limit{Rate: 1_000_000_000, Period: year}, []string{"NewSlidingLog"}},
		{PerSecond(1_000_000_000_000), []string{"NewSlidingLog"}},
		{Limit{Rate: 1_000_000_000_000, Period: time.Second, Burst: 1}, []string{"NewSlidingLog"}},
		{Limit{Rate: 1, Period: time.Second, Burst: 4611686018}, nil},                                                                     // 2^62 ticks of 1ns, rounded down to a second
		{Limit{Rate: 1, Period: time.Second, Burst: 4611686019}, nil},                                                                     // one more: decided at 1µs
		{Limit{Rate: 1, Period: time.Second, Burst: 1<<62 + 1}, []string{"NewTokenBucket", "NewLeakyBucket", "NewGCRA", "NewLeakyQueue"}}, // past 2^62 even at 1s
		{Limit{Rate: 1, Period: 1 << 62}, nil},
		{Limit{Rate: 1, Period: 1<<62 + 1}, nil},                                                                          // decided at 1µs
		{Limit{Rate: 1, Period: math.MaxInt64}, []string{"NewTokenBucket", "NewLeakyBucket", "NewGCRA", "NewLeakyQueue"}}, // shares no factor with a quantum
		{Limit{Rate: 99991, Period: 24 * time.Hour}, nil},
		{Limit{Rate: 1000003, Period: year}, nil},
		{Limit{Rate: math.MaxInt64, Period: 1, Burst: 1}, []string{"NewSlidingLog"}},
		{Limit{Rate: math.MaxInt64, Period: math.MaxInt64}, []string{"NewTokenBucket", "NewLeakyBucket", "NewGCRA", "NewLeakyQueue", "NewSlidingLog"}},
		{Limit{Rate: 0, Period: 1}, nil},
	} {
		for _, c := range constructors {
			x, err := c.new(tt.l)
			if want := contains(tt.tooLarge, c.name); want != errors.Is(err, ErrLimitTooLarge) || (err != nil) != want || isNil(x) != want {
				t.Errorf("%s(%v) = %v, %v; want ErrLimitTooLarge: %v", c.name, tt.l, x, err, want)
			}
		}
		for _, a := range algorithms {
			x, err := a.new(tt.l)
			if err != nil {
				continue
			}
			m := newModel(a.kind, tt.l)
			c := a.capacity(tt.l)
			now := t0
			for _, s := range []struct {
				dt time.Duration
				n  int64
			}{{0, c}, {0, 1}, {0, 0}, {1, 1}, {time.Second, 1}, {tt.l.Period / 3, 2}, {tt.l.Period, c}, {tt.l.Period - 1, 1}, {1, 1}} {
				if now.Add(s.dt).After(time.Unix(0, math.MaxInt64)) {
					break // past 2262, a time has no Unix nanoseconds
				}
				now = now.Add(s.dt)
				got := x.AllowN(now, s.n)
				if a.kind == bucketKind && now.Sub(t0).Nanoseconds() > horizon(tt.l)/2 {
					// MaxInt64 per ns: 2^62/q is under a nanosecond, and
					// the ticks wrap. Only the invariants hold.
					if got.Remaining < 0 || got.Remaining > c || got.RetryAfter < 0 || got.ResetAfter < 0 {
						t.Errorf("%s %v: AllowN(t0+%v, %d) = %+v", a.name, tt.l, now.Sub(t0), s.n, got)
					}
					continue
				}
				if want := m.allowN(now.UnixNano(), s.n); got != want {
					t.Errorf("%s %v: AllowN(t0+%v, %d) = %+v, want %+v", a.name, tt.l, now.Sub(t0), s.n, got, want)
				}
			}
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestExtremeLimitSteps spells out the extremes the tables above check
// against the models: a year's wait, and a picosecond's rounded up to 1ns.
func TestExtremeLimitSteps(t *testing.T) {
	year := 365 * 24 * time.Hour
	runTables(t, algorithmsOf(bucketKind), []stepTable{
		{
			name:  "1 per year",
			limit: Limit{Rate: 1, Period: year},
			steps: steps(
				one(0, 1, allow(1, 0, year)),
				one(0, 1, deny(1, 0, year, year)),
				one(year-1, 1, deny(1, 0, 1, 1)),
				one(year, 1, allow(1, 0, year)),
			),
		},
		{
			name:  "10^12 per second",
			limit: PerSecond(1_000_000_000_000),
			steps: steps(
				one(0, 1_000_000_000_000, allow(1_000_000_000_000, 0, time.Second)),
				one(0, 1, deny(1_000_000_000_000, 0, 1, time.Second)),
				one(1, 1000, allow(1_000_000_000_000, 0, time.Second)),
				one(1, 1, deny(1_000_000_000_000, 0, 1, time.Second)),
				one(2, 1001, deny(1_000_000_000_000, 1000, 1, time.Second-1)),
				one(time.Second, 1_000_000_000_000, deny(1_000_000_000_000, 999_999_999_000, 1, 1)),
				one(time.Second+1, 1_000_000_000_000, allow(1_000_000_000_000, 0, time.Second)),
			),
		},
	})
}

// TestLimitTooLargeMessage: the error names the package and wraps the
// sentinel.
func TestLimitTooLargeMessage(t *testing.T) {
	_, err := NewTokenBucket(Limit{Rate: 1, Period: time.Second, Burst: math.MaxInt64})
	if !errors.Is(err, ErrLimitTooLarge) || !strings.HasPrefix(err.Error(), "sluice: ") {
		t.Errorf("NewTokenBucket(burst MaxInt64) = %v, want an error prefixed sluice: wrapping ErrLimitTooLarge", err)
	}
}

func TestRuleValidateAllocatesNoLimiter(t *testing.T) {
	r := Rule{Name: "log", Algorithm: AlgoSlidingLog, Limit: PerSecond(1 << 20)}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	// Validate compiles the rule's arithmetic, a few hundred bytes; the
	// log's ring of 2^20 cells is a key's, made only for a key.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		_ = r.Validate()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 4<<10 {
		t.Errorf("Validate of a sliding log of 2^20 allocates %d bytes, want no ring (under 4 KiB)", per)
	}
	for _, bad := range []Rule{
		{Name: "x", Algorithm: AlgoSlidingLog, Limit: PerSecond(1<<20 + 1)},
		{Name: "x", Algorithm: "nope", Limit: PerSecond(1)},
		{Name: "x", Algorithm: AlgoGCRA, Limit: Limit{Rate: 1, Period: 0}},
		{Name: "", Algorithm: AlgoGCRA, Limit: PerSecond(1)},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
}

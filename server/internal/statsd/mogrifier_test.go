package statsd

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"
)

// byDescriptor is the mogrifier of envoyproxy/ratelimit's documentation:
// a limit's statistics under one name, tagged with their domain and
// descriptor.
var byDescriptor = Mogrifier{
	Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`),
	Name:    "ratelimit.service.rate_limit.$3",
	Tags:    []Tag{{"domain", "$1"}, {"descriptor", "$2"}},
}

// TestMogrify: the first mogrifier whose pattern matches renames and tags
// (in the order given); $N past the pattern's groups stays as written; a
// name none matches is left alone.
func TestMogrify(t *testing.T) {
	specific := Mogrifier{
		Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.foo$`),
		Name:    "custom.foo",
		Tags:    []Tag{{"domain", "$1"}, {"missing", "$5"}},
	}
	for _, tc := range []struct {
		ms       []Mogrifier
		in, name string
		tags     []Tag
	}{
		{[]Mogrifier{byDescriptor}, "ratelimit.service.rate_limit.mongo_cps.database_users.within_limit",
			"ratelimit.service.rate_limit.within_limit", []Tag{{"domain", "mongo_cps"}, {"descriptor", "database_users"}}},
		{[]Mogrifier{specific, byDescriptor}, "ratelimit.service.rate_limit.mongo_cps.database_users.foo",
			"custom.foo", []Tag{{"domain", "mongo_cps"}, {"missing", "$5"}}},
		{[]Mogrifier{specific, byDescriptor}, "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits",
			"ratelimit.service.rate_limit.total_hits", []Tag{{"domain", "mongo_cps"}, {"descriptor", "database_users"}}},
		{[]Mogrifier{byDescriptor}, "some.unmatched.metric", "some.unmatched.metric", nil},
		{nil, "ratelimit.service.rate_limit.d.k.total_hits", "ratelimit.service.rate_limit.d.k.total_hits", nil},
		{[]Mogrifier{{Pattern: regexp.MustCompile(`limit`), Name: "$0.$1$x"}}, "rate_limit", "limit.$1$x", []Tag{}},
	} {
		name, tags := mogrify(tc.ms, tc.in)
		if name != tc.name || !slices.Equal(tags, tc.tags) {
			t.Errorf("mogrify(%q) = %q %v, want %q %v", tc.in, name, tags, tc.name, tc.tags)
		}
	}
}

// TestSinkMogrifiers: a DogStatsD's lines carry the mogrified names, the
// Sink's tags first and the mogrifier's after; a name no mogrifier takes
// is sent as it is.
func TestSinkMogrifiers(t *testing.T) {
	for _, tc := range []struct {
		name string
		tags []Tag
		want []string
	}{
		{"with EXTRA_TAGS", []Tag{{"env", "prod"}}, []string{
			"ratelimit.service.rate_limit.total_hits:5|c|#env:prod,domain:d,descriptor:k",
			"ratelimit_server.ShouldRateLimit.response_time:1.5|ms|#env:prod",
		}},
		{"without", nil, []string{
			"ratelimit.service.rate_limit.total_hits:5|c|#domain:d,descriptor:k",
			"ratelimit_server.ShouldRateLimit.response_time:1.5|ms",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, lines := udpLines(t)
			s, err := New(Config{Addr: addr, Dog: true, FlushInterval: time.Hour, Tags: tc.tags, Mogrifiers: []Mogrifier{byDescriptor}})
			if err != nil {
				t.Fatal(err)
			}
			s.Counter("ratelimit.service.rate_limit.d.k.total_hits").Add(5)
			s.Timing("ratelimit_server.ShouldRateLimit.response_time", 1500*time.Microsecond)
			s.Flush(context.Background())
			collect(t, lines, tc.want)
		})
	}
}

func TestNewRefusesMogrifiers(t *testing.T) {
	for _, c := range []Config{
		// Plain statsd has no tags to put them in.
		{Addr: "localhost:8125", FlushInterval: time.Second, Mogrifiers: []Mogrifier{byDescriptor}},
		{Addr: "localhost:8125", Dog: true, FlushInterval: time.Second, Mogrifiers: []Mogrifier{{Name: "x"}}},
		{Addr: "localhost:8125", Dog: true, FlushInterval: time.Second, Mogrifiers: []Mogrifier{{Pattern: byDescriptor.Pattern}}},
		{Addr: "localhost:8125", Dog: true, FlushInterval: time.Second, Mogrifiers: []Mogrifier{{Pattern: byDescriptor.Pattern, Name: "x", Tags: []Tag{{"k", ""}}}}},
		{Addr: "localhost:8125", Dog: true, FlushInterval: time.Second, Mogrifiers: []Mogrifier{{Pattern: byDescriptor.Pattern, Name: "x", Tags: []Tag{{"", "v"}}}}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) = nil error, want one", c)
		}
	}
}

package keys

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// isDigest reports whether k is '#' and 22 base64url characters.
func isDigest(k string) bool {
	if len(k) != 23 || k[0] != '#' {
		return false
	}
	return strings.Trim(k[1:], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
}

func TestBound(t *testing.T) {
	long := strings.Repeat("u", MaxLen+1)
	tests := []struct {
		in, want string // "#" for a digest
	}{
		{"alice", "alice"},
		{"", ""},
		{long[1:], long[1:]}, // at the bound
		{long, "#"},
		{"#abc", "#"}, // a raw value cannot pose as a digest
		{"a#", "a#"},
	}
	for _, tt := range tests {
		got := Bound(tt.in)
		if tt.want == "#" && !isDigest(got) || tt.want != "#" && got != tt.want {
			t.Errorf("Bound(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// Distinct values make distinct digests, and a digest is stable.
	for _, pair := range [][2]string{{long, long + "x"}, {"#abc", "#abd"}, {long, "#" + long}} {
		if Bound(pair[0]) == Bound(pair[1]) {
			t.Errorf("Bound(%q) = Bound(%q)", pair[0], pair[1])
		}
	}
	if Bound(long) != Digest(long) || Digest("x") != Digest("x") {
		t.Error("digests are not stable")
	}
	if d := Digest(strings.Repeat("\xff", 1<<16)); !isDigest(d) {
		t.Errorf("Digest of 64 KiB = %q", d)
	}
}

func TestSecret(t *testing.T) {
	s3cret := Digest("s3cret")
	tests := []struct {
		value  string
		bearer bool
		want   string // "" for no secret
	}{
		{"s3cret", false, s3cret},
		{"  s3cret\t", false, s3cret},
		{"Bearer s3cret", true, s3cret},
		{"bearer   s3cret ", true, s3cret},
		{"BEARER s3cret", true, s3cret},
		{"Bearer s3cret", false, Digest("Bearer s3cret")}, // not Authorization: the whole value
		{"Basic czNjcmV0", true, Digest("Basic czNjcmV0")},
		{"Bearertoken", true, Digest("Bearertoken")},
		{"Bearer\ttoken", true, Digest("Bearer\ttoken")}, // the scheme ends at a space
		{"", false, ""},
		{"  ", false, ""},
		{"", true, ""},
		{"Bearer", true, ""},
		{"Bearer ", true, ""},
		{"bearer \t ", true, ""},
		{" Bearer\t", true, ""},
	}
	for _, tt := range tests {
		got, ok := Secret(tt.value, tt.bearer)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("Secret(%q, %v) = %q, %v; want %q", tt.value, tt.bearer, got, ok, tt.want)
		}
	}
	if k, _ := Secret("Bearer "+strings.Repeat("x", 1<<16), true); !isDigest(k) || strings.Contains(k, "x") {
		t.Errorf("Secret of a long token = %q", k)
	}
}

func join(parts ...string) string {
	var j Joiner
	for _, p := range parts {
		j.Add(p)
	}
	return j.String()
}

func TestJoiner(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a|b"},
		{[]string{"a|b", `c\`}, `a\|b|c\\`},
		{[]string{"", ""}, "|"},
	}
	for _, tt := range tests {
		if got := join(tt.parts...); got != tt.want {
			t.Errorf("join(%q) = %q, want %q", tt.parts, got, tt.want)
		}
	}
}

// Joining is injective: every pair of distinct tuples of short strings
// over the escaping alphabet makes distinct keys.
func TestJoinerInjective(t *testing.T) {
	var strs []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		strs = append(strs, prefix)
		if n == 0 {
			return
		}
		for _, c := range []string{"a", "|", `\`} {
			gen(prefix+c, n-1)
		}
	}
	gen("", 3) // 40 strings
	seen := map[string][2]string{}
	for _, x := range strs {
		for _, y := range strs {
			k := join(x, y)
			if prev, ok := seen[k]; ok {
				t.Fatalf("join(%q, %q) = join(%q, %q) = %q", x, y, prev[0], prev[1], k)
			}
			seen[k] = [2]string{x, y}
		}
	}
}

// FuzzJoiner: distinct tuples never make one key, and nothing panics.
func FuzzJoiner(f *testing.F) {
	f.Add("a|b", "c", "a", "b|c")
	f.Add(`a\`, "|b", `a\|`, "b")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		k1, k2 := join(a, b), join(c, d)
		if (k1 == k2) != (a == c && b == d) {
			t.Fatalf("join(%q, %q) = %q, join(%q, %q) = %q", a, b, k1, c, d, k2)
		}
	})
}

func TestOptional(t *testing.T) {
	noKey, skip, boom := errors.New("no key"), errors.New("skip"), errors.New("boom")
	tests := []struct {
		name     string
		key      string
		err      error
		wantKey  string
		wantErrs []error // all wrapped; nil for no error
		notErr   error   // not wrapped
	}{
		{"a key", "k", nil, "k", nil, nil},
		{"no key is skip", "", noKey, "", []error{skip, noKey}, nil},
		{"wrapped no key is skip", "x", fmt.Errorf("no X-User: %w", noKey), "", []error{skip, noKey}, nil},
		{"other errors stay", "", boom, "", []error{boom}, skip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Optional(tt.key, tt.err, noKey, skip)
			if k != tt.wantKey || (err == nil) != (tt.wantErrs == nil) {
				t.Fatalf("Optional = %q, %v; want %q, %v", k, err, tt.wantKey, tt.wantErrs)
			}
			for _, w := range tt.wantErrs {
				if !errors.Is(err, w) {
					t.Fatalf("Optional: %v does not wrap %v", err, w)
				}
			}
			if tt.notErr != nil && errors.Is(err, tt.notErr) {
				t.Fatalf("Optional: %v wraps %v", err, tt.notErr)
			}
		})
	}
}

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	s := strings.Repeat("x", 64)
	if got := Clip(s); got != s {
		t.Errorf("Clip of 64 bytes = %q", got)
	}
	if got := Clip(s + "y"); got != s+"..." {
		t.Errorf("Clip of 65 bytes = %q", got)
	}
}

func TestAuthorization(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"Bearer T0K", "Bearer T0K"},
		{"bearer T0K", "Bearer T0K"},
		{"BEARER T0K", "Bearer T0K"},
		{"Bearer  T0K", "Bearer T0K"},
		{"  bEaReR   T0K  ", "Bearer T0K"},
		{"Bearer t0k", "Bearer t0k"}, // the token's case counts
		{"basic czNjcmV0", "Basic czNjcmV0"},
		{`Digest username="a",   realm="b"`, `Digest username="a", realm="b"`},
		{"Bearer", "Bearer"},
		{"", ""},
		{"Bearer\tT0K", "Bearer\tt0k"}, // a tab is no separator: all scheme
		{"ÉCU x", "Écu x"},             // only ASCII letters change case
	} {
		if got := Authorization(tt.in); got != tt.want {
			t.Errorf("Authorization(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := Authorization(Authorization(tt.in)); got != Authorization(tt.in) {
			t.Errorf("Authorization(Authorization(%q)) = %q, want it unchanged", tt.in, got)
		}
	}
}

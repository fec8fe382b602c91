package protocol

import "testing"

func TestCanonicalHost(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"api.example.com", "api.example.com"},
		{"API.Example.COM", "api.example.com"},
		{"api.example.com.", "api.example.com"},
		{"api.example.com:443", "api.example.com"},
		{"api.example.com:80", "api.example.com"},
		{"API.example.com.:443", "api.example.com"},
		{"api.example.com:8443", "api.example.com"},
		{"api.example.com:1", "api.example.com"},
		{"api.example.com:zzz", "api.example.com"},
		{"api.example.com:0443", "api.example.com"},
		{"[::1]:443", "[::1]"},
		{"[2001:DB8::1]:8443", "[2001:db8::1]"},
		{"203.0.113.7:80", "203.0.113.7"},
		{"[::1]", "[::1]"},
		{"::1", "[::1]"},
		{"2001:db8::1", "[2001:db8::1]"},
		{"example.com:", "example.com"},
		{"", ""},
	} {
		if got := canonicalHost(tt.in); got != tt.want {
			t.Errorf("canonicalHost(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"API.example.com.:443", "[::1]:8443", "::1", "a:b:c", "[", "]:", ":", "a..", "[a].:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		c := canonicalHost(h)
		if again := canonicalHost(c); again != c {
			t.Fatalf("canonicalHost(%q) = %q, but canonicalHost of that is %q", h, c, again)
		}
	})
}

package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
)

func withHeader(kv ...string) *http.Request {
	r := httptest.NewRequest("GET", "/path", nil)
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

func TestHeader(t *testing.T) {
	long := strings.Repeat("u", httplimit.MaxKeyLen+1)
	tests := []struct {
		name string
		r    *http.Request
		want string // "" for ErrNoKey; "#" for a digest
	}{
		{"value", withHeader("X-User", "alice"), "alice"},
		{"case-insensitive name", withHeader("x-user", "alice"), "alice"},
		{"first of several", withHeader("X-User", "alice", "X-User", "bob"), "alice"},
		{"trimmed", withHeader("X-User", "  alice "), "alice"},
		{"at the bound", withHeader("X-User", long[1:]), long[1:]},
		{"long is hashed", withHeader("X-User", long), "#"},
		{"a raw value cannot pose as a digest", withHeader("X-User", "#abc"), "#"},
		{"missing", withHeader(), ""},
		{"empty", withHeader("X-User", " "), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httplimit.Header("x-USER")(tt.r)
			switch tt.want {
			case "":
				if !errors.Is(err, httplimit.ErrNoKey) {
					t.Fatalf("Header = %q, %v; want ErrNoKey", got, err)
				}
			case "#":
				if err != nil || !isDigest(got) {
					t.Fatalf("Header = %q, %v; want a digest", got, err)
				}
			default:
				if err != nil || got != tt.want {
					t.Fatalf("Header = %q, %v; want %q", got, err, tt.want)
				}
			}
		})
	}
}

// isDigest reports whether k is '#' and 22 base64url characters.
func isDigest(k string) bool {
	if len(k) != 23 || k[0] != '#' {
		return false
	}
	return strings.Trim(k[1:], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
}

// APIKey reads the named header, canonicalised, and keys by its secret
// as package keys does (tested there); a field without a secret is no key.
func TestAPIKey(t *testing.T) {
	key := func(header string, r *http.Request) string {
		t.Helper()
		k, err := httplimit.APIKey(header)(r)
		if err != nil {
			t.Fatalf("APIKey(%q): %v", header, err)
		}
		if !isDigest(k) {
			t.Fatalf("APIKey(%q) = %q, want a digest", header, k)
		}
		return k
	}
	bearer := key("authorization", withHeader("Authorization", "bearer   s3cret"))
	if k := key("X-API-Key", withHeader("X-Api-Key", "s3cret")); k != bearer {
		t.Fatalf("X-API-Key s3cret = %q, Bearer s3cret = %q: want one key for one secret", k, bearer)
	}
	if k := key("X-API-Key", withHeader("X-Api-Key", "Bearer s3cret")); k == bearer {
		t.Fatal("the Bearer scheme is read in a header other than Authorization")
	}
	for _, v := range []string{"", "  ", "Bearer", "Bearer ", "bearer \t"} {
		r := withHeader()
		if v != "" {
			r = withHeader("Authorization", v)
		}
		if k, err := httplimit.APIKey("Authorization")(r); !errors.Is(err, httplimit.ErrNoKey) {
			t.Fatalf("APIKey with Authorization %q = %q, %v; want ErrNoKey", v, k, err)
		}
	}
}

func TestRouteKey(t *testing.T) {
	tests := []struct {
		method, path, pattern, want string
	}{
		{"GET", "/items/1", "GET /items/{id}", "GET /items/{id}"},
		{"HEAD", "/items/1", "GET /items/{id}", "GET /items/{id}"}, // served as the GET
		{"POST", "/x", "/x", "POST /x"},
		{"HEAD", "/x", "/x", "HEAD /x"},
		{"M1", "/x", "/x", "OTHER /x"}, // a method a client made up
		{"get", "/x", "/x", "OTHER /x"},
		{"BREW", "/a/b", "", "OTHER /a/b"},
		{"GET", "/x", "example.com/x", "GET example.com/x"},
		{"GET", "/x", "GET  \texample.com/x", "GET example.com/x"},
		{"GET", "/a/b", "", "GET /a/b"},
		{"GET", "/" + strings.Repeat("p", 100), "", "#"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" "+tt.pattern, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.path, nil)
			r.Pattern = tt.pattern
			got, err := httplimit.Route()(r)
			if err != nil || (got != tt.want && !(tt.want == "#" && isDigest(got))) {
				t.Fatalf("Route = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// Join escapes and joins its parts as package keys does (tested there).
func TestJoin(t *testing.T) {
	r := withHeader("X-Tenant", "acme|eu")
	for _, tt := range []struct {
		key  httplimit.KeyFunc
		want string
	}{
		{httplimit.Join(httplimit.Const("a"), httplimit.Const("b")), "a|b"},
		{httplimit.Join(httplimit.Header("X-Tenant"), httplimit.Const(`c\`)), `acme\|eu|c\\`},
		{httplimit.Join(), ""},
	} {
		if k, err := tt.key(r); err != nil || k != tt.want {
			t.Fatalf("Join = %q, %v; want %q", k, err, tt.want)
		}
	}
}

func TestJoinErrors(t *testing.T) {
	r := withHeader("X-User", "alice")
	if _, err := httplimit.Join(httplimit.Header("X-User"), httplimit.Header("X-Org"))(r); !errors.Is(err, httplimit.ErrNoKey) {
		t.Fatalf("Join with a missing part: %v, want ErrNoKey", err)
	}
	if _, err := httplimit.Join(httplimit.Header("X-User"), nil)(r); err == nil {
		t.Fatal("Join with a nil part: no error")
	}
	opt := httplimit.Optional(httplimit.Join(httplimit.Header("X-User"), httplimit.Header("X-Org")))
	if _, err := opt(r); !errors.Is(err, httplimit.ErrSkip) || !errors.Is(err, httplimit.ErrNoKey) {
		t.Fatalf("Optional(Join) with a missing part: %v, want ErrSkip wrapping ErrNoKey", err)
	}
	boom := errors.New("boom")
	failing := httplimit.KeyFunc(func(*http.Request) (string, error) { return "", boom })
	if _, err := httplimit.Optional(failing)(r); !errors.Is(err, boom) || errors.Is(err, httplimit.ErrSkip) {
		t.Fatalf("Optional passes other errors as they are: %v", err)
	}
	if _, err := httplimit.Optional(nil)(r); err == nil {
		t.Fatal("Optional(nil): no error")
	}
}

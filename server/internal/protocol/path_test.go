package protocol

import (
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/login", "/login"},
		{"", "/"},
		{"/", "/"},
		{"login", "/login"},
		{"//login", "/login"},
		{"/a//b///c", "/a/b/c"},
		{"/./login", "/login"},
		{"/x/../login", "/login"},
		{"/../../login", "/login"},
		{"/a/b/../../../login", "/login"},
		{"/login/", "/login"},
		{"/login/.", "/login"},
		{"/login;jsessionid=ab", "/login"},
		{"/..;/login", "/login"},
		{"/a;x/b;y", "/a/b"},
		{"/%6Cogin", "/login"},
		{"/%2E%2E/login", "/login"},
		{"/%2e/login", "/login"},
		{"/%7Euser", "/~user"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a%2fb", "/a%2Fb"},
		{"/a%20b", "/a%20b"},
		{"/100%", "/100%25"},
		{"/%zz", "/%25zz"},
		{"/%4", "/%254"},
		{"%%370", "/%2570"},
		{"/login#frag", "/login"},
		{"http://evil.example/login", "/login"},
		{"HTTPS://evil.example", "/"},
		{"/a/http://b/c", "/a/http:/b/c"},
		{"/LOGIN", "/LOGIN"},
		{"/login.", "/login"},
		{"/login...", "/login"},
		{"/login%2e", "/login"},
		{"/login%2E.", "/login"},
		{"/a./b../c", "/a/b/c"},
		{"/.../login", "/login"},
		{"/login.json", "/login.json"},
		{`/login\`, "/login"},
		{`\login`, "/login"},
		{`/a\..\login`, "/login"},
		{"/login%5C", "/login"},
		{"/login%5c", "/login"},
		{"/a%5Cb", "/a/b"},
		{"/a%255Cb", "/a%255Cb"},
	} {
		if got := cleanPath(tt.in); got != tt.want {
			t.Errorf("cleanPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/a/../b", "//x", "/%2e%2E/", "/a;b/c", "http://h/p", "%%370"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c := cleanPath(p)
		if !strings.HasPrefix(c, "/") || strings.Contains(c, "//") || (len(c) > 1 && strings.HasSuffix(c, "/")) {
			t.Fatalf("cleanPath(%q) = %q: not one clean spelling", p, c)
		}
		for seg := range strings.SplitSeq(c, "/") {
			if seg == "." || seg == ".." || strings.Contains(seg, ";") || strings.HasSuffix(seg, ".") {
				t.Fatalf("cleanPath(%q) = %q holds segment %q", p, c, seg)
			}
		}
		if strings.Contains(c, `\`) || strings.Contains(c, "%5C") {
			t.Fatalf("cleanPath(%q) = %q holds a backslash", p, c)
		}
		if again := cleanPath(c); again != c {
			t.Fatalf("cleanPath(%q) = %q, but cleanPath of that is %q", p, c, again)
		}
		f := foldPath(c)
		if cleanPath(f) != f || foldPath(f) != f || strings.ToLower(f) != strings.ToLower(c) {
			t.Fatalf("foldPath(%q) = %q: not a clean path in one case", c, f)
		}
		for i := 0; i < len(f); i++ {
			if f[i] == '%' && strings.ToUpper(f[i:i+3]) != f[i:i+3] {
				t.Fatalf("foldPath(%q) = %q: escape %q not upper case", c, f, f[i:i+3])
			}
		}
	})
}

func TestFoldPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/LOGIN", "/login"},
		{"/Login/Step2", "/login/step2"},
		{"/a%2Fb", "/a%2Fb"},
		{"/A%2FB%20C", "/a%2Fb%20c"},
		{"/%C3%89T%C3%89", "/%C3%89t%C3%89"}, // ASCII letters only
	} {
		if got := foldPath(tt.in); got != tt.want {
			t.Errorf("foldPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

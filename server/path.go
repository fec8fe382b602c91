package server

import "strings"

// cleanPath is the path forward auth matches a request by: one spelling
// for each path the application behind the proxy may serve as one, so
// that a client cannot leave a limit on /login by writing it another way.
// p is a request target's path, as sent (percent-encoded), without the
// query. It is, in order:
//
//   - stripped of a scheme and authority ("http://host/login" is
//     "/login") and of a fragment;
//   - percent-decoded where the escape stands for an unreserved
//     character (RFC 3986: letters, digits, "-", ".", "_", "~"); other
//     escapes stay, in upper case, so "%2F" is never a separator, and a
//     '%' that begins no escape becomes "%25";
//   - cut at each segment's path parameters (";jsessionid=…"), which
//     servers such as Tomcat drop: "/login;x=1" is "/login";
//   - rid of empty segments ("//login" is "/login") and of "." and ".."
//     segments (RFC 3986 §5.2.4), never climbing above the root;
//   - without a trailing slash: "/login/" is "/login".
//
// This is Envoy's normalize_path and merge_slashes, plus the last two
// steps: each can only put more requests under a limit. Case is kept:
// paths are case-sensitive by RFC 3986, so an application that serves
// /LOGIN as /login needs its limit written for both, or a wildcard.
func cleanPath(p string) string {
	if i := strings.Index(p, "://"); i > 0 && !strings.Contains(p[:i], "/") {
		p = p[i+3:]
		if j := strings.IndexByte(p, '/'); j >= 0 {
			p = p[j:]
		} else {
			p = ""
		}
	}
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	p = decodeUnreserved(p)
	out := make([]string, 0, 8)
	for seg := range strings.SplitSeq(p, "/") {
		seg, _, _ = strings.Cut(seg, ";")
		switch seg {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/")
}

// decodeUnreserved decodes the percent-escapes of unreserved characters
// and writes the others in upper case; a '%' that begins no escape is
// written "%25".
func decodeUnreserved(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			// A '%' that begins no escape is one itself, so that what
			// follows can never be read as an escape on a second pass.
			b.WriteString("%25")
			continue
		}
		v := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(v) {
			b.WriteByte(v)
		} else {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(p[i+1 : i+3]))
		}
		i += 2
	}
	return b.String()
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

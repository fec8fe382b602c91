package protocol

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
//   - with each backslash, and each "%5C", a '/': IIS and ASP.NET
//     take "\" for a separator;
//   - cut at each segment's path parameters (";jsessionid=…"), which
//     servers such as Tomcat drop: "/login;x=1" is "/login";
//   - rid of empty segments ("//login" is "/login") and of "." and ".."
//     segments (RFC 3986 §5.2.4), never climbing above the root;
//   - rid of each segment's trailing dots, which Windows file names
//     drop, and so IIS: "/login." is "/login";
//   - without a trailing slash: "/login/" is "/login".
//
// This is Envoy's normalize_path and merge_slashes, plus the rest: each
// can only put more requests under a limit. Case is kept: paths are
// case-sensitive by RFC 3986; for an application that routes /LOGIN as
// /login, a forward_auth entry asks for path_match: case_insensitive
// (foldPath).
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
	p = strings.ReplaceAll(decodeUnreserved(p), `\`, "/")
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
			if seg = strings.TrimRight(seg, "."); seg != "" {
				out = append(out, seg)
			}
		}
	}
	return "/" + strings.Join(out, "/")
}

// foldPath is a path cleanPath returned with its ASCII letters in lower
// case, but for the hex digits of its escapes, which stay upper case:
// the path as an application that routes without regard to case sees it
// (IIS and ASP.NET; Express and Koa routers, case-insensitive by
// default; Spring with its matching so configured).
func foldPath(p string) string {
	var b []byte // a copy, made at the first letter to change
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%':
			i += 2 // cleanPath leaves only whole escapes
		case 'A' <= c && c <= 'Z':
			if b == nil {
				b = []byte(p)
			}
			b[i] = c + 'a' - 'A'
		}
	}
	if b == nil {
		return p
	}
	return string(b)
}

// decodeUnreserved decodes the percent-escapes of unreserved characters
// and of the backslash, and writes the others in upper case; a '%' that
// begins no escape is written "%25".
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
		if isUnreserved(v) || v == '\\' {
			b.WriteByte(v) // a backslash, to be a separator
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

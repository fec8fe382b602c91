package httplimit_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A strict parser of RFC 8941 Lists (§4.2), enough to hold the RateLimit
// fields to the syntax: Items with Parameters; Inner Lists are refused, as
// these fields never use them. Parameters are kept in order, duplicates
// included, so that a test can refuse those too.

type sfToken string

type sfParam struct {
	key string
	val any // int64, float64, string, sfToken, []byte, bool
}

type sfItem struct {
	val    any
	params []sfParam
}

func (it sfItem) param(k string) (any, bool) {
	for _, p := range it.params {
		if p.key == k {
			return p.val, true
		}
	}
	return nil, false
}

type sfParser struct{ s string }

var errSF = errors.New("sf")

func (p *sfParser) fail(format string, a ...any) error {
	return fmt.Errorf("%w: %s at %q", errSF, fmt.Sprintf(format, a...), p.s)
}

// parseSFList parses a field value as a List.
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: strings.TrimLeft(s, " ")}
	p.s = strings.TrimRight(p.s, " ")
	var list []sfItem
	for p.s != "" {
		if p.s[0] == '(' {
			return nil, p.fail("inner list")
		}
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		list = append(list, it)
		p.s = strings.TrimLeft(p.s, " \t")
		if p.s == "" {
			return list, nil
		}
		if p.s[0] != ',' {
			return nil, p.fail("want ','")
		}
		p.s = strings.TrimLeft(p.s[1:], " \t")
		if p.s == "" {
			return nil, p.fail("trailing comma")
		}
	}
	return list, nil
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{val: v}
	for p.s != "" && p.s[0] == ';' {
		p.s = strings.TrimLeft(p.s[1:], " ")
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if p.s != "" && p.s[0] == '=' {
			p.s = p.s[1:]
			if pv, err = p.bare(); err != nil {
				return sfItem{}, err
			}
		}
		it.params = append(it.params, sfParam{k, pv})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	if p.s == "" || !(isLCAlpha(p.s[0]) || p.s[0] == '*') {
		return "", p.fail("bad key")
	}
	i := 1
	for i < len(p.s) && (isLCAlpha(p.s[i]) || isDigit(p.s[i]) || strings.IndexByte("_-.*", p.s[i]) >= 0) {
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k, nil
}

func (p *sfParser) bare() (any, error) {
	if p.s == "" {
		return nil, p.fail("empty item")
	}
	switch c := p.s[0]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	}
	return nil, p.fail("bad item")
}

func (p *sfParser) number() (any, error) {
	i := 0
	if p.s[0] == '-' {
		i++
	}
	start, dot := i, -1
	for ; i < len(p.s); i++ {
		c := p.s[i]
		if c == '.' && dot < 0 {
			if i-start > 12 {
				return nil, p.fail("decimal too long")
			}
			dot = i
			continue
		}
		if !isDigit(c) {
			break
		}
		if dot < 0 && i-start >= 15 {
			return nil, p.fail("integer too long")
		}
	}
	num := p.s[:i]
	if i == start || (dot >= 0 && (i-dot-1 < 1 || i-dot-1 > 3)) {
		return nil, p.fail("bad number")
	}
	p.s = p.s[i:]
	if dot >= 0 {
		return strconv.ParseFloat(num, 64)
	}
	return strconv.ParseInt(num, 10, 64)
}

func (p *sfParser) str() (any, error) {
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case c == '\\':
			i++
			if i == len(p.s) || (p.s[i] != '"' && p.s[i] != '\\') {
				return nil, p.fail("bad escape")
			}
			b.WriteByte(p.s[i])
		case c == '"':
			p.s = p.s[i+1:]
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.fail("byte %#x in string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.fail("unterminated string")
}

func (p *sfParser) token() (any, error) {
	i := 1
	for i < len(p.s) && (isTChar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
		i++
	}
	t := p.s[:i]
	p.s = p.s[i:]
	return sfToken(t), nil
}

func (p *sfParser) bytes() (any, error) {
	end := strings.IndexByte(p.s[1:], ':')
	if end < 0 {
		return nil, p.fail("unterminated byte sequence")
	}
	b, err := base64.StdEncoding.DecodeString(p.s[1 : 1+end])
	if err != nil {
		return nil, p.fail("bad base64: %v", err)
	}
	p.s = p.s[end+2:]
	return b, nil
}

func (p *sfParser) boolean() (any, error) {
	if len(p.s) < 2 || (p.s[1] != '0' && p.s[1] != '1') {
		return nil, p.fail("bad boolean")
	}
	v := p.s[1] == '1'
	p.s = p.s[2:]
	return v, nil
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// The parser itself is held to RFC 8941's examples, valid and not.
func TestSFParser(t *testing.T) {
	tests := []struct {
		in   string
		want int // members; -1 for an error
	}{
		{`"a";q=100;w=60`, 1},
		{`"burst";q=100;w=60,"daily";q=1000;w=86400`, 2},
		{`"a";r=1;t=2 ,  "b";r=0`, 2},
		{`sugar, tea, rum`, 3},
		{`"x";pk=:cHJldGVuZCB0aGlzIGlzIGJpbmFyeQ==:;f`, 1},
		{`1.5, -2, ?0`, 3},
		{`"a\"b\\c"`, 1},
		{``, 0},
		{`"a",`, -1},
		{`"a";Q=1`, -1},  // keys are lowercase
		{`"a";q=1.`, -1}, // a decimal needs a fraction
		{`"a\x"`, -1},    // only \" and \\ escape
		{`"unterminated`, -1},
		{`"a" "b"`, -1},
		{`(1 2)`, -1},
		{`1234567890123456`, -1}, // 16 digits
		{"\"caf\u00e9\"", -1},
		{`"a";q=100;;w=1`, -1},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSFList(tt.in)
			if tt.want < 0 {
				if err == nil {
					t.Fatalf("parseSFList(%q) = %+v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("parseSFList(%q) = %+v, %v; want %d members", tt.in, got, err, tt.want)
			}
		})
	}
}

package protocol

import (
	"strconv"
	"unicode/utf8"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// POST /json speaks proto3 JSON, as protojson reads and writes it; but
// protojson walks every message by reflection, which cost POST /json more
// CPU than the decision. So the usual shapes are read and written here by
// hand, and everything else goes to protojson, which stays the judge of
// the format:
//
//   - parseRLSRequest reads a request itself only when it is an object
//     of the fields a request usually carries (domain, descriptors,
//     hits_addend; a descriptor's entries and hits_addend; an entry's key
//     and value), each once, with strings without escapes and numbers
//     without sign, fraction or exponent. Anything else (another field, a
//     null, an escape, a duplicate, a limit override, malformed JSON) is
//     protojson's to accept or refuse, with its error. So the fast path
//     accepts only what protojson accepts, as the same message
//     (FuzzRLSJSONRequest holds it to that), and refuses nothing.
//   - appendRLSResponse writes a response itself unless it carries what
//     sluice's plain answers do not (dynamic metadata, a quota, request
//     headers, a raw body or value): those protojson writes. Its output is
//     protojson's with no insignificant space (TestRLSJSONResponse).

// parseRLSRequest decodes body, a RateLimitRequest in proto3 JSON, as
// protojson.Unmarshal does with its default options.
func parseRLSRequest(body []byte) (*rlspb.RateLimitRequest, error) {
	if req, ok := fastRLSRequest(body); ok {
		return req, nil
	}
	req := new(rlspb.RateLimitRequest)
	if err := protojson.Unmarshal(body, req); err != nil {
		return nil, err
	}
	return req, nil
}

// fastRLSRequest decodes body when it has the usual shape (see above);
// ok is false when it has not, and then body may still be a valid
// request, or not.
func fastRLSRequest(body []byte) (req *rlspb.RateLimitRequest, ok bool) {
	// One string for the body: the request's strings are cut from it, as
	// none holds an escape.
	p := jscan{s: string(body)}
	buf := new(rlsRequestBuf)
	req = &buf.req
	var seen fieldSet
	ok = p.object(func(k string) bool {
		switch k {
		case "domain":
			d, ok := p.str()
			req.Domain = d
			return seen.first(0) && ok
		case "hitsAddend", "hits_addend":
			h, ok := p.uint(1<<32 - 1)
			req.HitsAddend = uint32(h)
			return seen.first(1) && ok
		case "descriptors":
			req.Descriptors = buf.descs[:0]
			return seen.first(2) && p.array(func() bool {
				d := buf.descriptor()
				req.Descriptors = append(req.Descriptors, d)
				return p.descriptor(d, buf)
			})
		}
		return false
	})
	if !ok || !p.end() {
		return nil, false
	}
	return req, true
}

// rlsRequestBuf is a RateLimitRequest with room for the messages of a
// usual one (a descriptor of up to two entries): reading it takes one
// allocation, not one per message.
type rlsRequestBuf struct {
	req       rlspb.RateLimitRequest
	descs     [1]*ratelimitpb.RateLimitDescriptor
	descRoom  [1]ratelimitpb.RateLimitDescriptor
	entries   [2]*ratelimitpb.RateLimitDescriptor_Entry
	entryRoom [2]ratelimitpb.RateLimitDescriptor_Entry
	nd, ne    int // of descRoom and entryRoom, used
}

// descriptor is a new descriptor, from b's room while it lasts; the first
// one gets the room for entries.
func (b *rlsRequestBuf) descriptor() *ratelimitpb.RateLimitDescriptor {
	if b.nd == len(b.descRoom) {
		return new(ratelimitpb.RateLimitDescriptor)
	}
	d := &b.descRoom[b.nd]
	if b.nd == 0 {
		d.Entries = b.entries[:0]
	}
	b.nd++
	return d
}

// entry is a new entry, from b's room while it lasts.
func (b *rlsRequestBuf) entry() *ratelimitpb.RateLimitDescriptor_Entry {
	if b.ne == len(b.entryRoom) {
		return new(ratelimitpb.RateLimitDescriptor_Entry)
	}
	b.ne++
	return &b.entryRoom[b.ne-1]
}

// descriptor reads a RateLimitDescriptor of the usual shape into d.
func (p *jscan) descriptor(d *ratelimitpb.RateLimitDescriptor, buf *rlsRequestBuf) bool {
	var seen fieldSet
	return p.object(func(k string) bool {
		switch k {
		case "entries":
			return seen.first(0) && p.array(func() bool {
				e := buf.entry()
				d.Entries = append(d.Entries, e)
				return p.entry(e)
			})
		case "hitsAddend", "hits_addend":
			h, ok := p.uint(1<<64 - 1)
			d.HitsAddend = wrapperspb.UInt64(h) // set, even to 0: a check
			return seen.first(1) && ok
		}
		return false
	})
}

// entry reads a RateLimitDescriptor_Entry into e.
func (p *jscan) entry(e *ratelimitpb.RateLimitDescriptor_Entry) bool {
	var seen fieldSet
	return p.object(func(k string) bool {
		var ok bool
		switch k {
		case "key":
			e.Key, ok = p.str()
			return seen.first(0) && ok
		case "value":
			e.Value, ok = p.str()
			return seen.first(1) && ok
		}
		return false
	})
}

// fieldSet tells which fields of an object were read, to leave an object
// naming one twice (under either of its names) to protojson.
type fieldSet uint8

// first marks field i read, reporting whether it was the first time.
func (s *fieldSet) first(i uint) bool {
	was := *s&(1<<i) != 0
	*s |= 1 << i
	return !was
}

// jscan reads the subset of JSON fastRLSRequest takes; every method
// reports false on anything outside it.
type jscan struct {
	s string
	i int
}

// space skips JSON's whitespace.
func (p *jscan) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next consumes c, the next byte but for space, if it is.
func (p *jscan) next(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether nothing but space is left.
func (p *jscan) end() bool {
	p.space()
	return p.i == len(p.s)
}

// str reads a string with no escape and no control character, in valid
// UTF-8.
func (p *jscan) str() (string, bool) {
	if !p.next('"') {
		return "", false
	}
	ascii := true
	for j := p.i; j < len(p.s); j++ {
		switch c := p.s[j]; {
		case c == '"':
			v := p.s[p.i:j]
			p.i = j + 1
			return v, ascii || utf8.ValidString(v)
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// uint reads a number written as digits alone, with no leading zero, of
// at most max. A fraction or an exponent after it is left unread, which
// fails the object around it.
func (p *jscan) uint(max uint64) (uint64, bool) {
	p.space()
	start := p.i
	var v uint64
	for ; p.i < len(p.s) && '0' <= p.s[p.i] && p.s[p.i] <= '9'; p.i++ {
		if p.i-start == 19 { // past 10^19: may not fit; protojson's to judge
			return 0, false
		}
		v = v*10 + uint64(p.s[p.i]-'0')
	}
	n := p.i - start
	return v, n > 0 && (n == 1 || p.s[start] != '0') && v <= max
}

// object reads an object, each member's value by member(key).
func (p *jscan) object(member func(key string) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		k, ok := p.str()
		if !ok || !p.next(':') || !member(k) {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// array reads an array, each element by elem.
func (p *jscan) array(elem func() bool) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.next(']') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// appendRLSResponse appends resp in proto3 JSON to b, as
// protojson.Marshal writes it with its default options, but with no
// insignificant space.
func appendRLSResponse(b []byte, resp *rlspb.RateLimitResponse) ([]byte, error) {
	if out, ok := fastRLSResponse(b, resp); ok {
		return out, nil
	}
	out, err := protojson.Marshal(resp)
	return append(b, out...), err
}

// fastRLSResponse appends resp to b when it has only what a sluice
// answer carries but for its dynamic metadata (see above); ok is false
// when it has more, or a string that is not UTF-8, which protojson
// refuses.
func fastRLSResponse(b []byte, resp *rlspb.RateLimitResponse) (_ []byte, ok bool) {
	if len(resp.RequestHeadersToAdd) > 0 || len(resp.RawBody) > 0 || resp.DynamicMetadata != nil || resp.Quota != nil {
		return b, false
	}
	w := jwriter{b: b, ok: true}
	w.open('{')
	if c := resp.OverallCode; c != 0 {
		w.key("overallCode")
		w.enum(rlspb.RateLimitResponse_Code_name, int32(c))
	}
	if len(resp.Statuses) > 0 {
		w.key("statuses")
		w.open('[')
		for _, st := range resp.Statuses {
			if st.Quota != nil {
				return b, false
			}
			w.elem()
			w.status(st)
		}
		w.close(']')
	}
	if len(resp.ResponseHeadersToAdd) > 0 {
		w.key("responseHeadersToAdd")
		w.open('[')
		for _, h := range resp.ResponseHeadersToAdd {
			if len(h.RawValue) > 0 {
				return b, false
			}
			w.elem()
			w.open('{')
			if h.Key != "" {
				w.key("key")
				w.str(h.Key)
			}
			if h.Value != "" {
				w.key("value")
				w.str(h.Value)
			}
			w.close('}')
		}
		w.close(']')
	}
	w.close('}')
	if !w.ok {
		return b, false
	}
	return w.b, true
}

// status writes a DescriptorStatus but for its quota.
func (w *jwriter) status(st *rlspb.RateLimitResponse_DescriptorStatus) {
	w.open('{')
	if st.Code != 0 {
		w.key("code")
		w.enum(rlspb.RateLimitResponse_Code_name, int32(st.Code))
	}
	if l := st.CurrentLimit; l != nil {
		w.key("currentLimit")
		w.open('{')
		if l.Name != "" {
			w.key("name")
			w.str(l.Name)
		}
		if l.RequestsPerUnit != 0 {
			w.key("requestsPerUnit")
			w.b = strconv.AppendUint(w.b, uint64(l.RequestsPerUnit), 10)
		}
		if l.Unit != 0 {
			w.key("unit")
			w.enum(rlspb.RateLimitResponse_RateLimit_Unit_name, int32(l.Unit))
		}
		if m := l.UnitMultiplier; m != nil {
			w.key("unitMultiplier")
			w.b = strconv.AppendUint(w.b, uint64(m.Value), 10)
		}
		w.close('}')
	}
	if st.LimitRemaining != 0 {
		w.key("limitRemaining")
		w.b = strconv.AppendUint(w.b, uint64(st.LimitRemaining), 10)
	}
	if d := st.DurationUntilReset; d != nil {
		w.key("durationUntilReset")
		w.duration(d.Seconds, d.Nanos)
	}
	w.close('}')
}

// jwriter writes JSON into b; ok turns false on a string protojson would
// refuse.
type jwriter struct {
	b     []byte
	ok    bool
	comma bool // the next member or element follows another
}

func (w *jwriter) open(c byte) { w.b, w.comma = append(w.b, c), false }

func (w *jwriter) close(c byte) { w.b, w.comma = append(w.b, c), true }

// elem starts an element of an array.
func (w *jwriter) elem() {
	if w.comma {
		w.b = append(w.b, ',')
	}
	w.comma = true
}

// key starts a member of an object: keys here never need an escape.
func (w *jwriter) key(k string) {
	w.elem()
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

// enum writes an enum value by its name in names (the generated
// _name map), or its number when it has none, as protojson does.
func (w *jwriter) enum(names map[int32]string, n int32) {
	if name, ok := names[n]; ok {
		w.str(name)
		return
	}
	w.b = strconv.AppendInt(w.b, int64(n), 10)
}

// str writes s as a JSON string escaped as protojson escapes it: quote,
// backslash and control characters only.
func (w *jwriter) str(s string) {
	w.b = append(w.b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				w.ok = false
				return
			}
			w.b = append(w.b, s[i:i+n]...)
			i += n
			continue
		case c == '"' || c == '\\':
			w.b = append(w.b, '\\', c)
		case c < 0x20:
			switch c {
			case '\b':
				w.b = append(w.b, '\\', 'b')
			case '\f':
				w.b = append(w.b, '\\', 'f')
			case '\n':
				w.b = append(w.b, '\\', 'n')
			case '\r':
				w.b = append(w.b, '\\', 'r')
			case '\t':
				w.b = append(w.b, '\\', 't')
			default:
				w.b = append(w.b, '\\', 'u', '0', '0', "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			}
		default:
			w.b = append(w.b, c)
		}
		i++
	}
	w.b = append(w.b, '"')
}

// duration writes a google.protobuf.Duration as protojson does: seconds
// with 0, 3, 6 or 9 fractional digits, and "s". One out of its range is
// left to protojson, which refuses it.
func (w *jwriter) duration(secs int64, nanos int32) {
	const maxSecs = 315576000000
	if secs < -maxSecs || secs > maxSecs || nanos <= -1e9 || nanos >= 1e9 || secs > 0 && nanos < 0 || secs < 0 && nanos > 0 {
		w.ok = false
		return
	}
	w.b = append(w.b, '"')
	if secs < 0 || nanos < 0 {
		w.b = append(w.b, '-')
		secs, nanos = -secs, -nanos
	}
	w.b = strconv.AppendInt(w.b, secs, 10)
	if nanos != 0 {
		digits := 9
		for n := nanos; digits > 3 && n%1000 == 0; n /= 1000 {
			digits -= 3
		}
		var frac [10]byte
		f := strconv.AppendInt(frac[:0], int64(nanos)+1e9, 10) // "1" and nine digits
		w.b = append(w.b, '.')
		w.b = append(w.b, f[1:1+digits]...)
	}
	w.b = append(w.b, 's', '"')
}

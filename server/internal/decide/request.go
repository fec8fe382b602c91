package decide

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// Bounds on the shape of one request, so that no request costs more than
// a fixed amount of work.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 64
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 64
	// MaxCost is the most hits one request may charge one limit and key,
	// its descriptors' hits added together: 2^53, the largest count the
	// Redis store keeps exactly, and far from int64's overflow however
	// many descriptors add up.
	MaxCost = 1 << 53
)

// A Request is what the server decides, whatever protocol brought it:
// gRPC and POST /json build it from a RateLimitRequest, forward auth from
// an HTTP request.
type Request struct {
	Domain string
	Descs  []Descriptor
	// room for the descriptors and entries of a usual request, so that
	// building one takes one allocation
	descBuf  [1]Descriptor
	entryBuf [2]config.Entry
}

// NewRequest returns a request of domain with n descriptors, zero, and
// room for entries entries in all, which Entries hands out.
func NewRequest(domain string, n int) *Request {
	r := &Request{Domain: domain}
	r.Descs = room(r.descBuf[:0], n)
	return r
}

// Entries returns room for n entries, in the request's own array when it
// has room: a caller cuts it per descriptor.
func (r *Request) Entries(n int) []config.Entry { return room(r.entryBuf[:0], n) }

// A Descriptor is one request descriptor: its entries, what it costs, and
// the limit it brings, if any.
type Descriptor struct {
	Entries []config.Entry
	Hits    int64 // 0: a check, charging nothing; at most MaxCost
	// Override, when set, is the limit the request asks for in place of
	// the config's (Envoy's limit override): checked within the bounds
	// the adapter enforces, and prepared by Overrides.
	Override *sluice.Limit
}

// BadRequest is a request the server refuses without deciding or charging
// anything: gRPC InvalidArgument, HTTP 400.
type BadRequest struct{ Msg string }

func (e *BadRequest) Error() string { return e.Msg }

// Badf is a *BadRequest with a formatted message.
func Badf(format string, args ...any) error {
	return &BadRequest{fmt.Sprintf(format, args...)}
}

// Validate checks the shape every protocol shares; the adapters check
// their own fields, and bound the hits, before.
func (r *Request) Validate() error {
	switch {
	case r.Domain == "":
		return Badf("domain: must not be empty")
	case len(r.Descs) == 0:
		return Badf("descriptors: must not be empty")
	case len(r.Descs) > MaxDescriptors:
		return Badf("descriptors: %d of them; at most %d are allowed", len(r.Descs), MaxDescriptors)
	}
	for i, d := range r.Descs {
		f := DescField(i)
		switch {
		case len(d.Entries) == 0:
			return Badf("%s.entries: must not be empty", f)
		case len(d.Entries) > MaxEntries:
			return Badf("%s.entries: %d of them; at most %d are allowed", f, len(d.Entries), MaxEntries)
		}
		for k, e := range d.Entries {
			if e.Key == "" {
				return Badf("%s.entries[%d].key: must not be empty", f, k)
			}
		}
	}
	return nil
}

// DescField names descriptor i in an error message.
type DescField int

func (i DescField) String() string { return fmt.Sprintf("descriptors[%d]", int(i)) }

// maxKeyLen bounds the keys handed to the store: a descriptor value can
// be a whole request path.
const maxKeyLen = 512

// BoundKey returns k, or when it is long its domain and a digest of the
// rest. Keys from config.Match never hold "%#", so a digest cannot pose as
// a key.
func BoundKey(k string) string {
	if len(k) <= maxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	dom, _, _ := strings.Cut(k, "|")
	if len(dom) > 128 {
		dom = ""
	}
	return dom + "|%#" + base64.RawURLEncoding.EncodeToString(sum[:18])
}

// room returns buf[:n] when it has room for n, else a new slice.
func room[T any](buf []T, n int) []T {
	if n <= cap(buf) {
		return buf[:n]
	}
	return make([]T, n)
}

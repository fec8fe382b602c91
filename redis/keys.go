package redis

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
)

// Keys. A check's state lives at
//
//	prefix{key}:rule:code
//
// with the check's key as the hash tag, so that Redis Cluster keeps the
// rules of one entity in one slot, or, with WithHashTag,
//
//	prefix{tag}key:rule:code
//
// code names the state's layout ("b" bucket, "f" fixed window, "c" sliding
// counter, "lu" the sliding log's list of entries; earlier layouts had
// codes of their own): changing a rule's algorithm, or a layout, starts
// afresh rather than misreading the old state.
// Under the store's clock (at Redis TIME on a single Redis) a fixed window
// is a counter per window, and its code is "w:" (or "wu:" for a period not
// in whole seconds): the key names the base, and the script appends the
// window's start, in Unix seconds (or µs), since only it knows Redis's
// time. So key is the one step that names keys: a scheme whose window keys
// end in the window's start, as envoyproxy/ratelimit's
// <prefix><domain>_<key>_<value>_<start> do, only has to return the base. A
// bucket whose debt is not counted in µs adds its unit, "b1000/3" for
// units of 1000/3 ns, so that a limit with other units starts afresh too.
// Values are escaped so that no key, tag or rule name can end a tag or
// forge a separator: '%', '{', '}' and ':' become %25, %7B, %7D and %3A.

// escape percent-encodes the four characters that structure a key.
func escape(s string) string {
	if !strings.ContainsAny(s, "%{}:") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// keyScheme names the checks' keys, and knows what the keys of one
// request must share for one script run to decide them.
type keyScheme struct {
	prefix string
	tag    func(sluice.Check) string // nil: the check's key is its tag
	// window names a fixed window's counters (WithWindowKeys), nil or ""
	// for sluice's names.
	window func(sluice.Check) string
	share  share
	// noSplit refuses a request that one script run cannot decide
	// (WithoutSplit).
	noSplit bool
}

// share is what the keys of one request must have in common.
type share uint8

const (
	shareNothing share = iota // a single Redis (node or Sentinel): nothing
	shareSlot                 // a Cluster: a hash slot
	shareTag                  // a Ring: a hash tag, which picks the shard
)

// key is the key of check c's state, of layout code.
func (k *keyScheme) key(c sluice.Check, code string) string {
	if code == windowSeconds && k.window != nil {
		if base := k.window(c); base != "" {
			return base
		}
	}
	tag := c.Key
	if k.tag != nil {
		tag = k.tag(c)
	}
	return stateKey(k.prefix, tag, c.Key, c.Rule.Name(), code, k.tag != nil)
}

// distinct checks that one script run can decide keys, the keys of one
// request: no key twice.
func (k *keyScheme) distinct(keys []string) error {
	for i := 1; i < len(keys); i++ {
		for j := range i {
			if keys[i] == keys[j] {
				return fmt.Errorf("redis: two checks of one request on %q: %w", keys[i], sluice.ErrRefused)
			}
		}
	}
	return nil
}

// oneRun reports whether a run through the Store's client can decide
// keys together: on a Cluster they share a slot, on a Ring a tag (see
// split.go).
func (k *keyScheme) oneRun(keys []string) bool {
	for _, key := range keys[1:] {
		if !k.sameNode(key, keys[0]) {
			return false
		}
	}
	return true
}

// crossSlot is ErrCrossSlot for keys not all in one slot (one tag on a
// Ring), nil for keys that are.
func (k *keyScheme) crossSlot(keys []string) error {
	for _, key := range keys[1:] {
		if !k.sameNode(key, keys[0]) {
			return fmt.Errorf("%w: %q and %q (use WithHashTag)", ErrCrossSlot, keys[0], key)
		}
	}
	return nil
}

// sameNode reports whether one script run can hold keys a and b: on a
// Cluster, they share a slot; on a Ring, a hash tag.
func (k *keyScheme) sameNode(a, b string) bool {
	switch k.share {
	case shareSlot:
		return slot(a) == slot(b)
	case shareTag:
		return tagOf(a) == tagOf(b)
	}
	return true
}

// stateKey is the key of check (rule, key) with hash tag tag; tagged says
// whether a tag function is in use (the second form above).
func stateKey(prefix, tag, key, rule, code string, tagged bool) string {
	var b strings.Builder
	t := escape(tag)
	if t == "" {
		t = "%" // "{}" is no hash tag to Redis; a lone % is no escape
	}
	r := escape(rule)
	if !tagged {
		b.Grow(len(prefix) + len(t) + len(r) + len(code) + 4)
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(t)
		b.WriteString("}:")
	} else {
		k := escape(key)
		b.Grow(len(prefix) + len(t) + len(k) + len(r) + len(code) + 4)
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(t)
		b.WriteByte('}')
		b.WriteString(k)
		b.WriteByte(':')
	}
	b.WriteString(r)
	b.WriteByte(':')
	b.WriteString(code)
	return b.String()
}

// slot is the Redis Cluster hash slot of key: CRC16 of its hash tag (or of
// the whole key when it has none) modulo 16384.
func slot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return crc16(key) & 16383
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster uses for slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// tagOf is key's hash tag, or key if it has none.
func tagOf(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					return key[i+1 : j]
				}
			}
		}
	}
	return key
}

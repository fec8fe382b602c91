package algo

import "math/bits"

// u128 is an unsigned 128-bit integer, for products like count·period that
// do not fit in 64 bits.
type u128 struct{ hi, lo uint64 }

func mul128(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func add128(a, b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}
}

func sub128(a, b u128) u128 {
	lo, br := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, br)
	return u128{hi, lo}
}

func less128(a, b u128) bool {
	return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo)
}

// div128 returns ⌊a/d⌋ and whether it fits in 64 bits. d must be positive.
func div128(a u128, d uint64) (uint64, bool) {
	if a.hi >= d {
		return 0, false
	}
	q, _ := bits.Div64(a.hi, a.lo, d)
	return q, true
}

package algo

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

var edges = []int64{0, 1, 2, 3, 7, 1000, 1 << 31, 1<<32 - 1, 1 << 32, 1 << 62, math.MaxInt64 - 1, math.MaxInt64}

func randInt64(r *rand.Rand) int64 {
	switch r.IntN(3) {
	case 0:
		return edges[r.IntN(len(edges))]
	case 1:
		return r.Int64N(1000)
	}
	return r.Int64() >> r.IntN(63)
}

func TestCeilDiv(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		a, b := uint64(randInt64(r))*uint64(1+r.IntN(3)), uint64(randInt64(r))
		if b == 0 {
			continue
		}
		want := new(big.Int).Div(new(big.Int).Add(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b-1)), new(big.Int).SetUint64(b))
		if want.Cmp(big.NewInt(math.MaxInt64)) >= 0 {
			want = big.NewInt(math.MaxInt64)
		}
		if got := ceilDiv(a, b); int64(got) != want.Int64() {
			t.Fatalf("ceilDiv(%d, %d) = %d, want %d", a, b, got, want)
		}
	}
	if got := ceilDiv(math.MaxUint64, 1); got != Never {
		t.Errorf("ceilDiv(MaxUint64, 1) = %v, want Never", got)
	}
}

func TestFloorDiv(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		a, b := randInt64(r), randInt64(r)
		if r.IntN(2) == 0 {
			a = -a
		}
		if b == 0 {
			continue
		}
		if r.IntN(4) == 0 {
			b = -b
		}
		want := floorBig(a, b)
		if got := floorDiv(a, b); got != want.Int64() {
			t.Fatalf("floorDiv(%d, %d) = %d, want %d", a, b, got, want)
		}
	}
}

// floorBig is ⌊a/b⌋ by way of big.Rat.
func floorBig(a, b int64) *big.Int {
	r := big.NewRat(a, b)
	q, _ := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	return q
}

func TestMulOK(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		a, b := randInt64(r), randInt64(r)
		want := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		got, ok := mulOK(a, b)
		if ok != want.IsInt64() || (ok && got != want.Int64()) {
			t.Fatalf("mulOK(%d, %d) = %d, %v; want %v", a, b, got, ok, want)
		}
	}
}

func TestU128(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	toBig := func(x u128) *big.Int {
		return new(big.Int).Add(new(big.Int).Mul(new(big.Int).SetUint64(x.hi), two64), new(big.Int).SetUint64(x.lo))
	}
	for range 10000 {
		a, b, c, d := uint64(randInt64(r))*3, uint64(randInt64(r)), uint64(randInt64(r)), uint64(randInt64(r))|1
		x, y := mul128(a, b), mul128(c, d)
		bx, by := new(big.Int).Mul(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b)), new(big.Int).Mul(new(big.Int).SetUint64(c), new(big.Int).SetUint64(d))
		if toBig(x).Cmp(bx) != 0 {
			t.Fatalf("mul128(%d, %d) = %v, want %v", a, b, toBig(x), bx)
		}
		if got, want := less128(x, y), bx.Cmp(by) < 0; got != want {
			t.Fatalf("less128(%v, %v) = %v", bx, by, got)
		}
		if sum := new(big.Int).Add(bx, by); sum.BitLen() <= 128 && toBig(add128(x, y)).Cmp(sum) != 0 {
			t.Fatalf("add128(%v, %v) = %v, want %v", bx, by, toBig(add128(x, y)), sum)
		}
		if bx.Cmp(by) >= 0 && toBig(sub128(x, y)).Cmp(new(big.Int).Sub(bx, by)) != 0 {
			t.Fatalf("sub128(%v, %v) = %v", bx, by, toBig(sub128(x, y)))
		}
		q, ok := div128(x, d)
		want := new(big.Int).Div(bx, new(big.Int).SetUint64(d))
		if ok != (want.BitLen() <= 64) || (ok && q != want.Uint64()) {
			t.Fatalf("div128(%v, %d) = %d, %v; want %v", bx, d, q, ok, want)
		}
	}
}

func TestGCD(t *testing.T) {
	for _, tt := range []struct{ a, b, want int64 }{
		{int64(time.Second), 3, 1}, {int64(time.Second), 5, 5}, {int64(time.Minute), 7, 1},
		{12, 18, 6}, {7, 0, 7}, {math.MaxInt64, math.MaxInt64, math.MaxInt64},
	} {
		if got := gcd(tt.a, tt.b); got != tt.want {
			t.Errorf("gcd(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

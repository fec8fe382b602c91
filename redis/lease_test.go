package redis_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/redis"
)

// leaseKey is the hash of a lease key k that needs no escaping, under
// prefix p (see redis.Authority).
func leaseKey(p, k string) string { return p + "{" + k + "}:lease" }

// packHolding is a holding as the script keeps it: six little-endian
// doubles, its expiry in µs of Redis TIME.
func packHolding(h lease.Holding, expires int64) string {
	b := make([]byte, 0, 48)
	for _, v := range []int64{h.Demand, h.Share, h.Burst, h.Window, h.Allowance, expires} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return string(b)
}

// redisMicros is srv's Redis TIME in µs.
func redisMicros(t testing.TB, rc goredis.UniversalClient) int64 {
	t.Helper()
	now, err := rc.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// allocCase is a renewal against others already held, some expired:
// lately (in the renewal's window, if Redis TIME is in it) or in the
// window before.
type allocCase struct {
	r       lease.Request
	live    []lease.Holding
	expired []lease.Holding
	lately  []bool
}

// allocCases are random renewals around each edge of lease.Allocate:
// demand below, at and past the quota and past the cap, shares that
// already sum past the quota (a lowered rate), Window allowances in this
// window and another, rate 0 and the largest, capacities up to the
// largest.
func allocCases() []allocCase {
	rng := rand.New(rand.NewPCG(33, 1))
	rates := []int64{0, 1, 3, 10, 997, 10_000, 1 << 20, 1 << 25}
	var cs []allocCase
	for i := range 600 {
		c := rates[i%len(rates)]
		kind := lease.Bucket
		if i%2 == 1 {
			kind = lease.Window
		}
		burst := int64(0)
		switch rng.IntN(4) {
		case 1:
			burst = min(rng.Int64N(4*c+2), sluice.MaxLeaseQuota)
		case 2:
			burst = sluice.MaxLeaseQuota
		}
		demand := func() int64 {
			switch rng.IntN(5) {
			case 0:
				return 0
			case 1:
				return 4*c + 4 + rng.Int64N(1<<30) // past the cap
			}
			return rng.Int64N(c + c/2 + 2)
		}
		const win = 1_000_000
		r := lease.Request{
			Key: "k", Holder: "me", Kind: kind,
			Limit:  sluice.Limit{Rate: c, Period: time.Second, Burst: burst},
			Demand: demand(), Window: win, Used: rng.Int64N(c/2 + 2), TTL: time.Hour,
		}
		ac := allocCase{r: r}
		for j := range rng.IntN(7) {
			h := lease.Holding{
				Holder: fmt.Sprint("h", j), Demand: min(demand(), 4*c+4), Share: rng.Int64N(c/2 + 1),
				Burst: rng.Int64N(c + 1), Window: win - rng.Int64N(2), Allowance: rng.Int64N(c/2 + 1),
			}
			if rng.IntN(4) == 0 {
				ac.expired = append(ac.expired, h)
				ac.lately = append(ac.lately, rng.IntN(2) == 0)
			} else {
				ac.live = append(ac.live, h)
			}
		}
		if rng.IntN(5) == 0 { // the holder's own last holding, which is not among the others
			ac.live = append(ac.live, lease.Holding{Holder: "me", Demand: 5, Share: c, Window: win})
		}
		cs = append(cs, ac)
	}
	return cs
}

// TestLeaseAllocate holds lease.lua to lease.Allocate: on each generated
// case, written to Redis as the holdings of a key in Redis TIME's window,
// Renew's grant and the holding it keeps are Allocate's, given the live
// holdings and, for a fixed window, those that expired in the renewal's
// window (as the memory authority counts them); the other expired ones are
// deleted. By FCALL, and by EVALSHA on a server without functions.
func TestLeaseAllocate(t *testing.T) {
	srv := startRedis(t)
	for _, tc := range []struct {
		name   string
		client *goredis.Client
	}{{"fcall", srv.client(t)}, {"evalsha", scriptOnlyClient(t, srv)}} {
		t.Run(tc.name, func(t *testing.T) {
			p := prefix(t)
			rc := srv.client(t)
			a := newStore(t, tc.client, redis.WithPrefix(p)).Authority()
			ctx := context.Background()
			const second = int64(time.Second / time.Microsecond) // the cases' Period
			for i, ac := range allocCases() {
				key := leaseKey(p, "k")
				rc.Del(ctx, key)
				now := redisMicros(t, rc)
				// The cases' windows are about 1,000,000: move them to now's.
				shift := now/second - ac.r.Window
				r := ac.r
				r.Window += shift
				var others []lease.Holding
				live, kept := 0, 0
				found, ended := false, int64(-1) // the holder live; when a bucket holding last ended
				for _, h := range ac.live {
					h.Window += shift
					rc.HSet(ctx, key, h.Holder, packHolding(h, now+int64(time.Hour/time.Microsecond)))
					if h.Holder != r.Holder {
						others = append(others, h)
						live++
					} else {
						found = true
					}
				}
				for j, h := range ac.expired {
					h.Window += shift
					expires := now - 1
					if !ac.lately[j] {
						expires = now - second - 1
					}
					rc.HSet(ctx, key, h.Holder, packHolding(h, expires))
					if r.Kind == lease.Window && expires/second >= r.Window {
						others = append(others, h)
						kept++
					}
					if r.Kind == lease.Bucket {
						ended = max(ended, expires)
					}
				}
				want, wantH := lease.Allocate(r, others)
				got, err := a.Renew(ctx, r)
				if err != nil {
					t.Fatalf("case %d: Renew(%+v) with others %+v: %v", i, r, others, err)
				}
				// The tokens a new holder alone starts with depend on
				// Redis's time, between now and after.
				after := redisMicros(t, rc)
				start := func(at int64) int64 {
					if r.Kind != lease.Bucket || found || len(others) > 0 {
						return 0
					}
					fresh := ended < 0 || at >= ended+lease.Refill(r.Limit).Microseconds()
					return lease.StartTokens(r.Limit, want.Burst, at-ended, fresh)
				}
				if lo, hi := start(now), start(after); got.Tokens < lo || got.Tokens > hi {
					t.Fatalf("case %d: Renew(%+v) with others %+v: %d tokens, want StartTokens's, %d to %d", i, r, others, got.Tokens, lo, hi)
				}
				got.Tokens = 0
				if got != want {
					t.Fatalf("case %d: Renew(%+v) with others %+v = %+v, want Allocate's %+v", i, r, others, got, want)
				}
				hs, err := a.Holdings(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if len(hs) != live+1 {
					t.Fatalf("case %d: %d holdings, want %d: the live ones", i, len(hs), live+1)
				}
				n := rc.HLen(ctx, key).Val()
				if rc.HExists(ctx, key, "").Val() { // when a bucket holding last ended
					n--
				}
				if n != int64(live+kept+1) {
					t.Fatalf("case %d: the hash has %d fields, want %d: the expired deleted but for a window's in its window", i, n, live+kept+1)
				}
				for _, h := range hs {
					if h.Holder == r.Holder {
						h.Expires = time.Time{}
						if h != wantH {
							t.Fatalf("case %d: holding kept %+v, want Allocate's %+v", i, h, wantH)
						}
					}
				}
			}
		})
	}
}

// TestLeaseLikeMemory: a random sequence of renewals and releases by a
// few holders of a few keys, none expiring, gets the same grants and
// holdings from the Redis authority as from the memory one: renewed one
// by one, and in batches (RenewBatch, by FCALL and by EVALSHA) with now
// and then a request refused as bad input among them, which gets its
// error and changes nothing.
func TestLeaseLikeMemory(t *testing.T) {
	srv := startRedis(t)
	for _, tc := range []struct {
		name   string
		client *goredis.Client
		batch  bool
	}{{"renew", srv.client(t), false}, {"batch", srv.client(t), true}, {"batch-evalsha", scriptOnlyClient(t, srv), true}} {
		t.Run(tc.name, func(t *testing.T) {
			likeMemory(t, newStore(t, tc.client, redis.WithPrefix(prefix(t))).Authority(), tc.batch)
		})
	}
}

func likeMemory(t *testing.T, a *redis.Authority, batch bool) {
	m := lease.NewMemoryAuthority()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(33, 2))
	kinds := map[string]lease.Kind{"b": lease.Bucket, "w": lease.Window}
	now := time.Now()
	var rs []lease.Request
	steps := 0
	flush := func() {
		gs, errs := make([]lease.Grant, len(rs)), make([]error, len(rs))
		if batch {
			a.RenewBatch(ctx, rs, gs, errs)
		} else {
			for i, r := range rs {
				gs[i], errs[i] = a.Renew(ctx, r)
			}
		}
		for i, r := range rs {
			got, err := gs[i], errs[i]
			if r.Holder == "" {
				if !errors.Is(err, sluice.ErrRefused) {
					t.Fatalf("step %d: a renewal with no holder: %v, want sluice.ErrRefused", steps, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: %v", steps, err)
			}
			want, err := m.Renew(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			// The memory authority's time stands still, Redis's passes: a
			// holder alone after a release starts with the tokens refilled
			// since, none in the memory authority's time, a few in Redis's.
			if elapsed := time.Since(now).Microseconds(); want.Tokens == 0 &&
				got.Tokens >= 0 && got.Tokens <= lease.StartTokens(r.Limit, got.Burst, elapsed, false) {
				got.Tokens = 0
			}
			if got != want {
				t.Fatalf("step %d, %d of %d in a run: Renew(%+v) = %+v, the memory authority's %+v", steps, i, len(rs), r, got, want)
			}
		}
		rs = rs[:0]
	}
	for steps = range 2000 {
		key := []string{"b", "w"}[rng.IntN(2)]
		holder := fmt.Sprint("h", rng.IntN(6))
		if rng.IntN(10) == 0 {
			flush()
			if err := a.Release(ctx, key, holder); err != nil {
				t.Fatal(err)
			}
			if err := m.Release(ctx, key, holder); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if rng.IntN(50) == 0 {
			holder = "" // refused
		}
		r := lease.Request{
			Key: key, Holder: holder, Kind: kinds[key], Limit: sluice.Limit{Rate: 1000, Period: time.Second, Burst: 1500},
			Demand: rng.Int64N(1200), Window: now.UnixNano() / int64(time.Second), TTL: time.Hour, Now: now,
		}
		r.Used = rng.Int64N(300)
		rs = append(rs, r)
		if !batch || rng.IntN(6) == 0 {
			flush()
		}
	}
	flush()
	for _, key := range []string{"b", "w"} {
		got, err := a.Holdings(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want, err := m.Holdings(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			got[i].Expires = time.Time{}
		}
		for i := range want {
			want[i].Expires = time.Time{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Holdings(%s) = %+v, the memory authority's %+v", key, got, want)
		}
	}
}

// renew is a.Renew of holder's demand on key at rate 100 a second.
func renew(t testing.TB, a *redis.Authority, key, holder string, demand int64, ttl time.Duration) lease.Grant {
	t.Helper()
	g, err := a.Renew(context.Background(), lease.Request{
		Key: key, Holder: holder, Kind: lease.Bucket, Limit: sluice.Limit{Rate: 100, Period: time.Second},
		Demand: demand, TTL: ttl,
	})
	if err != nil {
		t.Fatalf("Renew(%s, %s): %v", key, holder, err)
	}
	return g
}

// waitShare renews holder's demand of 100 until its share is want, as the
// others' expire: a state Redis reaches by its own clock, waited for with
// a deadline.
func waitShare(t testing.TB, a *redis.Authority, key, holder string, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		g := renew(t, a, key, holder, 100, time.Minute)
		if g.Share == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's share is %d after 30s, want %d", holder, g.Share, want)
		}
		time.Sleep(20 * time.Millisecond) // Redis TIME passes on its own
	}
}

// TestLeaseExpiry: a holder that stops renewing loses its share at its
// expiry, and the others take it; the hash goes when its last holder
// expires.
func TestLeaseExpiry(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	a := newStore(t, rc, redis.WithPrefix(p)).Authority()
	if g := renew(t, a, "k", "a", 100, 300*time.Millisecond); g.Share != 100 {
		t.Fatalf("a's first share = %d, want 100: alone, it asked for all", g.Share)
	}
	if g := renew(t, a, "k", "b", 100, 300*time.Millisecond); g.Share != 0 || g.Holders != 2 || g.Demand != 200 {
		t.Fatalf("b's first share = %+v, want 0 of 2 holders' 200: a holds all", g)
	}
	// The hash outlives the latest expiry by the time the bucket takes to
	// refill, a second, for lease.StartTokens.
	if ttl := rc.PTTL(context.Background(), leaseKey(p, "k")).Val(); ttl <= time.Second || ttl > 1300*time.Millisecond {
		t.Fatalf("the hash's TTL is %v, want (1s, 1.3s]: the latest expiry and a refill", ttl)
	}
	waitShare(t, a, "k", "b", 100)
	hs, err := a.Holdings(context.Background(), "k")
	if err != nil || len(hs) != 1 || hs[0].Holder != "b" {
		t.Fatalf("Holdings = %+v, %v, want b's alone", hs, err)
	}
	renew(t, a, "k", "b", 100, time.Millisecond)
	deadline := time.Now().Add(30 * time.Second)
	for rc.Exists(context.Background(), leaseKey(p, "k")).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hash outlives its last holder's expiry by 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeaseWindowKept: a fixed window's holding that expired still counts
// until its window ends, as the memory authority's does: its holder may
// have admitted its allowance there. The hash lives that long.
func TestLeaseWindowKept(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	a := newStore(t, rc, redis.WithPrefix(p)).Authority()
	ctx := context.Background()
	const day = 24 * time.Hour
	now := time.UnixMicro(redisMicros(t, rc))
	if left := now.Truncate(day).Add(day).Sub(now); left < time.Minute {
		t.Skipf("the day's window ends in %v: too close to hold it", left)
	}
	r := lease.Request{Key: "k", Holder: "a", Kind: lease.Window, Limit: sluice.Limit{Rate: 100, Period: day},
		Demand: 100, Window: now.UnixNano() / int64(day), TTL: time.Millisecond}
	if g, err := a.Renew(ctx, r); err != nil || g.Allowance != 100 {
		t.Fatalf("a's grant = %+v, %v, want an allowance of 100", g, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		hs, err := a.Holdings(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's holding of 1ms lives 30s later: %+v", hs)
		}
		time.Sleep(time.Millisecond)
	}
	if ttl := rc.PTTL(ctx, leaseKey(p, "k")).Val(); ttl < time.Minute/2 {
		t.Fatalf("the hash's TTL after a's expiry is %v, want to the window's end", ttl)
	}
	r.Holder, r.TTL = "b", time.Minute
	if g, err := a.Renew(ctx, r); err != nil || g.Allowance != 0 || g.Holders != 2 {
		t.Fatalf("b's grant in a's window = %+v, %v, want no allowance: a's still counts", g, err)
	}
}

// TestLeaseRelease: a holder released no longer counts, and the other
// takes its share at its next renewal; Holdings lists the live holders.
func TestLeaseRelease(t *testing.T) {
	srv := startRedis(t)
	a := newStore(t, srv.client(t), redis.WithPrefix(prefix(t))).Authority()
	ctx := context.Background()
	// a alone: its 30 and half the rest; b: its 30 and a third of the
	// rest, but only what a left.
	if g := renew(t, a, "k", "a", 30, time.Minute); g.Share != 65 {
		t.Fatalf("a's share = %d, want 65", g.Share)
	}
	if g := renew(t, a, "k", "b", 30, time.Minute); g.Share != 35 {
		t.Fatalf("b's share = %d, want 35: what a left", g.Share)
	}
	hs, err := a.Holdings(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Holder != "a" || hs[0].Share != 65 || hs[1].Holder != "b" || hs[1].Share != 35 || hs[1].Demand != 30 {
		t.Fatalf("Holdings = %+v, want a's 65 and b's 35", hs)
	}
	if !hs[0].Expires.After(time.Now().Add(30 * time.Second)) {
		t.Fatalf("a expires at %v, want about a minute from now", hs[0].Expires)
	}
	if err := a.Release(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if g := renew(t, a, "k", "b", 30, time.Minute); g.Share != 65 || g.Holders != 1 {
		t.Fatalf("b's share after a's release = %+v, want 65 of 1 holder", g)
	}
	if err := a.Release(ctx, "k", "nobody"); err != nil {
		t.Fatalf("Release of no holding: %v, want nil", err)
	}
	if hs, err := a.Holdings(ctx, "none"); err != nil || len(hs) != 0 {
		t.Fatalf("Holdings of a key never leased = %+v, %v", hs, err)
	}
}

// TestLeaseBadInput: requests the authority does not take are refused
// with an error wrapping sluice.ErrRefused, and change nothing.
func TestLeaseBadInput(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	a := newStore(t, rc, redis.WithPrefix(p)).Authority()
	ctx := context.Background()
	renew(t, a, "k", "a", 10, time.Hour)
	before := rc.HGetAll(ctx, leaseKey(p, "k")).Val()
	good := lease.Request{Key: "k", Holder: "a", Kind: lease.Bucket, Limit: sluice.Limit{Rate: 100, Period: time.Second}, Demand: 5, TTL: time.Hour}
	for _, tc := range []struct {
		name string
		edit func(*lease.Request)
		want string
	}{
		{"empty holder", func(r *lease.Request) { r.Holder = "" }, "holder of 0 bytes"},
		{"long holder", func(r *lease.Request) { r.Holder = strings.Repeat("h", 257) }, "holder of 257 bytes"},
		{"empty key", func(r *lease.Request) { r.Key = "" }, "key of 0 bytes"},
		{"huge key", func(r *lease.Request) { r.Key = strings.Repeat("k", lease.MaxKeyBytes+1) }, "key of"},
		{"negative demand", func(r *lease.Request) { r.Demand = -1 }, "demand -1"},
		{"rate over 2^25", func(r *lease.Request) { r.Limit.Rate = sluice.MaxLeaseQuota + 1 }, "above"},
		{"negative rate", func(r *lease.Request) { r.Limit.Rate = -1 }, "rate -1"},
		{"burst over 2^25", func(r *lease.Request) { r.Limit.Burst = sluice.MaxLeaseQuota + 1 }, "above"},
		{"no period", func(r *lease.Request) { r.Limit.Period = 0 }, "period"},
		{"no kind", func(r *lease.Request) { r.Kind = 0 }, "kind"},
		{"negative used", func(r *lease.Request) { r.Used = -1 }, "used -1"},
		{"used past 2^53", func(r *lease.Request) { r.Used = math.MaxInt64 }, "used"},
		{"window past 2^53", func(r *lease.Request) { r.Window = math.MaxInt64 }, "window"},
		{"no TTL", func(r *lease.Request) { r.TTL = 0 }, "ttl"},
		{"TTL over a week", func(r *lease.Request) { r.TTL = 8 * 24 * time.Hour }, "ttl"},
	} {
		r := good
		tc.edit(&r)
		_, err := a.Renew(ctx, r)
		if !errors.Is(err, sluice.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Renew = %v, want an error wrapping sluice.ErrRefused saying %q", tc.name, err, tc.want)
		}
	}
	if err := a.Release(ctx, "k", ""); !errors.Is(err, sluice.ErrRefused) {
		t.Errorf("Release with no holder = %v, want sluice.ErrRefused", err)
	}
	if _, err := a.Holdings(ctx, strings.Repeat("k", lease.MaxKeyBytes+1)); !errors.Is(err, sluice.ErrRefused) {
		t.Errorf("Holdings of a huge key = %v, want sluice.ErrRefused", err)
	}
	if after := rc.HGetAll(ctx, leaseKey(p, "k")).Val(); !reflect.DeepEqual(after, before) {
		t.Errorf("the hash changed under refused requests")
	}
}

// TestLeaseMaxHolders: a key takes lease.MaxHolders holders; one more is
// refused, changing nothing, while those in renew; it gets in once one
// leaves.
func TestLeaseMaxHolders(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	p := prefix(t)
	a := newStore(t, rc, redis.WithPrefix(p)).Authority()
	ctx := context.Background()
	for i := range lease.MaxHolders {
		renew(t, a, "k", fmt.Sprint("h", i), 1, time.Hour)
	}
	r := lease.Request{Key: "k", Holder: "late", Kind: lease.Bucket, Limit: sluice.Limit{Rate: 100, Period: time.Second}, Demand: 1, TTL: time.Hour}
	if _, err := a.Renew(ctx, r); !errors.Is(err, lease.ErrAuthorityFull) {
		t.Fatalf("Renew of holder %d = %v, want lease.ErrAuthorityFull", lease.MaxHolders+1, err)
	}
	if n := rc.HLen(ctx, leaseKey(p, "k")).Val(); n != lease.MaxHolders {
		t.Fatalf("%d holders after a refusal, want %d", n, lease.MaxHolders)
	}
	// In a batch, the refusal is that renewal's alone.
	other := r
	other.Key = "k2"
	gs, errs := make([]lease.Grant, 2), make([]error, 2)
	a.RenewBatch(ctx, []lease.Request{r, other}, gs, errs)
	if !errors.Is(errs[0], lease.ErrAuthorityFull) || errs[1] != nil || gs[1].Share != 1+99/2 {
		t.Fatalf("RenewBatch of a full key's newcomer and a free key's = %+v, %v; want lease.ErrAuthorityFull, then a lone holder's share, %d", gs, errs, 1+99/2)
	}
	// A key Redis fails (a string where the hash goes) fails alone.
	rc.Set(ctx, leaseKey(p, "str"), "x", 0)
	bad := other
	bad.Key, other.Key = "str", "k3"
	a.RenewBatch(ctx, []lease.Request{bad, other}, gs, errs)
	if errs[0] == nil || errs[1] != nil || gs[1].Share != 1+99/2 {
		t.Fatalf("RenewBatch of a key holding a string and a free key's = %+v, %v; want an error, then a lone holder's share", gs, errs)
	}
	if g := renew(t, a, "k", "h7", 1, time.Hour); g.Holders != lease.MaxHolders {
		t.Fatalf("a holder's renewal = %+v, want %d holders", g, lease.MaxHolders)
	}
	if err := a.Release(ctx, "k", "h0"); err != nil {
		t.Fatal(err)
	}
	if g, err := a.Renew(ctx, r); err != nil || g.Holders != lease.MaxHolders {
		t.Fatalf("Renew after a release = %+v, %v, want a place", g, err)
	}
}

// TestLeaseCluster: keys in different slots of a Cluster are leased,
// listed and released, each hash in its key's slot.
func TestLeaseCluster(t *testing.T) {
	cl := startCluster(t)
	cc := cl.client(t)
	p := prefix(t)
	a := newStore(t, cc, redis.WithPrefix(p)).Authority()
	ctx := context.Background()
	for i := range 12 {
		key := fmt.Sprint("user", i)
		if g := renew(t, a, key, "a", 30, time.Minute); g.Share != 30+70/2 {
			t.Fatalf("%s: a's share = %d, want %d", key, g.Share, 30+70/2)
		}
		if g := renew(t, a, key, "b", 30, time.Minute); g.Share != 35 {
			t.Fatalf("%s: b's share = %d, want 35, what a left", key, g.Share)
		}
		hs, err := a.Holdings(ctx, key)
		if err != nil || len(hs) != 2 {
			t.Fatalf("%s: Holdings = %+v, %v", key, hs, err)
		}
		if err := a.Release(ctx, key, "a"); err != nil {
			t.Fatal(err)
		}
		if hs, err := a.Holdings(ctx, key); err != nil || len(hs) != 1 || hs[0].Holder != "b" {
			t.Fatalf("%s: Holdings after a release = %+v, %v; want b's", key, hs, err)
		}
	}
	// A batch's keys sit in many slots: each is renewed on its own node.
	var rs []lease.Request
	for i := range 12 {
		rs = append(rs, lease.Request{Key: fmt.Sprint("user", i), Holder: "b", Kind: lease.Bucket,
			Limit: sluice.Limit{Rate: 100, Period: time.Second}, Demand: 30, TTL: time.Minute})
	}
	gs, errs := make([]lease.Grant, len(rs)), make([]error, len(rs))
	a.RenewBatch(ctx, rs, gs, errs)
	for i := range rs {
		if errs[i] != nil || gs[i].Share != 30+70/2 || gs[i].Holders != 1 {
			t.Fatalf("%s: b's batched renewal, alone on the key = %+v, %v; want %d", rs[i].Key, gs[i], errs[i], 30+70/2)
		}
	}
}

// TestLeaseHolderKilled: a process killed while it holds a lease (this
// test binary run again, SIGKILLed) gives its share back at its expiry.
func TestLeaseHolderKilled(t *testing.T) {
	if addr := os.Getenv("SLUICE_LEASE_CHILD"); addr != "" {
		leaseChild(t, addr, os.Getenv("SLUICE_REDIS_PREFIX"))
		return
	}
	srv := startRedis(t)
	p := prefix(t)
	a := newStore(t, srv.client(t), redis.WithPrefix(p)).Authority()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLeaseHolderKilled$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), "SLUICE_LEASE_CHILD="+srv.addr(), "SLUICE_REDIS_PREFIX="+p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	held := false
	for !held && sc.Scan() {
		held = strings.HasPrefix(sc.Text(), "held ")
	}
	if !held {
		t.Fatalf("the child did not report its lease: %v", sc.Err())
	}
	if g := renew(t, a, "k", "parent", 100, time.Minute); g.Share != 0 || g.Holders != 2 {
		t.Fatalf("the parent's share while the child holds all = %+v, want 0 of 2 holders", g)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitShare(t, a, "k", "parent", 100)
}

// leaseChild is the holder TestLeaseHolderKilled kills: it leases all of
// the key for 2s, says so, and waits to be killed.
func leaseChild(t *testing.T, addr, p string) {
	rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	a := newStore(t, rc, redis.WithPrefix(p)).Authority()
	g := renew(t, a, "k", "child-"+strconv.Itoa(os.Getpid()), 100, 2*time.Second)
	fmt.Printf("held %d\n", g.Share)
	time.Sleep(time.Minute) // until the parent kills it
	t.Error("the child was not killed")
}

// TestLeaseRedisStopped: while Redis does not answer (SIGSTOP), Renew
// fails within the store's timeout, or by the context's deadline when it
// has one, sooner or later.
func TestLeaseRedisStopped(t *testing.T) {
	srv := startRedis(t)
	const timeout = 500 * time.Millisecond
	a := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithTimeout(timeout)).Authority()
	renew(t, a, "k", "a", 10, time.Minute)
	srv.pause(t)
	r := lease.Request{Key: "k", Holder: "a", Kind: lease.Bucket, Limit: sluice.Limit{Rate: 100, Period: time.Second}, Demand: 10, TTL: time.Minute}
	start := time.Now()
	_, err := a.Renew(context.Background(), r)
	if el := time.Since(start); !errors.Is(err, redis.ErrTimeout) || el > timeout+slack {
		t.Fatalf("Renew on a stopped Redis = %v after %v, want ErrTimeout after %v", err, el, timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = a.Renew(ctx, r)
	if el := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || el > 100*time.Millisecond+slack {
		t.Fatalf("Renew with a 100ms deadline on a stopped Redis = %v after %v, want the deadline's error", err, el)
	}
	if _, err := a.Holdings(ctx, "k"); err == nil {
		t.Fatal("Holdings on a stopped Redis succeeded")
	}
	// A deadline past the store's timeout: a renewal waits for it.
	long, cancel2 := context.WithTimeout(context.Background(), timeout+300*time.Millisecond)
	defer cancel2()
	start = time.Now()
	_, err = a.Renew(long, r)
	if el := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || el < timeout+300*time.Millisecond {
		t.Fatalf("Renew with a deadline past the store's timeout on a stopped Redis = %v after %v, want the deadline's error at %v", err, el, timeout+300*time.Millisecond)
	}
}

// TestLeaseLoad: Store.Load loads the lease script, so that the first
// renewal finds it.
func TestLeaseLoad(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)))
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	renew(t, s.Authority(), "k", "a", 10, time.Minute)
	if n := s.Stats().Reloads; n != 0 {
		t.Fatalf("reloads = %d after Load, want 0", n)
	}
}

// TestLeaseStores: two lease.Stores on one redis-server, each with a
// client and a holder of its own, decide one key of a leased fixed window
// and one of a leased token bucket from several goroutines each. Together
// they admit at most the bound: the window's Rate in each window (one
// clock, so no skew), and the bucket's capacity plus its Rate over the
// time from the first request to the last; and they do admit.
func TestLeaseStores(t *testing.T) {
	srv := startRedis(t)
	p := prefix(t)
	lz := sluice.Lease{Enabled: true, Renew: 50 * time.Millisecond, TTL: 150 * time.Millisecond}
	lim := sluice.Limit{Rate: 200, Period: time.Second}
	window := prep(sluice.Rule{Name: "w", Algorithm: sluice.AlgoFixedWindow, Limit: lim, Lease: lz})
	bucket := prep(sluice.Rule{Name: "b", Algorithm: sluice.AlgoTokenBucket, Limit: lim, Lease: lz})
	var stores []*lease.Store
	for i := range 2 {
		exact := newStore(t, srv.client(t), redis.WithPrefix(p))
		ls, err := lease.New(exact, exact.Authority(), lease.WithHolder(fmt.Sprint("store", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close(context.Background()) })
		stores = append(stores, ls)
	}
	type admitted struct {
		perWindow map[int64]int64
		bucket    int64
	}
	const workers, run = 4, 1500 * time.Millisecond
	results := make([]admitted, 2*workers)
	first := time.Now()
	var wg sync.WaitGroup
	for i := range results {
		ls := stores[i%2]
		res := &results[i]
		res.perWindow = map[int64]int64{}
		wg.Go(func() {
			out := make([]sluice.Decision, 1)
			for now := time.Now(); now.Sub(first) < run; now = time.Now() {
				for _, c := range []sluice.Check{{Rule: window, Key: "k"}, {Rule: bucket, Key: "k"}} {
					if err := ls.Take(context.Background(), now, []sluice.Check{c}, out); err != nil {
						t.Errorf("Take(%s): %v", c.Rule.Name(), err)
						return
					}
					switch {
					case !out[0].Allowed:
					case c.Rule == window:
						res.perWindow[now.UnixNano()/int64(lim.Period)]++
					default:
						res.bucket++
					}
				}
				time.Sleep(time.Millisecond) // a steady demand, far past the limit
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(first)
	perWindow, inBucket := map[int64]int64{}, int64(0)
	for _, r := range results {
		for w, n := range r.perWindow {
			perWindow[w] += n
		}
		inBucket += r.bucket
	}
	var inWindows int64
	for w, n := range perWindow {
		inWindows += n
		if n > lim.Rate {
			t.Errorf("window %d: %d admitted by the two stores, want at most %d", w, n, lim.Rate)
		}
	}
	bound := lim.Capacity() + int64(float64(lim.Rate)*elapsed.Seconds()/lim.Period.Seconds())
	if inBucket > bound {
		t.Errorf("bucket: %d admitted over %v, want at most %d (capacity and the rate over the run)", inBucket, elapsed, bound)
	}
	t.Logf("over %v: window %d admitted in %d windows, bucket %d (bound %d)", elapsed, inWindows, len(perWindow), inBucket, bound)
	if inWindows == 0 || inBucket == 0 {
		t.Errorf("the stores admitted %d in the window and %d in the bucket: leases were not granted", inWindows, inBucket)
	}
}

// TestLeaseStoreRedisStopped: while Redis does not answer (SIGSTOP), a
// lease.Store on it keeps deciding on its lease until the lease expires,
// then fails (the Limiter's failure mode), within the store's timeout;
// once Redis answers again, it decides on a new lease.
func TestLeaseStoreRedisStopped(t *testing.T) {
	srv := startRedis(t)
	const timeout = 300 * time.Millisecond
	exact := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithTimeout(timeout))
	ls, err := lease.New(exact, exact.Authority(), lease.WithHolder("a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close(context.Background()) })
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(1000),
		Lease: sluice.Lease{Enabled: true, Renew: 100 * time.Millisecond, TTL: 2 * time.Second}})
	checks := []sluice.Check{{Rule: rule, Key: "k"}}
	out := make([]sluice.Decision, 1)
	// allowedBy takes until a request is allowed, within 30s.
	allowedBy := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := ls.Take(context.Background(), time.Now(), checks, out)
			if err == nil && out[0].Allowed {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no request allowed in 30s: %v", what, err)
			}
			time.Sleep(time.Millisecond) // the lease fills at its share's rate
		}
	}
	allowedBy("before the stop")
	resume := srv.pause(t)
	held := ls.Leases()
	if len(held) != 1 {
		t.Fatalf("Leases = %+v, want one", held)
	}
	expires := held[0].Expires
	// Until the lease's expiry, decisions go on, at the store's times.
	for now := time.Now(); now.Before(expires); now = now.Add(100 * time.Millisecond) {
		if err := ls.Take(context.Background(), now, checks, out); err != nil {
			t.Fatalf("Take at %v, before the lease's expiry at %v, with Redis stopped: %v", now, expires, err)
		}
	}
	start := time.Now()
	err = ls.Take(context.Background(), expires.Add(time.Millisecond), checks, out)
	if el := time.Since(start); err == nil || el > timeout+slack {
		t.Fatalf("Take past the lease's expiry with Redis stopped = %v after %v, want an error within %v", err, el, timeout)
	}
	t.Logf("past the expiry: %v", err)
	// A new key's first request, with no deadline of its own, waits for
	// its grant the store's timeout, not its lease's TTL of an hour.
	hour := prep(sluice.Rule{Name: "h", Algorithm: sluice.AlgoFixedWindow, Limit: sluice.PerSecond(1000),
		Lease: sluice.Lease{Enabled: true, TTL: time.Hour}})
	errc := make(chan error, 1)
	go func() {
		errc <- ls.Take(context.Background(), time.Now(), []sluice.Check{{Rule: hour, Key: "new"}}, make([]sluice.Decision, 1))
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, lease.ErrTimeout) {
			t.Fatalf("a new key's first request with Redis stopped: %v, want lease.ErrTimeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a new key's first request with Redis stopped did not give up in 20s")
	}
	resume()
	allowedBy("after the resume")
}

// TestLeaseStartTokens: as the memory authority, the Redis one starts a
// holder new to a bucket key no one holds with what the key's bucket
// refilled since its last holding ended, in Redis TIME: the whole burst on
// a fresh key, none on a renewal, the refill since a release.
func TestLeaseStartTokens(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	a := newStore(t, rc, redis.WithPrefix(prefix(t))).Authority()
	ctx := context.Background()
	l := sluice.Limit{Rate: 100, Period: time.Second}
	if g := renew(t, a, "k", "a", 100, time.Minute); g.Tokens != 100 || g.Burst != 100 {
		t.Fatalf("a fresh key: %+v, want the burst of 100 as tokens", g)
	}
	if g := renew(t, a, "k", "a", 100, time.Minute); g.Tokens != 0 {
		t.Fatalf("a renewal: %d tokens, want none", g.Tokens)
	}
	if g := renew(t, a, "k", "b", 100, time.Minute); g.Tokens != 0 {
		t.Fatalf("beside a live holder: %d tokens, want none", g.Tokens)
	}
	r0 := redisMicros(t, rc)
	for _, h := range []string{"a", "b"} {
		if err := a.Release(ctx, "k", h); err != nil {
			t.Fatal(err)
		}
	}
	r1 := redisMicros(t, rc)
	deadline := time.Now().Add(30 * time.Second)
	for redisMicros(t, rc) < r1+100_000 { // Redis's time passes on its own: 100ms of refill, 10 units
		if time.Now().After(deadline) {
			t.Fatal("Redis TIME did not pass 100ms in 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b0 := redisMicros(t, rc)
	g := renew(t, a, "k", "c", 100, time.Minute)
	b1 := redisMicros(t, rc)
	lo, hi := lease.StartTokens(l, g.Burst, b0-r1, false), lease.StartTokens(l, g.Burst, b1-r0, b1-r0 >= int64(time.Second/time.Microsecond))
	if g.Tokens < lo || g.Tokens > hi || g.Tokens < 10 {
		t.Errorf("after the releases: %d tokens, want the refill since, %d to %d", g.Tokens, lo, hi)
	}
}

// TestLeaseStoreRedisLate: with Redis stopped, and the only place for a
// first grant held by one whose request gave up waiting (the store's
// timeout), a new key's request gets lease.ErrTimeout at once, which its
// rule's failure mode decides, rather than sluice.ErrShed, which denies
// whatever the failure mode: Redis is late, not flooded with new keys.
func TestLeaseStoreRedisLate(t *testing.T) {
	srv := startRedis(t)
	exact := newStore(t, srv.client(t), redis.WithPrefix(prefix(t)), redis.WithTimeout(200*time.Millisecond))
	ls, err := lease.New(exact, exact.Authority(), lease.WithHolder("a"), lease.WithMaxRenewals(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close(context.Background()) })
	rule := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoTokenBucket, Limit: sluice.PerSecond(1000),
		Failure: sluice.FailOpen, Lease: sluice.Lease{Enabled: true, TTL: time.Hour}})
	resume := srv.pause(t)
	out := make([]sluice.Decision, 1)
	for _, k := range []string{"a", "b", "c"} {
		err := ls.Take(context.Background(), time.Now(), []sluice.Check{{Rule: rule, Key: k}}, out)
		if !errors.Is(err, lease.ErrTimeout) {
			t.Errorf("key %s with Redis stopped: %v, want lease.ErrTimeout", k, err)
		}
	}
	lim, err := sluice.NewLimiter(ls)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Take(context.Background(), []sluice.Check{{Rule: rule, Key: "d"}}, nil); err != nil || !res.Allowed {
		t.Errorf("through a Limiter, failing open, with Redis stopped: %+v, %v", res, err)
	}
	resume()
}

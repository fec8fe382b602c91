package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
)

//go:embed lease.lua
var leaseScript string

// The lease script, as a script and as a library of one function, named
// for this version of it as take.lua's is.
var (
	leaseSHA = func() string {
		h := sha1.Sum([]byte(leaseScript))
		return hex.EncodeToString(h[:])
	}()
	leaseFn  = "sluice_lease_" + leaseSHA
	leaseLua = script{
		library: "#!lua name=" + leaseFn + "\n" + leaseScript + "\nredis.register_function('" + leaseFn + "', lease)\n",
		src:     leaseScript,
		sha:     leaseSHA,
	}
)

// maxExact bounds the window and the use a renewal sends, which the
// script holds as doubles; lease.CheckRequest bounds the rest.
const maxExact = 1 << 53

// Authority is a lease.Authority in the Redis of a Store: processes that
// share the Redis share each key's quota through it. It is safe for
// concurrent use. Its time is Redis TIME: a share expires TTL after the
// renewal reached Redis, later than the holder's own expiry (TTL after
// it sent the renewal), so clocks need not agree.
//
// Each lease key's holdings are one hash, under the store's prefix, its
// lease key (lease.AuthorityKey: the rule's name and the check's key) its
// own hash tag, so that on a Cluster a renewal touches one slot; the
// store's WithHashTag does not apply:
//
//	prefix{rule:key}:lease
//
// a field per holder, and the field "" when a bucket holding last ended,
// kept a refill longer than the latest expiry. A renewal reads the key's
// holders, forgets those expired, allocates (lease.Allocate, in Lua) and
// writes the holder's field, in one script run. A fixed window's holding that expired is kept, and counted, until the
// window it expired in ends, as the memory authority keeps it: its
// expiry, in Redis TIME, against the renewing holder's window, so an
// offset between the clocks moves that end by as much. Since a renewal
// reads every holder of its key, a key takes at most lease.MaxHolders: a
// new holder past that is refused, with an error wrapping
// lease.ErrAuthorityFull, until one releases or expires.
type Authority struct {
	s *Store
}

var _ lease.Batcher = (*Authority)(nil)

// Authority returns the lease authority in s's Redis. It shares s's
// client, key prefix and timeout (WithTimeout bounds each call from when
// it is sent, unless the call's context has a deadline: the lease Store
// gives a renewal its lease's TTL), and s's way of running scripts (Store.Load loads the
// lease script too). It takes no place among s's requests in flight, and
// its errors do not open s's circuit breaker: a renewal that fails leaves
// the holder on its lease until it expires.
func (s *Store) Authority() *Authority { return &Authority{s: s} }

// Timeout is the store's timeout (WithTimeout), which a lease.Store
// takes as the bound of a request's wait for a key's first grant.
func (a *Authority) Timeout() time.Duration { return a.s.timeout }

// Renew reports r's demand and returns r.Holder's share of r.Key, good for
// r.TTL from when it reached Redis (see lease.Authority). r.Now is not
// read. It errs, changing nothing, for a request lease.CheckRequest
// refuses or whose window or use is past 2^53 (wrapping
// sluice.ErrRefused), for a new holder of a key with lease.MaxHolders
// (wrapping lease.ErrAuthorityFull), or with Redis's error, ErrTimeout or
// the context's.
func (a *Authority) Renew(ctx context.Context, r lease.Request) (lease.Grant, error) {
	arg, err := renewal(r)
	if err != nil {
		return lease.Grant{}, err
	}
	cmd, err := a.call(ctx, []any{"fcall", leaseFn, 1, a.key(r.Key), "r", r.Holder, arg})
	if err != nil {
		return lease.Grant{}, err
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return lease.Grant{}, fmt.Errorf("redis: lease: %w", err)
	}
	if len(v) == 2 && v[0] == 1 {
		v = append(v, 0, 0, 0, 0, 0) // full, as a batch's answer pads it
	}
	return grant(r.Key, v)
}

// RenewBatch renews each of rs as Renew would (see lease.Batcher): on a
// single Redis in one script run, whose time is the same for all; on a
// Cluster or a Ring, whose keys sit on different nodes, a run each,
// concurrently. A request Renew refuses gets its error and is left out
// of the run.
func (a *Authority) RenewBatch(ctx context.Context, rs []lease.Request, gs []lease.Grant, errs []error) {
	if a.s.keys.share != shareNothing {
		var wg sync.WaitGroup
		for i := range rs {
			wg.Go(func() { gs[i], errs[i] = a.Renew(ctx, rs[i]) })
		}
		wg.Wait()
		return
	}
	keys := make([]any, 0, len(rs))
	argv := make([]any, 0, 2*len(rs))
	sent := make([]int, 0, len(rs))
	for i, r := range rs {
		arg, err := renewal(r)
		gs[i], errs[i] = lease.Grant{}, err
		if err == nil {
			keys = append(keys, a.key(r.Key))
			argv = append(argv, r.Holder, arg)
			sent = append(sent, i)
		}
	}
	if len(sent) == 0 {
		return
	}
	args := append(append(append(make([]any, 0, 4+len(keys)+len(argv)), "fcall", leaseFn, len(keys)), keys...), "R")
	cmd, err := a.call(ctx, append(args, argv...))
	var v []int64
	if err == nil {
		if v, err = cmd.Int64Slice(); err != nil {
			err = fmt.Errorf("redis: lease: %w", err)
		} else if len(v) != 7*len(sent) {
			err = fmt.Errorf("redis: lease: an answer of %d numbers for %d renewals, want 7 each", len(v), len(sent))
		}
	}
	for j, i := range sent {
		if err != nil {
			errs[i] = err
			continue
		}
		gs[i], errs[i] = grant(rs[i].Key, v[7*j:7*j+7])
	}
}

// grant decodes the script's answer to one renewal of key: 0 and the
// grant's six numbers, 1 and the key's holders when it has the most, or
// 2 when Redis failed it (in a batch).
func grant(key string, v []int64) (lease.Grant, error) {
	switch {
	case len(v) == 7 && v[0] == 1:
		return lease.Grant{}, fmt.Errorf("redis: %w: key %q has %d holders", lease.ErrAuthorityFull, key, v[1])
	case len(v) == 7 && v[0] == 2:
		return lease.Grant{}, fmt.Errorf("redis: lease: key %q: Redis failed its renewal (does another type of value hold its hash?)", key)
	case len(v) != 7 || v[0] != 0:
		return lease.Grant{}, fmt.Errorf("redis: lease: an answer of %d numbers, want 7", len(v))
	}
	return lease.Grant{Share: v[1], Burst: v[2], Allowance: v[3], Holders: int(v[4]), Demand: v[5], Tokens: v[6]}, nil
}

// Release forgets holder's share of key at once: the others take it at
// their next renewals (a window's allowance in its window still counts,
// see lease.Authority).
func (a *Authority) Release(ctx context.Context, key, holder string) error {
	if err := checkNames(key, holder); err != nil {
		return err
	}
	_, err := a.call(ctx, []any{"fcall", leaseFn, 1, a.key(key), "x", holder})
	return err
}

// Holdings lists key's live holdings, by holder, their expiry in Redis
// TIME.
func (a *Authority) Holdings(ctx context.Context, key string) ([]lease.Holding, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	cmd, err := a.call(ctx, []any{"fcall", leaseFn, 1, a.key(key), "h"})
	if err != nil {
		return nil, err
	}
	v, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: lease: %w", err)
	}
	return holdings(v)
}

// holdings decodes the script's list: the time, then each holder and its
// value. The expired are left out.
func holdings(v []any) ([]lease.Holding, error) {
	if len(v)%2 != 1 {
		return nil, errors.New("redis: lease: a list not of the time, then holders and values")
	}
	now, ok := v[0].(int64)
	if !ok {
		return nil, fmt.Errorf("redis: lease: the time is %T, not an integer", v[0])
	}
	var hs []lease.Holding
	for i := 1; i < len(v); i += 2 {
		holder, ok1 := v[i].(string)
		val, ok2 := v[i+1].(string)
		if holder == "" && ok1 {
			continue // when a bucket holding last ended
		}
		if !ok1 || !ok2 || len(val) != 48 {
			return nil, fmt.Errorf("redis: lease: holder %v: not a holding", v[i])
		}
		var f [6]float64
		for j := range f {
			f[j] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(val[8*j:])))
		}
		if int64(f[5]) <= now {
			continue
		}
		hs = append(hs, lease.Holding{
			Holder: holder, Demand: int64(f[0]), Share: int64(f[1]), Burst: int64(f[2]),
			Window: int64(f[3]), Allowance: int64(f[4]), Expires: time.UnixMicro(int64(f[5])),
		})
	}
	slices.SortFunc(hs, func(a, b lease.Holding) int { return strings.Compare(a.Holder, b.Holder) })
	return hs, nil
}

// call runs lease.lua with args (see link.call) on the store's client,
// by ctx's deadline, or without one within the store's timeout.
func (a *Authority) call(ctx context.Context, args []any) (*goredis.Cmd, error) {
	s := a.s
	// A renewal runs off the request path (but for a key's first grant)
	// and is good until its lease's TTL, which the lease Store gives as
	// its deadline: the store's timeout, made for decisions, bounds only
	// a call with no deadline of its own.
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok && s.timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, s.timeout)
	}
	defer cancel()
	cmd, err := s.main.call(rctx, &leaseLua, args)
	switch {
	case err == nil:
		return cmd, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("redis: lease: %w", ctx.Err())
	case rctx.Err() != nil:
		return nil, fmt.Errorf("%w (%v)", ErrTimeout, s.timeout)
	}
	return nil, fmt.Errorf("redis: lease: %w", err)
}

// key is the hash of key's holdings.
func (a *Authority) key(key string) string {
	return a.s.keys.prefix + "{" + escape(key) + "}:lease"
}

// renewal is the script's argument for r, or the error for bad input.
func renewal(r lease.Request) (string, error) {
	err := lease.CheckRequest(r)
	switch {
	case err != nil:
	case r.Window < -maxExact || r.Window > maxExact:
		err = fmt.Errorf("lease: window %d outside ±2^53", r.Window)
	case r.Used > maxExact:
		err = fmt.Errorf("lease: used %d past 2^53", r.Used)
	}
	if err != nil {
		return "", fmt.Errorf("redis: %w: %w", err, sluice.ErrRefused)
	}
	// Demand past the cap asks for no more (see lease.Allocate), and the
	// script caps it again; this keeps the double exact. A TTL counts in
	// whole µs, rounded up, so that it never comes to nothing.
	d := min(r.Demand, 4*r.Limit.Rate+4)
	ttl := (r.TTL + time.Microsecond - 1) / time.Microsecond
	b := make([]byte, 0, 72)
	for _, f := range []float64{float64(r.Kind), float64(r.Limit.Rate), float64(r.Limit.Capacity()), float64(d),
		float64(r.Window), float64(r.Used), float64(ttl), lease.MaxHolders, float64(r.Limit.Period) / 1e3} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return string(b), nil
}

// checkNames errs for a key or holder the authority does not take.
func checkNames(key, holder string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if holder == "" {
		return fmt.Errorf("redis: lease %q: no holder: %w", key, sluice.ErrRefused)
	}
	return nil
}

// checkKey errs for a key lease.CheckRequest refuses.
func checkKey(key string) error {
	if key == "" || len(key) > lease.MaxKeyBytes {
		return fmt.Errorf("redis: lease: key of %d bytes (want 1 to %d): %w", len(key), lease.MaxKeyBytes, sluice.ErrRefused)
	}
	return nil
}

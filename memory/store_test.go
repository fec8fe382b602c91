package memory

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/teststore"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func gcra(name string, l sluice.Limit) *sluice.PreparedRule {
	return prep(sluice.Rule{Name: name, Algorithm: sluice.AlgoGCRA, Limit: l})
}

// take calls s.Take and fails the test on an error.
func take(t *testing.T, s *Store, now time.Time, n int64, checks ...sluice.Check) []sluice.Decision {
	t.Helper()
	out := make([]sluice.Decision, len(checks))
	if err := s.Take(context.Background(), now, costed(n, checks), out); err != nil {
		t.Fatalf("Take(t0+%v, %d) = %v", now.Sub(t0), n, err)
	}
	return out
}

// has reports whether s holds key under r, without touching it.
func (s *Store) has(r *sluice.PreparedRule, key string) bool {
	sp := algo.Of(r)
	if sp == nil {
		return false
	}
	var p probe
	p.init(s.hash(sp, key), key)
	sh := s.shard(p.h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	_, ok := sh.find(&p, sp)
	return ok
}

// check verifies the table's invariants: n counts the cells in use, each
// is found from its home, the side arrays hold what the cells say and the
// rule set counts each rule's cells.
func (sh *shard) check(t *testing.T) {
	t.Helper()
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	live, longs, wins := 0, 0, 0
	perRule := make([]int, len(sh.rules.slots)+1)
	for i := range sh.tab {
		c := &sh.tab[i]
		if c.rid == 0 {
			if sh.longs != nil && sh.longs[i] != nil || sh.wins != nil && sh.wins[i] != nil {
				t.Errorf("empty cell %d holds a long key or a window", i)
			}
			continue
		}
		live++
		perRule[c.rid]++
		sp := sh.rules.slots[c.rid-1].sp
		key := ""
		if c.tag&tagLong != 0 {
			longs++
			key = unsafe.String(sh.longs[i], int(c.k[1]))
		} else {
			var b [inlineKey]byte
			binary.LittleEndian.PutUint64(b[:8], c.k[0])
			binary.LittleEndian.PutUint64(b[8:], c.k[1])
			key = strings.TrimRight(string(b[:]), "\x00")
		}
		if sp.Kind != algo.KindBucket {
			wins++
			if sh.wins[i] == nil {
				t.Errorf("cell %d of a window rule has no window", i)
			}
		}
		var p probe
		p.init(maphash.String(sh.seed, key)^sp.Hash, key)
		if j := sh.lookup(&p, c.rid); j != i {
			t.Errorf("the key in cell %d of %d is found at %d", i, len(sh.tab), j)
		}
	}
	if live != sh.n || longs != sh.nLong || wins != sh.nWin {
		t.Errorf("%d cells, %d long keys, %d windows in the table; counted %d, %d, %d", live, longs, wins, sh.n, sh.nLong, sh.nWin)
	}
	for id, sl := range sh.rules.slots {
		if sl.n != perRule[id+1] {
			t.Errorf("rule %d counts %d keys, the table holds %d", id+1, sl.n, perRule[id+1])
		}
	}
	if got := sh.sideBytes(); got != sh.side {
		t.Errorf("side bytes counted %d, held %d", sh.side, got)
	}
}

// key16 writes the 16-byte key of i into buf: "key-000000012345".
func key16(buf []byte, i int) string {
	copy(buf, "key-")
	for j := len(buf) - 1; j >= 4; j-- {
		buf[j] = byte('0' + i%10)
		i /= 10
	}
	return string(buf)
}

func TestNewOptions(t *testing.T) {
	bad := []struct {
		name string
		opt  Option
	}{
		{"zero keys", WithMaxKeys(0)},
		{"negative keys", WithMaxKeys(-1)},
		{"negative shards", WithShards(-1)},
		{"too many shards", WithShards(maxShards + 1)},
		{"negative sweep", WithSweepInterval(-time.Second)},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if s, err := New(c.opt); err == nil || !errors.Is(err, ErrInvalidOption) {
				s.Close()
				t.Errorf("New(%s) = %v, want an error wrapping ErrInvalidOption", c.name, err)
			}
		})
	}
	if _, err := New(WithShards(8), WithMaxKeys(4)); err == nil {
		t.Errorf("New(WithShards(8), WithMaxKeys(4)): no error for shards without keys")
	}

	shards := []struct {
		opts       []Option
		wantShards int
	}{
		{[]Option{WithShards(5)}, 8},
		{[]Option{WithShards(1)}, 1},
		{[]Option{WithMaxKeys(100)}, 1},
		{[]Option{WithMaxKeys(3), WithShards(3)}, 2},
		{[]Option{WithMaxKeys(1 << 20)}, max(16, 16*runtime.GOMAXPROCS(0))},
	}
	for _, c := range shards {
		s := newStore(t, c.opts...)
		if len(s.shards) != c.wantShards {
			t.Errorf("shards for %d options = %d, want %d", len(c.opts), len(s.shards), c.wantShards)
		}
		if cfg, _ := newConfig(c.opts); s.bound.Hard != int64(cfg.MaxKeys) || s.bound.Soft != int64(cfg.MaxKeys-len(s.shards)+1) {
			t.Errorf("bounds %d, %d for %d keys in %d shards", s.bound.Soft, s.bound.Hard, cfg.MaxKeys, len(s.shards))
		}
	}
}

// TestMaxKeys: a million distinct keys arriving at a store bounded to
// 100,000 leave it at 100,000, holding the newest; and each key costs
// under 100 bytes (a GCRA key named by 16 bytes).
func TestMaxKeys(t *testing.T) {
	const bound = 100_000
	n := 1_000_000
	if raceEnabled {
		n = 200_000 // the race detector makes the million take half a minute
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	s := newStore(t, WithMaxKeys(bound), WithSweepInterval(0))
	r := gcra("per-key", sluice.PerHour(10)) // nothing goes idle within the test
	buf := make([]byte, 16)
	checks := make([]sluice.Check, 1)
	out := make([]sluice.Decision, 1)
	for i := range n {
		checks[0] = sluice.Check{Rule: r, Key: key16(buf, i)}
		if err := s.Take(context.Background(), t0.Add(time.Duration(i)*time.Microsecond), checks, out); err != nil || !out[0].Allowed {
			t.Fatalf("Take on new key %d = %+v, %v, want allowed", i, out[0], err)
		}
		if i%10_000 == 0 && s.Len() > bound {
			t.Fatalf("after %d keys, Len() = %d, want at most %d", i+1, s.Len(), bound)
		}
	}
	if got, min := s.Len(), bound-len(s.shards)+1; got < min || got > bound {
		t.Errorf("after %d keys, Len() = %d, want %d to %d: nothing is idle, so the store is full", n, got, min, bound)
	}

	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / float64(s.Len())
	t.Logf("%d keys held of %d arrived: %.1f heap bytes per key (GCRA, 16-byte keys, %d shards)", s.Len(), n, perKey, len(s.shards))
	if perKey >= 100 {
		t.Errorf("%.1f bytes per key, want under 100", perKey)
	}

	newest, oldest := 0, 0
	for i := range 10_000 {
		if s.has(r, key16(buf, n-1-i)) {
			newest++
		}
		if s.has(r, key16(buf, i)) {
			oldest++
		}
	}
	if newest != 10_000 || oldest != 0 {
		t.Errorf("of the 10,000 newest keys %d are held, of the 10,000 oldest %d; want all and none", newest, oldest)
	}
	runtime.KeepAlive(s)
}

// TestMaxKeysWindows: the window algorithms are bounded alike.
func TestMaxKeysWindows(t *testing.T) {
	for _, a := range []sluice.Algo{sluice.AlgoFixedWindow, sluice.AlgoSlidingCounter, sluice.AlgoSlidingLog} {
		t.Run(string(a), func(t *testing.T) {
			const bound = 2_000
			s := newStore(t, WithMaxKeys(bound), WithSweepInterval(0))
			r := prep(sluice.Rule{Name: "w", Algorithm: a, Limit: sluice.PerHour(10)})
			for i := range 20_000 {
				if d := take(t, s, t0.Add(time.Duration(i)*time.Millisecond), 1, sluice.Check{Rule: r, Key: fmt.Sprint(i)})[0]; !d.Allowed {
					t.Fatalf("Take on new key %d = %+v, want allowed", i, d)
				}
			}
			if got, min := s.Len(), bound-len(s.shards)+1; got < min || got > bound {
				t.Errorf("Len() = %d, want %d to %d", got, min, bound)
			}
		})
	}
}

// TestEvictionOrder follows eviction on one shard of three keys: the
// least recently used key goes first, and an idle key before any. (With
// three keys, the eight keys sampled are all of them.) The long rule
// allows two an hour, so that a key charged once still allows and may go.
func TestEvictionOrder(t *testing.T) {
	long := gcra("long", sluice.PerHour(2))
	short := gcra("short", sluice.PerSecond(1))
	steps := []struct {
		do   string // "+k" charges k, "?k" peeks at k, "~k" charges k under the short rule
		held string // the keys held under the long rule after the step
	}{
		{"+a", "a"},
		{"+b", "ab"},
		{"+c", "abc"},
		{"?a", "abc"}, // a is used
		{"+d", "acd"}, // b is the least recently used
		{"+e", "ade"}, // then c
		{"+f", "def"}, // then a, used before d, e and f were added
		{"?d", "def"}, // d is used
		{"~x", "df"},  // e goes
		{"+g", "dfg"}, // x is idle by now: it goes before f, the least recently used
	}
	s := newStore(t, WithShards(1), WithMaxKeys(3), WithSweepInterval(0))
	for i, st := range steps {
		now := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		if st.do == "+g" {
			now = t0.Add(2 * time.Second)
		}
		k := st.do[1:]
		switch st.do[0] {
		case '+':
			take(t, s, now, 1, sluice.Check{Rule: long, Key: k})
		case '?':
			take(t, s, now, 0, sluice.Check{Rule: long, Key: k})
		case '~':
			take(t, s, now, 1, sluice.Check{Rule: short, Key: k})
		}
		held := ""
		for _, k := range "abcdefg" {
			if s.has(long, string(k)) {
				held += string(k)
			}
		}
		if held != st.held {
			t.Fatalf("after %s: held %q, want %q", st.do, held, st.held)
		}
	}
	if s.has(short, "x") || s.Len() != 3 {
		t.Errorf("at the end: x held %v, Len() = %d; want false, 3", s.has(short, "x"), s.Len())
	}
}

// TestEvictionSparesDenying: a key that would deny is never evicted, even
// the least recently used; a live key that would still allow goes in its
// place, and when every key would deny the new key is refused (ErrFull)
// and nothing changes.
func TestEvictionSparesDenying(t *testing.T) {
	r := gcra("r", sluice.PerHour(2))
	s := newStore(t, WithShards(1), WithMaxKeys(3), WithSweepInterval(0))
	ctx := context.Background()
	out := make([]sluice.Decision, 1)
	steps := []struct {
		key  string
		err  error
		held string
	}{
		{"a", nil, "a"},
		{"a", nil, "a"}, // a is spent: it denies for half an hour
		{"b", nil, "ab"},
		{"c", nil, "abc"},
		{"d", nil, "acd"}, // a is the least recently used, but denies: b goes
		{"e", nil, "ade"}, // then c
		{"d", nil, "ade"},
		{"e", nil, "ade"},     // every key denies now
		{"f", ErrFull, "ade"}, // so f finds no room
	}
	for i, st := range steps {
		now := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		err := s.Take(ctx, now, []sluice.Check{{Rule: r, Key: st.key}}, out)
		if !errors.Is(err, st.err) || (err == nil) != (st.err == nil) {
			t.Fatalf("step %d, +%s: %v, want %v", i, st.key, err, st.err)
		}
		held := ""
		for _, k := range "abcdef" {
			if s.has(r, string(k)) {
				held += string(k)
			}
		}
		if held != st.held {
			t.Fatalf("step %d, +%s: held %q, want %q", i, st.key, held, st.held)
		}
	}
	want := Stats{Keys: 3, Bytes: s.Bytes(), EvictedLive: 2, Refused: 1}
	if got := s.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	// Once a key is idle again it goes first, losing nothing.
	if err := s.Take(ctx, t0.Add(2*time.Hour), []sluice.Check{{Rule: r, Key: "f"}}, out); err != nil || !out[0].Allowed {
		t.Fatalf("+f two hours later: %+v, %v; want allowed", out[0], err)
	}
	if got := s.Stats(); got.EvictedIdle != 1 || got.EvictedLive != 2 {
		t.Errorf("Stats() after +f = %+v, want one idle eviction", got)
	}
	s.shards[0].check(t)
}

// TestSweep: a key is dropped exactly when its ResetAfter has passed, for
// every algorithm, and a sparse shard gives its memory back.
func TestSweep(t *testing.T) {
	for _, a := range sluice.Algos() {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, WithSweepInterval(0))
			r := prep(sluice.Rule{Name: "r", Algorithm: a, Limit: sluice.PerSecond(3)})
			now := t0.Add(123456789)
			d := take(t, s, now, 2, sluice.Check{Rule: r, Key: "k"})[0]
			if s.Len() != 1 || d.ResetAfter <= 0 {
				t.Fatalf("after a charge: Len() = %d, %+v; want 1 key with a ResetAfter", s.Len(), d)
			}
			if got := s.Sweep(now.Add(d.ResetAfter - 1)); got != 0 || s.Len() != 1 {
				t.Errorf("Sweep(now+ResetAfter-1ns) dropped %d, Len() = %d; want 0, 1", got, s.Len())
			}
			if got := s.Sweep(now.Add(d.ResetAfter)); got != 1 || s.Len() != 0 {
				t.Errorf("Sweep(now+ResetAfter) dropped %d, Len() = %d; want 1, 0", got, s.Len())
			}
		})
	}

	t.Run("compacts", func(t *testing.T) {
		s := newStore(t, WithShards(1), WithSweepInterval(0))
		r := gcra("r", sluice.PerSecond(1))
		long := gcra("long", sluice.PerHour(1))
		for i := range 10_000 {
			take(t, s, t0, 1, sluice.Check{Rule: r, Key: fmt.Sprint(i)})
		}
		for i := range 10 {
			take(t, s, t0, 1, sluice.Check{Rule: long, Key: fmt.Sprint(i)})
		}
		if got := s.Sweep(t0.Add(time.Second)); got != 10_000 {
			t.Fatalf("Sweep dropped %d, want 10000", got)
		}
		sh := &s.shards[0]
		sh.check(t)
		if sh.n != 10 || len(sh.tab) > 2*minTable {
			t.Errorf("after the sweep: %d keys in %d cells; want 10 in at most %d", sh.n, len(sh.tab), 2*minTable)
		}
		for i := range 10 {
			if d := take(t, s, t0.Add(time.Second), 1, sluice.Check{Rule: long, Key: fmt.Sprint(i)})[0]; d.Allowed {
				t.Errorf("key %d of the long rule after compaction: %+v, want denied: its state was lost", i, d)
			}
		}
	})
}

// TestSweeperAndClose runs the background sweeper on the fake clock of a
// synctest bubble: it drops what is idle as of the latest time seen, and
// Close stops it (the bubble would deadlock on a goroutine left behind).
func TestSweeperAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(WithShards(1), WithSweepInterval(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		r := gcra("r", sluice.PerSecond(1))
		take(t, s, t0, 1, sluice.Check{Rule: r, Key: "old"})
		take(t, s, t0.Add(time.Hour), 1, sluice.Check{Rule: r, Key: "new"})
		time.Sleep(time.Minute - 1)
		synctest.Wait()
		if s.Len() != 2 {
			t.Errorf("before the first sweep, Len() = %d, want 2", s.Len())
		}
		time.Sleep(1)
		synctest.Wait()
		if s.Len() != 1 || !s.has(r, "new") {
			t.Errorf("after the sweep, Len() = %d, want only the new key", s.Len())
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if err := s.Take(context.Background(), t0, []sluice.Check{{Rule: r, Key: "k"}}, make([]sluice.Decision, 1)); !errors.Is(err, ErrClosed) {
			t.Errorf("Take after Close = %v, want ErrClosed", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close() = %v", err)
		}
	})
}

// TestRuleIdentity: a rule is its name, algorithm and limit. The same
// values prepared again share the state; a changed limit or algorithm
// starts afresh and never reads the old state with the new arithmetic;
// changing back finds the old state.
func TestRuleIdentity(t *testing.T) {
	s := newStore(t, WithSweepInterval(0))
	r := sluice.Rule{Name: "api", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(2)}
	c := func() sluice.Check { return sluice.Check{Rule: prep(r), Key: "k"} }
	take(t, s, t0, 2, c())
	if d := take(t, s, t0, 1, c())[0]; d.Allowed {
		t.Errorf("the rule prepared again: %+v, want denied, sharing the state", d)
	}
	r.Limit = sluice.PerHour(5) // reloaded
	if d := take(t, s, t0, 1, c())[0]; !d.Allowed || d.Remaining != 4 {
		t.Errorf("after the limit changed to 5/h: %+v, want a fresh key: allowed, Remaining 4", d)
	}
	r.Algorithm = sluice.AlgoFixedWindow
	if d := take(t, s, t0, 1, c())[0]; !d.Allowed || d.Remaining != 4 {
		t.Errorf("after the algorithm changed: %+v, want a fresh key: allowed, Remaining 4", d)
	}
	r.Algorithm, r.Limit = sluice.AlgoGCRA, sluice.PerHour(2)
	if d := take(t, s, t0, 0, c())[0]; d.Remaining != 0 {
		t.Errorf("back to 2/h: %+v, want the old state, Remaining 0", d)
	}
	r.Shadow, r.Failure = true, sluice.FailClosed
	if d := take(t, s, t0, 0, c())[0]; d.Remaining != 0 {
		t.Errorf("in shadow mode: %+v, want the same state, Remaining 0", d)
	}
}

// TestManyRules: a caller making a new rule for every request grows the
// store by its keys only: the store keeps no table of rules.
func TestManyRules(t *testing.T) {
	s := newStore(t, WithMaxKeys(100), WithSweepInterval(0))
	for i := range 20_000 {
		r := gcra(fmt.Sprint("tenant-", i), sluice.PerHour(10))
		take(t, s, t0, int64(i%2), sluice.Check{Rule: r, Key: "k"}) // half peeks: no state
	}
	if got := s.Len(); got > 100 {
		t.Errorf("Len() = %d, want at most 100", got)
	}
	// The shards' rule sets went past the few rules they search in order
	// and were numbered afresh as their tables shrank: still whole.
	s.Sweep(t0.Add(2 * time.Hour))
	for i := range s.shards {
		s.shards[i].check(t)
		if n := len(s.shards[i].rules.slots); n > maxScan {
			t.Errorf("shard %d: %d rule slots with no keys left", i, n)
		}
	}
	s.checkBytes(t, DefaultMaxBytes)
}

// TestAllocs: deciding for existing keys allocates nothing, one check or
// several, whatever the algorithm.
func TestAllocs(t *testing.T) {
	s := newStore(t, WithSweepInterval(0))
	var checks []sluice.Check
	for _, a := range sluice.Algos() {
		checks = append(checks, sluice.Check{Rule: prep(sluice.Rule{Name: "r", Algorithm: a, Limit: sluice.PerSecond(1000)}), Key: "some-client-key"})
	}
	out := make([]sluice.Decision, len(checks))
	ctx := context.Background()
	now := t0
	take(t, s, now, 1, checks...)
	for i := range checks {
		t.Run(string(checks[i].Rule.Rule().Algorithm), func(t *testing.T) {
			if a := testing.AllocsPerRun(100, func() {
				now = now.Add(time.Millisecond)
				s.Take(ctx, now, checks[i:i+1], out)
			}); a != 0 {
				t.Errorf("Take on an existing key: %v allocations, want 0", a)
			}
		})
	}
	t.Run("policy", func(t *testing.T) {
		if a := testing.AllocsPerRun(100, func() {
			now = now.Add(time.Millisecond)
			s.Take(ctx, now, checks, out)
		}); a != 0 {
			t.Errorf("Take of %d checks on existing keys: %v allocations, want 0", len(checks), a)
		}
	})
}

// TestTakeErrors: an error charges nothing and says why.
func TestTakeErrors(t *testing.T) {
	s := newStore(t, WithSweepInterval(0))
	good := sluice.Check{Rule: gcra("good", sluice.PerHour(3)), Key: "k"}
	cases := []struct {
		name   string
		checks []sluice.Check
		out    int
		want   string
	}{
		{"short out", []sluice.Check{good, good}, 1, "memory: out shorter than checks: 1 decisions for 2 checks"},
		{"nil rule", []sluice.Check{good, {Key: "k"}}, 2, "memory: check 1 has no rule"},
		{"unprepared rule", []sluice.Check{good, {Rule: &sluice.PreparedRule{}, Key: "k"}}, 2, "memory: check 1: the rule is not prepared"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.Take(context.Background(), t0, c.checks, make([]sluice.Decision, c.out))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("Take = %v, want an error starting %q", err, c.want)
			}
		})
	}
	if d := take(t, s, t0, 0, good)[0]; d.Remaining != 3 {
		t.Errorf("after the failed calls, the good rule: %+v, want Remaining 3: charged nothing", d)
	}
	if s.Len() != 0 {
		t.Errorf("Len() = %d, want 0: failed calls store nothing", s.Len())
	}
}

// The tests' rules are valid, and their requests have a cost (see
// teststore.Costed).
var (
	prep   = teststore.Prepare
	costed = teststore.Costed
)

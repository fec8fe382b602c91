package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/sluicehq/sluice/internal/algo"
)

// A script run decides a batch of requests of one flavour (take.lua's
// flavour, the third byte of its ARGV head): whole requests, parts of a
// request decided in parts, or a give-back. The flavour is fixed per run,
// so it is told once, as a value of its own, rather than by each request.
type flavour interface {
	// mode is the flavour's byte in the run's head.
	mode() byte
	// stride is how many numbers the script answers per check.
	stride() int
	// appendCheck appends to run what the flavour sends for check i of a
	// request after its rule and cost.
	appendCheck(run []byte, i int) []byte
}

// whole is the flavour of whole requests: six numbers a check.
type whole struct{}

func (whole) mode() byte                           { return 0 }
func (whole) stride() int                          { return 6 }
func (whole) appendCheck(run []byte, _ int) []byte { return run }

// taking is the flavour of a part of a request decided in parts: with a
// receipt per check, eight numbers a check (see split.go).
type taking struct{}

func (taking) mode() byte                           { return modeTake }
func (taking) stride() int                          { return 8 }
func (taking) appendCheck(run []byte, _ int) []byte { return run }

// giving is the flavour of a give-back: each check with the receipt its
// take answered (taken, eight numbers a check). A give-back goes in a run
// of its own, so the run's one request is the one taken speaks of.
type giving struct{ taken []int64 }

func (*giving) mode() byte  { return modeGive }
func (*giving) stride() int { return 6 }
func (g *giving) appendCheck(run []byte, i int) []byte {
	run = appendF64(run, float64(g.taken[8*i+6]))
	return appendF64(run, float64(g.taken[8*i+7]))
}

// run decides a batch of requests in one script run on l: FCALL, or
// EVALSHA without functions (see exec). It sets each request's reply, or
// its error alone. buf, if not nil, lends the run's slices, and keeps
// them for the next run. redo is set for a run of requests a run just
// sent back (see decodeRun): they keep off the paths of their own.
//
// Only a client called directly is done with a command when it returns:
// called aside or through the autopipeliner, it may still be writing one
// the store stopped waiting for. So only then does a run lend its slices
// and its requests' keys to the client rather than copies.
func (l *link) run(ctx context.Context, f flavour, batch []*pending, buf *runBuf, redo bool) error {
	lend := l.via == viaDirect && buf != nil
	if !lend {
		buf = new(runBuf)
	}
	e := encoder{l: l, f: f, lend: lend, redo: redo}
	args := e.encode(batch, buf)
	if lend {
		// The slices go back for the next run once the call is over: the
		// client keeps nothing of a command after it returns.
		defer buf.reset(args)
	}
	l.s.st.runs.Add(1)
	reply, err := l.exec(ctx, args)
	if err != nil {
		return fmt.Errorf("redis: take: %w", err)
	}
	again, err := decodeRun(f, batch, buf.run[runHead:runHead+len(batch)], reply)
	if err != nil {
		return err
	}
	// The requests of a run were in flight together: deciding these after
	// the others breaks no order a caller could see. An error is theirs
	// alone: the others were decided.
	if again != nil {
		if err := l.run(ctx, f, again, nil, true); err != nil {
			for _, p := range again {
				p.err = err
			}
		}
	}
	return nil
}

// runBuf holds a run's slices for the next run by the same leader.
type runBuf struct {
	args  []any
	run   []byte
	kb    []byte   // the bytes of wkeys
	wkeys []string // windowed keys, see appendKeys
}

// reset keeps the slices of a run whose call is over, args its command.
func (b *runBuf) reset(args []any) {
	clear(args)
	clear(b.wkeys)
	b.args, b.run = args[:0], b.run[:0]
	b.kb, b.wkeys = b.kb[:0], b.wkeys[:0]
}

// encoder writes one run's command: its ARGV head, the requests, the
// keys and the rules. The batch and the buffers are arguments of its
// methods, not fields: the compiler keeps them on the stack so.
type encoder struct {
	l    *link
	f    flavour
	lend bool
	redo bool
	// guess is the time of the one-byte requests on a window's counter,
	// which go with their window's key (see appendKeys).
	guess            int64
	anyFast, allFast bool
}

// encode is the run's command: FCALL, the function, the keys, the run's
// ARGV[1] and the rules' records. Sent to a Cluster node, the keys go
// last, in ARGV. The run's rules are each sent once however many
// requests name them.
func (e *encoder) encode(batch []*pending, buf *runBuf) []any {
	s := e.l.s
	clock := s.clock && !e.l.node
	var rbuf [4]runRule
	run, rules := e.requests(batch, buf, rbuf[:0])
	nkeys := 0
	for _, p := range batch {
		nkeys += len(p.keys)
	}
	if clock {
		nkeys++
	}
	putRunHead(run, runFlags(e.l.node, clock, e.f.mode(), e.anyFast), batch[0].now, e.guess, len(rules), len(batch))
	buf.run = run
	args := slices.Grow(buf.args[:0], 3+nkeys+1+len(rules))
	fn := takeFnArg
	if e.allFast && clock && allWindowed(rules, s.clock) {
		fn = fixedFnArg // see fixedrun in take.lua
	}
	args = append(args, "fcall", fn, nkeys)
	if e.l.node {
		args[2] = 0 // the keys go last, in ARGV
	}
	if clock {
		args = append(args, s.clockArg)
	}
	tail := len(args) // where the keys begin
	args = e.appendKeys(batch, buf, args)
	args = append(args, run)
	for _, r := range rules {
		args = append(args, s.record(r))
	}
	if e.l.node {
		// the keys after the rules: rotate them from tail to the end
		keys := len(args) - tail - 1 - len(rules)
		slices.Reverse(args[tail : tail+keys])
		slices.Reverse(args[tail+keys:])
		slices.Reverse(args[tail:])
	}
	return args
}

// requests writes the run's ARGV[1] but for its head, which it leaves
// room for: the shape, a byte per request, its rule for a request that
// takes a path of its own in the script (see fastRule), else 0 and the
// request after the shape. Those requests share one time, so they go
// only in runs whose requests all have the same: at Redis TIME, every
// run. It adds the requests' rules to rules.
func (e *encoder) requests(batch []*pending, buf *runBuf, rules []runRule) ([]byte, []runRule) {
	s := e.l.s
	size := 0
	for _, p := range batch {
		size += 16 + 32*len(p.args)
	}
	run := slices.Grow(buf.run[:0], runHead+len(batch)+size)
	run = run[:runHead+len(batch)]
	common := true
	for _, p := range batch[1:] {
		common = common && p.now == batch[0].now
	}
	// The one-byte requests on a window's counter go with their window's
	// key, guessed from the store's clock (WithBreakerClock): the script
	// mends the guess when Redis TIME says otherwise, and is spared a
	// string per request when it does not.
	if !s.callerTime {
		e.guess = s.br.clock.Now().UnixMicro()
	} else if common {
		e.guess = int64(batch[0].now)
	}
	e.allFast = true
	for j, p := range batch {
		if common && e.f.mode() == 0 && s.fastRule(p, e.redo) {
			var ri int
			rules, ri = ruleIndex(rules, p.args[0].p, p.args[0].shadow)
			if ri <= 255 {
				run[runHead+j] = byte(ri)
				e.anyFast = true
				continue
			}
		}
		run[runHead+j] = 0
		e.allFast = false
		run, rules = appendRequest(e.f, run, rules, p)
	}
	return run, rules
}

// appendRequest appends p, as the script's general path reads it, to
// run, and its rules to rules.
func appendRequest(f flavour, run []byte, rules []runRule, p *pending) ([]byte, []runRule) {
	run = appendF64(run, p.now)
	run = appendF64(run, float64(len(p.args)))
	for i, a := range p.args {
		var ri int
		rules, ri = ruleIndex(rules, a.p, a.shadow)
		run = appendF64(run, float64(ri))
		// A cost is a double there as it was when the script read it
		// as a decimal: float64 rounds alike.
		run = appendF64(run, float64(a.cost))
		run = f.appendCheck(run, i)
	}
	return run, rules
}

// appendKeys appends the run's keys. A key lent goes by its address,
// which boxes without allocating: the request outlives the call. The keys
// of one-byte requests on a window's counter, their window's start
// appended, are made in kb, sized first so that it never moves, and go as
// strings over its bytes (wkeys, for their addresses): no allocation per
// request.
func (e *encoder) appendKeys(batch []*pending, buf *runBuf, args []any) []any {
	clock := e.l.s.clock
	shape := buf.run[runHead:] // a request's byte: its rule if it went as one byte
	need, nw := 0, 0
	for j, p := range batch {
		if shape[j] != 0 && p.args[0].p.windowed(clock) {
			need += len(p.keys[0]) + 20
			nw++
		}
	}
	kb := slices.Grow(buf.kb[:0], need)
	wkeys := slices.Grow(buf.wkeys[:0], nw)
	for j, p := range batch {
		if shape[j] != 0 && p.args[0].p.windowed(clock) {
			from := len(kb)
			kb = p.args[0].p.appendWindowStart(append(kb, p.keys[0]...), e.guess)
			wkeys = append(wkeys, unsafe.String(&kb[from], len(kb)-from))
			if e.lend {
				args = append(args, &wkeys[len(wkeys)-1])
			} else {
				args = append(args, wkeys[len(wkeys)-1])
			}
			continue
		}
		for i := range p.keys {
			if e.lend {
				args = append(args, &p.keys[i])
			} else {
				args = append(args, p.keys[i])
			}
		}
	}
	buf.kb, buf.wkeys = kb, wkeys
	return args
}

// decodeRun sets each request's reply from the run's: first the time of
// the one-byte requests, then each request's numbers, one for a request
// that went as one byte (its byte in the run's shape not 0), stride a
// check for the others. It returns the requests
// the script sent back to be decided again on its general path (-3, see
// cstretch and lstretch); a request whose key a Cluster node no longer
// held (-2) gets errMoved, and was not decided.
func decodeRun(f flavour, batch []*pending, shape []byte, reply []int64) (again []*pending, err error) {
	if len(reply) == 0 {
		return nil, errors.New("redis: script answered nothing")
	}
	at := reply[0] // the time of the one-byte requests
	reply = reply[1:]
	// Check the length first: a reply short for any request is an error
	// for all, and none is answered.
	want := 0
	for j, p := range batch {
		if shape[j] != 0 {
			want++
		} else {
			want += f.stride() * len(p.args)
		}
	}
	if len(reply) != want {
		return nil, fmt.Errorf("redis: script answered %d values, want %d", len(reply), want)
	}
	for j, p := range batch {
		if reply[0] == -2 {
			p.err = errMoved
		}
		if shape[j] != 0 {
			switch {
			case reply[0] == -3:
				again = append(again, p)
			case reply[0] != -2:
				p.reply = p.args[0].p.expand(p.fastReply[:0], reply[0], at)
			}
			reply = reply[1:]
			continue
		}
		m := f.stride() * len(p.args)
		p.reply = reply[:m:m]
		reply = reply[m:]
	}
	return again, nil
}

// fastRule reports whether p goes on its kind's path of its own in the
// script, answered with one number (see expand): one check of cost 1, of a
// bucket that holds a unit, of a fixed window as a counter per window that
// does, or of a sliding counter or a sliding log that does, under the
// store's clock (which keeps a state from being ahead of the run's time,
// but for a lost clock: see cstretch and lstretch in take.lua), unless the
// script sent it back (redo). A rule charged by usage takes the general
// path, which records what does not fit: those paths charge only what
// does.
func (s *Store) fastRule(p *pending, redo bool) bool {
	if len(p.args) != 1 || p.args[0].cost != 1 {
		return false
	}
	pr := p.args[0].p
	switch {
	case pr.charge != algo.ChargeGate:
		return false
	case pr.kind == kindBucket:
		// A bucket decided at a coarser quantum than a µs waits from the
		// latest time its state has seen, which only the script knows.
		return pr.a[5] >= 1 && pr.a[6] == 1
	case pr.windowed(s.clock):
		return pr.a[0] >= 1
	case pr.kind == kindCounter && s.clock && !redo:
		// its answer packs both counts in one number, below 2^53
		return pr.a[0] >= 1 && pr.a[0] < maxFastCounter
	case pr.kind == kindLog && s.clock && !redo:
		// a denial's answer packs two waits of at most the Period
		return pr.a[0] >= 1 && pr.a[1] < maxFastLogPeriod
	}
	return false
}

// maxFastCounter bounds the Rate of a sliding counter on the script's path
// of its own: (prev·(Rate+1) + curr)·2 + 1 stays below 2^53 (see cstretch).
const maxFastCounter = 1 << 25

// maxFastLogPeriod bounds the Period, in µs, of a sliding log on the
// script's path of its own: a denial's two waits, each at most the
// Period, pack in one number below 2^53 (see lstretch).
const maxFastLogPeriod = 1 << 26

// allWindowed reports whether every rule is a fixed window's counter per
// window (see params.windowed).
func allWindowed(rules []runRule, clock bool) bool {
	for _, r := range rules {
		if !r.p.windowed(clock) {
			return false
		}
	}
	return true
}

// runRule is a rule as sent in one run: its params, shadow or not.
type runRule struct {
	p      *params
	shadow bool
}

// ruleIndex is the script's index (from 1) of rule (p, shadow) in rules,
// which it is added to if new. A run names few rules: a scan is enough.
func ruleIndex(rules []runRule, p *params, shadow bool) ([]runRule, int) {
	for i, r := range rules {
		if r.p == p && r.shadow == shadow {
			return rules, i + 1
		}
	}
	rules = append(rules, runRule{p, shadow})
	return rules, len(rules)
}

// record is r as the script reads it: made once per rule (and slack).
func (s *Store) record(r runRule) any {
	w, sh := 0, 0
	if r.p.windowed(s.clock) {
		w = 1
	}
	if r.shadow {
		sh = 1
	}
	return r.p.records(s.slack)[w][sh]
}

// redisTime as a request's now has the script read Redis TIME: 2^53 µs,
// outside the range micros allows.
const redisTime = 1 << 53

// runHead is the length of the head of take.lua's ARGV[1]: four bytes of
// flags (see runFlags), the time of the one-byte requests and the guess
// of their windows as doubles, then the number of rules and of requests
// as uint32s, all little-endian, as struct.unpack('<BBBBddI4I4') reads
// them.
const runHead = 4 + 8 + 8 + 4 + 4

// runFlags is the head's four bytes for a run to a Cluster node or not,
// with the store's clock or not, of requests in mode m (0, modeTake,
// modeGive), with one-byte requests or not.
func runFlags(node, clock bool, m byte, fast bool) [4]byte {
	b := func(v bool) byte {
		if v {
			return 1
		}
		return 0
	}
	return [4]byte{b(node), b(clock), m, b(fast)}
}

// putRunHead writes the head into run[:runHead].
func putRunHead(run []byte, flags [4]byte, now float64, guess int64, rules, reqs int) {
	copy(run, flags[:])
	binary.LittleEndian.PutUint64(run[4:], math.Float64bits(now))
	binary.LittleEndian.PutUint64(run[12:], math.Float64bits(float64(guess)))
	binary.LittleEndian.PutUint32(run[20:], uint32(rules))
	binary.LittleEndian.PutUint32(run[24:], uint32(reqs))
}

package statsd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Tag is a name and value added to every statistic: envoyproxy/ratelimit's
// EXTRA_TAGS.
type Tag struct{ Key, Value string }

// Config says where and how a Sink sends.
type Config struct {
	// Addr is the statsd's host:port.
	Addr string
	// Dog sends DogStatsD over UDP, tags as "|#k:v"; otherwise plain
	// statsd over TCP, tags appended to each name as ".__k=v", as
	// envoyproxy/ratelimit's statsd library writes them.
	Dog bool
	// Tags are added to every statistic, sorted by name, as
	// envoyproxy/ratelimit's statsd library writes them.
	Tags []Tag
	// FlushInterval is how often counts are sent. It must be positive.
	FlushInterval time.Duration
	// Mogrifiers rename and tag statistics for DogStatsD (Dog only): the
	// first whose pattern matches a name applies, its tags after Tags.
	Mogrifiers []Mogrifier
	// Dial connects; nil uses a net.Dialer with a timeout of a second.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// maxTimings bounds the timings kept between two flushes: past it, a
// timing is dropped and counted, so that a statsd that is not read
// cannot make memory grow.
const maxTimings = 1 << 14

// udpPayload is the most bytes of one DogStatsD datagram, which fits an
// Ethernet MTU without fragments.
const udpPayload = 1432

// writeTimeout bounds one flush's write: a statsd that stops reading
// makes the batch drop, not the flushes pile up.
const writeTimeout = time.Second

// A Sink gathers counters and timings and sends them every flush
// interval. It is safe for concurrent use; counting never waits on the
// network.
type Sink struct {
	cfg     Config
	network string
	suffix  string // the tags as written after each name (statsd) or value (DogStatsD)

	counters sync.Map // name -> *Counter
	gauges   sync.Map // name -> *Gauge
	generate func()   // called at each flush, before the values are read
	mu       sync.Mutex
	timings  []timing // since the last flush
	dropped  atomic.Uint64
	// The flush goroutine's only: the connection, and the timings' names
	// as written.
	conn  net.Conn
	heads map[string]head
}

// head is how a statistic's name is written: the name, and the tags that
// follow the value (DogStatsD) or the name (statsd).
type head struct{ name, tags string }

type timing struct {
	name string
	ms   float64
}

// New returns a Sink for cfg, which sends once Run runs.
func New(cfg Config) (*Sink, error) {
	if cfg.FlushInterval <= 0 {
		return nil, fmt.Errorf("statsd: flush interval %v: must be positive", cfg.FlushInterval)
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("statsd: address %q: %w", cfg.Addr, err)
	}
	if len(cfg.Mogrifiers) > 0 && !cfg.Dog {
		return nil, fmt.Errorf("statsd: mogrifiers are for DogStatsD only")
	}
	for i := range cfg.Mogrifiers {
		if err := cfg.Mogrifiers[i].Validate(); err != nil {
			return nil, err
		}
	}
	cfg.Mogrifiers = slices.Clone(cfg.Mogrifiers)
	s := &Sink{cfg: cfg, network: "tcp", heads: map[string]head{}}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: time.Second}
		s.cfg.Dial = d.DialContext
	}
	cfg.Tags = slices.Clone(cfg.Tags)
	slices.SortStableFunc(cfg.Tags, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	var b strings.Builder
	for i, t := range cfg.Tags {
		if t.Key == "" {
			return nil, fmt.Errorf("statsd: tag %q: empty name", t.Key+":"+t.Value)
		}
		if cfg.Dog {
			if i == 0 {
				b.WriteString("|#")
			} else {
				b.WriteByte(',')
			}
			b.WriteString(clean(t.Key) + ":" + clean(t.Value))
		} else {
			b.WriteString(".__" + clean(t.Key) + "=" + clean(t.Value))
		}
	}
	s.suffix = b.String()
	if cfg.Dog {
		s.network = "udp"
	}
	return s, nil
}

// clean replaces the bytes that would end a name or a tag in the line
// protocol.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ':' || r == '|' || r == ',' || r == '#' || r == '\n' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

// head returns how name is written: renamed and tagged by the first
// mogrifier that matches it, its tags after the Sink's own.
func (s *Sink) head(name string) head {
	n, tags := mogrify(s.cfg.Mogrifiers, name)
	if len(tags) == 0 {
		return head{clean(n), s.suffix}
	}
	var b strings.Builder
	b.WriteString(s.suffix)
	for i, t := range tags {
		if i == 0 && s.suffix == "" {
			b.WriteString("|#")
		} else {
			b.WriteByte(',')
		}
		b.WriteString(clean(t.Key) + ":" + clean(t.Value))
	}
	return head{clean(n), b.String()}
}

// A Counter is one named counter of a Sink; the Sink sends what it added
// since the last flush.
type Counter struct {
	head head // as a Sink writes it
	n    atomic.Uint64
}

// Add adds n.
func (c *Counter) Add(n uint64) { c.n.Add(n) }

// Counter returns the counter called name, made on first use. Callers
// bound the names they make: each stays until the Sink goes.
func (s *Sink) Counter(name string) *Counter {
	if c, ok := s.counters.Load(name); ok {
		return c.(*Counter)
	}
	c, _ := s.counters.LoadOrStore(name, &Counter{head: s.head(name)})
	return c.(*Counter)
}

// A Gauge is one named gauge of a Sink or a Prom: its value is sent at
// every flush, or shown at every scrape, zero included.
type Gauge struct {
	head head // as a Sink writes it
	v    atomic.Uint64
}

// Set sets the value.
func (g *Gauge) Set(v uint64) { g.v.Store(v) }

// Gauge returns the gauge called name, made on first use. Callers bound
// the names they make.
func (s *Sink) Gauge(name string) *Gauge {
	if g, ok := s.gauges.Load(name); ok {
		return g.(*Gauge)
	}
	g, _ := s.gauges.LoadOrStore(name, &Gauge{head: s.head(name)})
	return g.(*Gauge)
}

// Generate has f called at the start of each flush, to set gauges and
// add to counters from values read once a flush rather than at each
// event. It is called before Run.
func (s *Sink) Generate(f func()) { s.generate = f }

// Timing records d under name, in milliseconds as statsd's timers are.
func (s *Sink) Timing(name string, d time.Duration) {
	s.mu.Lock()
	if len(s.timings) < maxTimings {
		s.timings = append(s.timings, timing{name, float64(d) / float64(time.Millisecond)})
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.dropped.Add(1)
}

// Dropped is how many statistics (a counter's flush or a timing) could
// not be sent.
func (s *Sink) Dropped() uint64 { return s.dropped.Load() }

// Run flushes every flush interval until ctx ends, then once more.
func (s *Sink) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.FlushInterval)
	defer t.Stop()
	defer func() {
		s.Flush(context.WithoutCancel(ctx))
		if s.conn != nil {
			s.conn.Close()
			s.conn = nil
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Flush(ctx)
		}
	}
}

// Flush sends what was counted since the last flush. Run calls it; one
// flush runs at a time.
func (s *Sink) Flush(ctx context.Context) {
	if s.generate != nil {
		s.generate()
	}
	var lines [][]byte
	s.counters.Range(func(_, v any) bool {
		c := v.(*Counter)
		if n := c.n.Swap(0); n > 0 {
			lines = append(lines, s.line(c.head, strconv.FormatUint(n, 10), "c"))
		}
		return true
	})
	s.gauges.Range(func(_, v any) bool {
		g := v.(*Gauge)
		lines = append(lines, s.line(g.head, strconv.FormatUint(g.v.Load(), 10), "g"))
		return true
	})
	s.mu.Lock()
	ts := s.timings
	s.timings = nil
	s.mu.Unlock()
	for _, t := range ts {
		h, ok := s.heads[t.name]
		if !ok {
			h = s.head(t.name)
			s.heads[t.name] = h
		}
		lines = append(lines, s.line(h, strconv.FormatFloat(t.ms, 'f', -1, 64), "ms"))
	}
	if len(lines) == 0 {
		return
	}
	if err := s.send(ctx, lines); err != nil {
		s.dropped.Add(uint64(len(lines)))
		if s.conn != nil {
			s.conn.Close()
			s.conn = nil
		}
	}
}

// line writes one statistic in the line protocol.
func (s *Sink) line(h head, value, kind string) []byte {
	if s.cfg.Dog {
		return []byte(h.name + ":" + value + "|" + kind + h.tags + "\n")
	}
	return []byte(h.name + h.tags + ":" + value + "|" + kind + "\n")
}

// send writes lines, over one connection kept between flushes: as one
// stream over TCP, in datagrams of whole lines over UDP.
func (s *Sink) send(ctx context.Context, lines [][]byte) error {
	if s.conn == nil {
		c, err := s.cfg.Dial(ctx, s.network, s.cfg.Addr)
		if err != nil {
			return err
		}
		s.conn = c
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	if s.network == "tcp" {
		_, err := s.conn.Write(bytes.Join(lines, nil))
		return err
	}
	var errs []error
	for len(lines) > 0 {
		n, size := 0, 0
		for n < len(lines) && (n == 0 || size+len(lines[n]) <= udpPayload) {
			size += len(lines[n])
			n++
		}
		if _, err := s.conn.Write(slices.Concat(lines[:n]...)); err != nil {
			errs = append(errs, err)
		}
		lines = lines[n:]
	}
	return errors.Join(errs...)
}

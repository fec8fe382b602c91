package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// limitListener closes, as soon as it is accepted, each connection past
// max open at once: unlike a listener that stops accepting at the bound
// (netutil.LimitListener), it leaves no client waiting in the kernel's
// backlog with no answer, and the connections held open count against
// nothing the server's own clients need.
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused func() // counts a connection closed at accept
}

func newLimitListener(l net.Listener, max int, refused func()) *limitListener {
	return &limitListener{Listener: l, max: int64(max), refused: refused}
}

// Accept returns the next connection within the bound, closing those past
// it on the way.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		// Counted before the close, so that whoever sees the connection
		// end also sees it counted.
		l.refused()
		c.Close()
	}
}

// limitedConn gives its place back once, on the first Close.
type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// streamGate bounds the gRPC calls in flight across all connections,
// and the wait for a unary call's request message. Its tap sees each new
// stream before a goroutine or a buffer is given to it, and refuses one
// past the bound with UNAVAILABLE; a unary call then waits on a list, in
// the order of its deadline, until its message arrives (the interceptor
// takes it off) or the sweeper finds the deadline past and ends it with
// DEADLINE_EXCEEDED. One goroutine sweeps for all calls: a timer per call
// would start a goroutine per call that expires, thousands at once in a
// flood. A streaming call (health's Watch) has no such deadline; a call
// to a method the server does not have is answered at once and not
// counted.
type streamGate struct {
	max     int64
	recv    time.Duration
	open    atomic.Int64
	unary   map[string]bool // full method names; set before the server serves
	stream  map[string]bool
	refused func() // counts a stream refused

	mu      sync.Mutex
	waiting pendingList
}

// errTooManyStreams is the status of a stream past the bound.
var errTooManyStreams = status.Error(codes.Unavailable, "server: too many gRPC calls in flight; try again")

// tap is the grpc.InTapHandle. It runs on the connection's reader, under
// its lock: it does no more than count and make a context.
func (g *streamGate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	unary := g.unary[info.FullMethodName]
	if !unary && !g.stream[info.FullMethodName] {
		return ctx, nil
	}
	if g.open.Add(1) > g.max {
		g.open.Add(-1)
		g.refused()
		return nil, errTooManyStreams
	}
	if !unary {
		// Released when the stream's context ends, however the stream
		// ends, even before its handler runs; streaming calls are few,
		// and the goroutine that runs release costs them little.
		context.AfterFunc(ctx, g.release)
		return ctx, nil
	}
	p := &pendingCall{deadline: time.Now().Add(g.recv)}
	p.Context, p.cancel = context.WithCancel(ctx)
	g.mu.Lock()
	g.waiting.push(p)
	g.mu.Unlock()
	return p, nil
}

func (g *streamGate) release() { g.open.Add(-1) }

// unaryArrived is the unary interceptor: gRPC calls it once the request
// message has arrived, which takes the call off the waiting list; the
// call is released when its handler returns.
func (g *streamGate) unaryArrived(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, ok := ctx.Value(pendingKey{}).(*pendingCall)
	if !ok {
		return handler(ctx, req)
	}
	g.mu.Lock()
	mine := p.listed
	if mine {
		g.waiting.remove(p)
	}
	g.mu.Unlock()
	if !mine {
		// The sweeper took it just before, and released it: its
		// deadline passed, or its client went.
		return nil, status.FromContextError(p.Err()).Err()
	}
	defer g.release()
	return handler(ctx, req)
}

// run sweeps the waiting calls until ctx ends, often enough that a call
// ends within a tenth of the receive timeout (100ms at most) after its
// deadline, and a call reset before its message came gives its place
// back as soon.
func (g *streamGate) run(ctx context.Context) {
	t := time.NewTicker(max(min(g.recv/10, 100*time.Millisecond), time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.expire(now)
		}
	}
}

// expire ends the waiting calls whose deadline is past at now, and
// releases those whose stream has ended before its message came (the
// client reset it). It walks the whole list, which holds at most the
// bound on calls in flight.
func (g *streamGate) expire(now time.Time) {
	var late []*pendingCall
	gone := 0
	g.mu.Lock()
	for p := g.waiting.head; p != nil; {
		next := p.next
		switch {
		case !now.Before(p.deadline):
			g.waiting.remove(p)
			p.expired.Store(true)
			late = append(late, p)
		case p.Context.Err() != nil:
			g.waiting.remove(p)
			gone++
		}
		p = next
	}
	g.mu.Unlock()
	for _, p := range late {
		p.cancel()
	}
	g.open.Add(-int64(len(late) + gone))
}

// learn records the methods of the services registered on gs.
func (g *streamGate) learn(gs *grpc.Server) {
	g.unary, g.stream = make(map[string]bool), make(map[string]bool)
	for name, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + name + "/" + m.Name
			if m.IsClientStream || m.IsServerStream {
				g.stream[full] = true
			} else {
				g.unary[full] = true
			}
		}
	}
}

// pendingCall is a unary call's context while the gate waits for its
// message. Cancelled by the sweeper, it reports context.DeadlineExceeded,
// which gRPC's receive turns into the call's status. It is a
// context.WithCancel underneath, which contexts made from it find, so
// that making one starts no goroutine.
type pendingCall struct {
	context.Context
	cancel     context.CancelFunc
	deadline   time.Time
	expired    atomic.Bool
	listed     bool // on the waiting list; it and the links under streamGate.mu
	prev, next *pendingCall
}

type pendingKey struct{}

func (p *pendingCall) Err() error {
	if p.expired.Load() {
		return context.DeadlineExceeded
	}
	return p.Context.Err()
}

func (p *pendingCall) Value(key any) any {
	if key == (pendingKey{}) {
		return p
	}
	return p.Context.Value(key)
}

// pendingList is the waiting calls, oldest first.
type pendingList struct{ head, tail *pendingCall }

func (l *pendingList) push(p *pendingCall) {
	p.listed = true
	p.prev = l.tail
	if l.tail != nil {
		l.tail.next = p
	} else {
		l.head = p
	}
	l.tail = p
}

func (l *pendingList) remove(p *pendingCall) {
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		l.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		l.tail = p.prev
	}
	p.prev, p.next, p.listed = nil, nil, false
}

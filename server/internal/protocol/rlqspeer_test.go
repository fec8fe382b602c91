package protocol

import (
	"strings"
	"testing"
)

// A stream holds as its replica, its peer and the lowest slot its peer's
// open streams leave free: a stream that opens after one ended takes the
// ended one's holder id, never a live stream's, and no holder id shows a
// peer's address.
func TestRLQSPeerSlots(t *testing.T) {
	a := New(Service{})
	join := func(peer string) *rlqsStream {
		t.Helper()
		s := newRLQSStream(a, &a.svc.RLQS)
		s.peer = peer
		if err := a.rlqs.join(s, 100, 3); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(s.holder, peer) && peer != "" {
			t.Fatalf("holder %q shows the peer's address", s.holder)
		}
		return s
	}
	live := map[*rlqsStream]bool{}
	check := func() {
		t.Helper()
		ids := map[string]bool{}
		for s := range live {
			if ids[s.holder] {
				t.Fatalf("two live streams hold as %q", s.holder)
			}
			ids[s.holder] = true
		}
	}
	open := func(peer string) *rlqsStream {
		s := join(peer)
		live[s] = true
		check()
		return s
	}
	end := func(s *rlqsStream) {
		a.rlqs.leave(s)
		delete(live, s)
	}
	x, y, z := open("10.0.0.1"), open("10.0.0.1"), open("10.0.0.1")
	other, local := open("10.0.0.2"), open("")
	if x.slot != 0 || y.slot != 1 || z.slot != 2 || other.slot != 0 || local.slot != 0 {
		t.Fatalf("slots %d %d %d, another peer's %d, a Unix socket's %d: want 0 1 2, 0, 0", x.slot, y.slot, z.slot, other.slot, local.slot)
	}
	if err := a.rlqs.join(newRLQSStream(a, &a.svc.RLQS), 100, 3); err != nil {
		t.Fatalf("a second stream without an address, past the per-peer bound: %v", err)
	}
	was := y.holder
	end(y)
	if s := open("10.0.0.1"); s.holder != was {
		t.Fatalf("after the second stream ended, a new one holds as %q, want its place %q", s.holder, was)
	}
	was = x.holder
	end(x)
	end(z)
	if s := open("10.0.0.1"); s.holder != was {
		t.Fatalf("after the first and third ended, a new one holds as %q, want the first's place %q", s.holder, was)
	}
	if s := open("10.0.0.1"); s.slot != 2 {
		t.Fatalf("the next takes slot %d, want 2 (0 and 1 live)", s.slot)
	}
}

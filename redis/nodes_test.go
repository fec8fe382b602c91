package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

// TestClusterBatchPerNode: on a Cluster, concurrent requests bound for one
// master are decided in one run, whatever their slots, each as if alone.
// When a slot has moved to another master under the store (a resharding
// the cluster client has not seen yet), the run decides the other
// requests and fails only those on the moved slot, before they write;
// the store decides them again through the cluster client, from the
// state the slot took along.
func TestClusterBatchPerNode(t *testing.T) {
	cl := startCluster(t)
	cc := cl.patientClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newStore(t, cc, redis.WithPrefix(prefix(t)), redis.WithDenyCache(0), redis.WithTimeout(30*time.Second))
	gcra := prep(sluice.Rule{Name: "gcra", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(5)})
	log := prep(sluice.Rule{Name: "log", Algorithm: sluice.AlgoSlidingLog, Limit: sluice.PerDay(5)})

	// keys on one master, in different slots: the first will move
	master := func(key string) string {
		t.Helper()
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	addr := master("{k0}")
	var keys []string
	for i := 0; len(keys) < 6; i++ {
		if k := fmt.Sprint("k", i); master("{"+k+"}") == addr {
			keys = append(keys, k)
		}
	}
	// a key of the same master, for a run that holds the others back
	holderKey := ""
	for i := 0; holderKey == ""; i++ {
		if k := fmt.Sprint("holder", i); master("{"+k+"}") == addr {
			holderKey = k
		}
	}
	var srv *server
	for _, n := range cl.nodes {
		if n.addr() == addr {
			srv = n
		}
	}
	if srv == nil {
		t.Fatalf("no node of the cluster at %s", addr)
	}
	// two requests on each key, one of one check (one byte in its run), one
	// of two (the general path)
	one := func(k string) []sluice.Check { return []sluice.Check{{Rule: gcra, Key: k}} }
	two := func(k string) []sluice.Check { return []sluice.Check{{Rule: gcra, Key: k}, {Rule: log, Key: k}} }
	for _, k := range keys {
		take(t, s, time.Time{}, 1, one(k)...)
		take(t, s, time.Time{}, 1, two(k)...)
	}
	take(t, s, time.Time{}, 0, sluice.Check{Rule: gcra, Key: holderKey}) // the store learns its master's connection

	sl, err := cc.ClusterKeySlot(ctx, "{"+keys[0]+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	moveSlot(t, ctx, cl, uint16(sl))

	// Queue every key's two requests behind a run out to their master,
	// paused, then run them as one batch once it resumes. The pause is
	// short of the cluster's node timeout, so the others do not fail it.
	resume := srv.pause(t)
	h := holdOn(t, s, holderKey)
	calls := s.Stats().Calls
	var wg sync.WaitGroup
	outs := make([][]sluice.Decision, 2*len(keys))
	for i, k := range keys {
		for j, checks := range [][]sluice.Check{one(k), two(k)} {
			wg.Go(func() {
				out := make([]sluice.Decision, len(checks))
				if err := waitingTake(ctx, s, time.Time{}, checks, out); err != nil {
					t.Errorf("%s, %d checks: %v", k, len(checks), err)
				}
				outs[2*i+j] = out
			})
		}
	}
	waitParked(t, s, 1+2*len(keys), calls+int64(2*len(keys)))
	runs := s.Stats().Runs
	resume() // the held run ends: the queue goes on in one run
	wg.Wait()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	// gcra: 2 taken before, a third and a fourth now; log: 1, then 2
	for i, k := range keys {
		if d := outs[2*i]; !d[0].Allowed || d[0].Remaining != 2 && d[0].Remaining != 1 {
			t.Errorf("%s, one check: %+v", k, d)
		}
		if d := outs[2*i+1]; !d[0].Allowed || !d[1].Allowed || d[1].Remaining != 3 || d[0].Remaining+outs[2*i][0].Remaining != 3 {
			t.Errorf("%s, two checks: %+v beside %+v", k, d, outs[2*i])
		}
	}
	st := s.Stats()
	if st.Moved != 2 {
		t.Errorf("stats %+v: want the moved key's 2 requests moved", st)
	}
	// one run for the batch, and one per moved request through the
	// cluster client
	if got := st.Runs - runs; got != 3 {
		t.Errorf("%d runs for the batch, want 3 (1 + the 2 moved)", got)
	}
	// runs to a master go by FCALL, the library loaded on each
	fcalls := int64(0)
	for _, n := range cl.nodes {
		fcalls += commandCalls(t, n.client(t), "fcall")
	}
	if fcalls == 0 {
		t.Errorf("no FCALL on the masters: the runs to them went by EVALSHA")
	}
	// the state moved with its slot: 1 left on the moved key, after the
	// cluster client has learned where it is
	if d := take(t, s, time.Time{}, 0, one(keys[0])...); d[0].Remaining != 1 {
		t.Errorf("moved key: %+v, want 1 left", d[0])
	}
}

// moveSlot moves slot sl, and its keys, from its master to another, as
// redis-cli --cluster reshard does, without telling any client.
func moveSlot(t *testing.T, ctx context.Context, cl *cluster, sl uint16) {
	t.Helper()
	clients := make([]*goredis.Client, len(cl.nodes))
	ids := make([]string, len(cl.nodes))
	from := -1
	for i, n := range cl.nodes {
		clients[i] = n.client(t)
		id, err := clients[i].ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
		if n, err := clients[i].ClusterCountKeysInSlot(ctx, int(sl)).Result(); err == nil && n > 0 {
			from = i
		}
	}
	if from < 0 {
		t.Fatalf("no master holds keys in slot %d", sl)
	}
	to := (from + 1) % len(cl.nodes)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(clients[to].Do(ctx, "cluster", "setslot", sl, "importing", ids[from]).Err())
	must(clients[from].Do(ctx, "cluster", "setslot", sl, "migrating", ids[to]).Err())
	keys, err := clients[from].ClusterGetKeysInSlot(ctx, int(sl), 1000).Result()
	must(err)
	host, port, _ := strings.Cut(cl.nodes[to].addr(), ":")
	args := []any{"migrate", host, port, "", 0, 5000, "keys"}
	for _, k := range keys {
		args = append(args, k)
	}
	must(clients[from].Do(ctx, args...).Err())
	for i := range clients {
		must(clients[i].Do(ctx, "cluster", "setslot", sl, "node", ids[to]).Err())
	}
}

// TestClusterUnreachable: a Cluster whose seed node accepts connections
// and never answers. Finding a key's master needs the map of slots, which
// go-redis would wait for as long as its own read timeout (10s here): the
// store's bound (50ms) ends each Take instead, as a timeout, and the
// breaker opens after its failures, as for any call.
func TestClusterUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c) // reads, never answers
		}
	}()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{ln.Addr().String()}, ReadTimeout: 10 * time.Second, MaxRetries: -1})
	defer cc.Close()
	s, err := redis.New(cc, redis.WithTimeout(50*time.Millisecond), redis.WithBreaker(3, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r := prep(sluice.Rule{Name: "r", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(5)})
	for i := range 5 {
		start := time.Now()
		err := s.Take(context.Background(), time.Time{}, []sluice.Check{{Rule: r, Key: "k"}}, make([]sluice.Decision, 1))
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("take %d waited %v, for go-redis's read timeout", i, took)
		}
		want := redis.ErrTimeout
		if i >= 3 {
			want = redis.ErrCircuitOpen
		}
		if !errors.Is(err, want) {
			t.Fatalf("take %d: %v, want %v", i, err, want)
		}
	}
	if st := s.Stats(); st.Timeouts != 3 || st.Rejected != 2 || st.Breaker != "open" {
		t.Fatalf("stats %+v: want 3 timeouts, then the breaker open", st)
	}
}

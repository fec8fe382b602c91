package protocol

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/lease"
)

// Bounds on what one RLQS client may hold, so that no stream costs more
// than a fixed amount of memory and work.
const (
	// MaxBucketKeys is the most keys a bucket id may have: a descriptor's
	// most entries.
	MaxBucketKeys = 64
	// MaxBucketIDBytes is the most bytes a bucket id's keys and values
	// may hold together.
	MaxBucketIDBytes = 4096
	// maxReportUnits bounds the requests one report may count for a
	// bucket: more is no more demand (the authority caps demand far
	// below it), and the sums stay far from overflow.
	maxReportUnits = 1 << 40
	// releaseTimeout bounds giving a stream's shares back once it has
	// ended, when its own context is over.
	releaseTimeout = 2 * time.Second
)

// RLQSSettings are the settings of Envoy's Rate Limit Quota Service.
type RLQSSettings struct {
	// Authority divides each limit's quota among the streams holding a
	// share of it: each stream is one holder.
	Authority lease.Authority
	// AbandonAfter is how long a bucket may go without a report before
	// the stream is told to abandon it and its shares are given back,
	// and a stream without a bucket or a report before it ends.
	AbandonAfter time.Duration
	// MaxStreams bounds the RLQS streams open at once, and
	// MaxStreamsPerPeer those of one peer (an IP address, an IPv6 /64),
	// so that one client cannot take every place; MaxBuckets
	// the buckets one stream may subscribe to, MaxTotalBuckets those
	// of all the streams together, and MaxBucketsPerPeer those of one
	// peer's streams: a bucket past any gets no assignment.
	MaxStreams        int
	MaxStreamsPerPeer int
	MaxBuckets        int
	MaxTotalBuckets   int
	MaxBucketsPerPeer int
	// Now is the server's clock.
	Now func() time.Time
	// Count counts a bucket's outcome: its subscription's (each RLQS
	// result but RLQSError) and each failed renewal (RLQSError).
	Count func(result string)
}

// RLQSAssignment is one bucket of one stream, as the console shows it.
type RLQSAssignment struct {
	Stream string // the stream's id
	Domain string
	Bucket map[string]string // shared: do not modify
	Result string            // an RLQS result
	// Share per Period is the token bucket's refill, and Burst the
	// stream's part of the limit's capacity, for an assigned bucket.
	Share, Burst int64
	Period       time.Duration
	// Demand is the stream's demand, in units per second, as the
	// renewals report it; Holders and TotalDemand (per Period) the
	// limit's, as the authority last answered.
	Demand      float64
	Holders     int
	TotalDemand int64
	TTL         time.Duration
	Renewed     time.Time
}

// RLQSAssignments lists the buckets of the streams open, as each stream
// last renewed them.
func (a *Adapters) RLQSAssignments() []RLQSAssignment {
	q := &a.rlqs
	q.mu.Lock()
	var out []RLQSAssignment
	for s := range q.streams {
		if v := s.view.Load(); v != nil {
			out = append(out, *v...)
		}
	}
	q.mu.Unlock()
	slices.SortFunc(out, func(x, y RLQSAssignment) int {
		if c := strings.Compare(x.Domain, y.Domain); c != 0 {
			return c
		}
		if c := strings.Compare(fmt.Sprint(x.Bucket), fmt.Sprint(y.Bucket)); c != 0 {
			return c
		}
		return strings.Compare(x.Stream, y.Stream)
	})
	return out
}

// publish makes the stream's buckets visible to RLQSAssignments.
func (s *rlqsStream) publish() {
	v := make([]RLQSAssignment, 0, len(s.buckets))
	for _, b := range s.buckets {
		as := RLQSAssignment{Stream: s.holder, Domain: s.domain, Bucket: b.id.GetBucket(), Result: b.policy.result,
			Demand: b.rate, Renewed: b.renewed}
		if l := b.last; l != nil {
			as.Share, as.Burst, as.Period, as.Holders, as.TotalDemand, as.TTL = l.share, l.burst, l.period, l.holders, l.demand, l.ttl
		}
		v = append(v, as)
	}
	s.view.Store(&v)
}

// rlqsState is the RLQS service's state across its streams.
type rlqsState struct {
	mu sync.Mutex
	// replica is this server's part of its streams' holder ids, drawn
	// at random, so that replicas sharing an authority hold apart; salt
	// keys the hash that stands for a peer's address in them, so that no
	// address is written to the authority or shown in the console.
	replica  string
	salt     []byte
	streams  map[*rlqsStream]struct{}
	peers    map[string]*rlqsPeer // by peer address, "" for those without one
	buckets  int                  // the buckets of all the streams
	stopping chan struct{}        // closed by StopRLQS
	stopped  bool
}

// rlqsPeer is what the streams of one peer hold: their slots, and
// their buckets.
//
// A stream's holder id is the replica, its peer and a slot, the lowest
// its peer's open streams leave free, not an id of its own: a stream that ends
// leaves its shares counted until their TTL (its client enforces them
// until then), and a client opening and closing streams in a loop
// would leave a holder behind each time, until a key's holder places
// were full and every other client locked out of it. With slots, a
// peer holds at most as many places on a key as it may open streams on
// each replica, and a client reconnecting takes its own place back. The
// cost: where several clients share one address (or a Unix socket), a
// stream that ends and another's that opens can share a holder for the
// ended one's TTL, and the limit be overrun by the ended one's share for
// that time.
type rlqsPeer struct {
	id      string // its part of the holder ids
	slots   []bool // slots[i]: an open stream holds slot i; the last is held
	buckets int
}

// streams counts the peer's open streams.
func (p *rlqsPeer) streams() int {
	n := 0
	for _, held := range p.slots {
		if held {
			n++
		}
	}
	return n
}

func (q *rlqsState) init() {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	q.replica = "rlqs-" + hex.EncodeToString(b[:])
	q.salt = make([]byte, 32)
	_, _ = rand.Read(q.salt)
	q.streams, q.peers, q.stopping = make(map[*rlqsStream]struct{}), make(map[string]*rlqsPeer), make(chan struct{})
}

// StopRLQS ends every RLQS stream, and any that opens after: each is sent
// an assignment of zero time to live for each of its buckets, so that the
// clients fall back to their expired-assignment behaviour at once, its
// shares are given back, and it ends with UNAVAILABLE, so that the
// client opens a stream to another replica. The server calls it before
// its graceful stop, which waits for streams to end.
func (a *Adapters) StopRLQS() {
	q := &a.rlqs
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.stopped {
		q.stopped = true
		close(q.stopping)
	}
}

var errRLQSStopping = status.Error(codes.Unavailable, "rlqs: the server is stopping: open a stream to another replica")

// join adds s to the streams, within the bounds: most in all, perPeer
// from s's peer (none for a peer without an IP address, a Unix socket's),
// and gives it its holder id.
func (q *rlqsState) join(s *rlqsStream, most, perPeer int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[s.peer]
	switch {
	case q.stopped:
		return errRLQSStopping
	case len(q.streams) >= most:
		return status.Errorf(codes.ResourceExhausted, "rlqs: %d streams are open, the most this server takes; try again later or another replica", most)
	case s.peer != "" && perPeer > 0 && p != nil && p.streams() >= perPeer:
		return status.Errorf(codes.ResourceExhausted, "rlqs: %d streams are open from %s, the most one peer may hold", perPeer, s.peer)
	}
	if p == nil {
		h := hmac.New(sha256.New, q.salt)
		h.Write([]byte(s.peer))
		p = &rlqsPeer{id: hex.EncodeToString(h.Sum(nil)[:8])}
		q.peers[s.peer] = p
	}
	s.slot = slices.Index(p.slots, false)
	if s.slot < 0 {
		s.slot = len(p.slots)
		p.slots = append(p.slots, false)
	}
	p.slots[s.slot] = true
	s.holder = fmt.Sprintf("%s/%s/%d", q.replica, p.id, s.slot)
	q.streams[s] = struct{}{}
	return nil
}

// addBucket counts a new bucket of s, if the streams hold fewer than
// most and s's peer fewer than perPeer (any number for a peer without an
// address, or for perPeer 0).
func (q *rlqsState) addBucket(s *rlqsStream, most, perPeer int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[s.peer]
	if q.buckets >= most || s.peer != "" && perPeer > 0 && p.buckets >= perPeer {
		return false
	}
	q.buckets++
	p.buckets++
	return true
}

// dropBuckets uncounts n buckets of s.
func (q *rlqsState) dropBuckets(s *rlqsStream, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.buckets -= n
	q.peers[s.peer].buckets -= n
}

func (q *rlqsState) leave(s *rlqsStream) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.streams, s)
	p := q.peers[s.peer]
	p.slots[s.slot] = false
	for len(p.slots) > 0 && !p.slots[len(p.slots)-1] {
		p.slots = p.slots[:len(p.slots)-1]
	}
	if len(p.slots) == 0 {
		delete(q.peers, s.peer)
	}
}

// rlqsStream is one RLQS client, one holder of the authority's shares of
// each key its buckets' limits follow (see rlqsKey): the client enforces
// each bucket's token bucket apart, so that buckets the config maps to
// one limit key (a wildcard value, a share_threshold) divide the stream's
// share of it.
type rlqsStream struct {
	a       *Adapters
	set     *RLQSSettings
	holder  string // the stream's id (rlqsPeer)
	peer    string // its peer's address (grpclimit.PeerIP), "" for none
	slot    int    // its slot among its peer's streams
	domain  string
	buckets map[string]*rlqsBucket // by canonical bucket id
	keys    map[string]*rlqsKey    // by the authority's key
	// failing says the last renewal failed, so that a run of failures
	// is logged once.
	failing bool
	// view is what RLQSAssignments shows of the stream, made afresh
	// after each change.
	view atomic.Pointer[[]RLQSAssignment]
}

// rlqsBucket is a bucket one stream subscribed to.
type rlqsBucket struct {
	id      *rlqspb.BucketId // as the client sent it, for the actions
	entries []config.Entry
	policy  rlqsPolicy
	held    []string // the stream's keys (rlqsKey) the bucket has a part of
	// lastReport is when the bucket was last reported; since and units
	// the requests reported since the demand was last measured, and
	// rate that measure, in units per second.
	lastReport, since time.Time
	units             uint64
	rate              float64
	renewed           time.Time // the last assignment's time; zero before it
	last              *assignment
}

// RLQS is the gRPC service of Envoy's Rate Limit Quota Service, for
// grpc.Server's registration.
func (a *Adapters) RLQS() rlqspb.RateLimitQuotaServiceServer { return rlqsService{a: a} }

type rlqsService struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	a *Adapters
}

func (r rlqsService) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	return r.a.StreamRateLimitQuotas(stream)
}

// StreamRateLimitQuotas serves one RLQS client: it reads its usage
// reports and sends it quota assignments, as
// envoy.service.rate_limit_quota.v3's RateLimitQuotaService does, until
// the client closes the stream, the stream breaks, or StopRLQS. A
// malformed report ends the stream with INVALID_ARGUMENT.
func (a *Adapters) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	set := &a.svc.RLQS
	s := newRLQSStream(a, set)
	// A peer without an IP address (a Unix socket) has no per-peer
	// bound: it is local.
	s.peer, _ = grpclimit.PeerIP()(stream.Context(), "")
	if err := a.rlqs.join(s, set.MaxStreams, set.MaxStreamsPerPeer); err != nil {
		return err
	}
	defer a.rlqs.leave(s)
	ctx := stream.Context()
	expired := false // the client was sent the expiry of every assignment
	defer func() { s.drop(ctx, expired) }()

	reports := make(chan *rlqspb.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done(): // the handler has returned
				return
			}
		}
	}()
	timer := time.NewTimer(set.AbandonAfter)
	defer timer.Stop()
	// quiet is since when the stream has held no bucket and sent no
	// report: past AbandonAfter it ends, its place given back, as a
	// stream that opened and never spoke would hold one for ever. Envoy
	// opens another when it has a bucket to report.
	quiet := set.Now()
	for {
		var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
		var reported time.Time
		select {
		case m := <-reports:
			reported = set.Now()
			acts, err := s.report(ctx, m, reported)
			if err != nil {
				return err
			}
			actions, quiet = acts, time.Time{}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-timer.C:
		case <-a.rlqs.stopping:
			// The shares go back only if the expiry reached the
			// stream; else they lapse at their TTL.
			resp := s.expireAll()
			expired = resp == nil || stream.Send(resp) == nil
			return errRLQSStopping
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		now := set.Now()
		due := s.due(ctx, now)
		// Each assignment's TTL is counted from its renewal's time, at
		// which the authority started counting its share, not from the
		// send: the renewals before it took their time.
		sent := set.Now()
		age(actions, sent.Sub(reported))
		age(due, sent.Sub(now))
		actions = append(actions, due...)
		if len(actions) > 0 {
			s.publish()
			if err := stream.Send(&rlqspb.RateLimitQuotaResponse{BucketAction: actions}); err != nil {
				return err
			}
		}
		wait := s.next(now)
		switch {
		case len(s.buckets) > 0:
			quiet = time.Time{}
		case quiet.IsZero():
			quiet = now
		case now.Sub(quiet) >= set.AbandonAfter:
			return nil
		default:
			wait = min(wait, max(quiet.Add(set.AbandonAfter).Sub(now), time.Millisecond))
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// newRLQSStream is a stream of a, whose holder id join gives.
func newRLQSStream(a *Adapters, set *RLQSSettings) *rlqsStream {
	return &rlqsStream{a: a, set: set, buckets: make(map[string]*rlqsBucket), keys: make(map[string]*rlqsKey)}
}

// report takes a client's usage report: it subscribes the stream to new
// buckets, whose first assignments it returns, and notes the usage of the
// others, from which the next renewal measures the demand.
func (s *rlqsStream) report(ctx context.Context, m *rlqspb.RateLimitQuotaUsageReports, now time.Time) ([]*rlqspb.RateLimitQuotaResponse_BucketAction, error) {
	switch d := m.GetDomain(); {
	case s.domain == "" && d == "":
		return nil, status.Error(codes.InvalidArgument, "domain: missing in the stream's first report")
	case s.domain == "":
		s.domain = d
	case d != "" && d != s.domain:
		return nil, status.Errorf(codes.InvalidArgument, "domain: the stream is for %q: open another stream for %q", s.domain, d)
	}
	var news []*rlqsBucket
	for i, u := range m.GetBucketQuotaUsages() {
		id, err := bucketKey(u.GetBucketId(), i)
		if err != nil {
			return nil, err
		}
		elapsed := time.Duration(0)
		if te := u.GetTimeElapsed(); te != nil {
			if err := te.CheckValid(); err != nil || te.AsDuration() < 0 {
				return nil, status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].time_elapsed: want a duration of at least 0", i)
			}
			elapsed = te.AsDuration()
		}
		units := min(u.GetNumRequestsAllowed(), maxReportUnits) + min(u.GetNumRequestsDenied(), maxReportUnits)
		b := s.buckets[id]
		if b != nil {
			b.lastReport = now
			b.units = min(b.units+units, maxReportUnits)
			if span := now.Sub(b.since); span >= b.policy.renew && b.measured(span) {
				b.measure(float64(b.units) / span.Seconds())
				b.units, b.since = 0, now
			}
			continue
		}
		if len(s.buckets) >= s.set.MaxBuckets || !s.a.rlqs.addBucket(s, s.set.MaxTotalBuckets, s.set.MaxBucketsPerPeer) {
			s.set.Count(RLQSRefused)
			continue
		}
		// A copy of the id's map alone: the client's message may carry
		// unknown fields past the id's bound, which every action would
		// send back.
		b = &rlqsBucket{id: &rlqspb.BucketId{Bucket: maps.Clone(u.GetBucketId().GetBucket())}, lastReport: now, since: now}
		s.resolve(b)
		s.buckets[id] = b
		// The first report may cover the time before the subscription;
		// the first measure of demand is over it, and at least a renewal.
		b.rate = float64(units) / max(elapsed, b.policy.renew, time.Millisecond).Seconds()
		news = append(news, b)
	}
	// The new buckets' keys renewed together: once each.
	actions := s.renew(ctx, news, now, true)
	for _, b := range news {
		s.set.Count(b.policy.result)
	}
	return actions, nil
}

// A bucket's demand is measured over at least a renewal interval, and
// until measureUnits requests have been reported, or measureSpans
// intervals have passed, or the count is clearly not the last measure's
// (more than three standard deviations off, as a Poisson count): a
// stream of few requests is measured over a longer time, where a count
// of a few would swing from one interval to the next, unless its demand
// has moved.
const (
	measureUnits = 100
	measureSpans = 10
)

// measured says whether the units reported over span measure the demand.
func (b *rlqsBucket) measured(span time.Duration) bool {
	want := b.rate * span.Seconds()
	return b.units >= measureUnits || span >= measureSpans*b.policy.renew ||
		math.Abs(float64(b.units)-want) > 3*math.Sqrt(want)+3
}

// deadband is the change of measured demand, as a fraction, that a
// bucket's demand does not follow: a steady demand measured with noise
// then keeps the stream's share, and so its strategy, unchanged, which
// the client extends rather than replaces (a new token bucket starts
// full).
const deadband = 0.05

// measure takes a new measure of the bucket's demand, in units per
// second.
func (b *rlqsBucket) measure(rate float64) {
	if math.Abs(rate-b.rate) > deadband*b.rate {
		b.rate = rate
	}
}

// bucketKey is a bucket id's canonical form, its keys sorted (a bucket id
// is a map: the order of its keys does not matter), after checking its
// bounds. i is its index in the report, for errors.
func bucketKey(id *rlqspb.BucketId, i int) (string, error) {
	m := id.GetBucket()
	switch {
	case len(m) == 0:
		return "", status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id: missing or empty", i)
	case len(m) > MaxBucketKeys:
		return "", status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id: %d keys; at most %d are allowed", i, len(m), MaxBucketKeys)
	}
	size := 0
	keys := make([]string, 0, len(m))
	for k, v := range m {
		size += len(k) + len(v)
		keys = append(keys, k)
	}
	if size > MaxBucketIDBytes {
		return "", status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id: %d bytes of keys and values; at most %d are allowed", i, size, MaxBucketIDBytes)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size + 8*len(keys))
	for _, k := range keys {
		// Lengths first, so that no two ids make one string.
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
		b.WriteString(strconv.Itoa(len(m[k])))
		b.WriteByte(':')
		b.WriteString(m[k])
	}
	return b.String(), nil
}

// resolve finds b's policy in the config being served: a reload may
// change its descriptor's order (the domain's rlqs section) and its
// limits.
func (s *rlqsStream) resolve(b *rlqsBucket) {
	snap := s.a.svc.Current()
	b.entries = snap.Config.RLQS(s.domain).Entries(b.id.GetBucket(), b.entries)
	b.policy = resolve(snap, s.domain, b.entries)
}

// renew resolves the policy of each of bs in the config being served,
// renews the stream's share of each key of their limits once, and
// returns the new assignments: theirs, and those of the stream's other
// buckets on those keys, whose parts the renewals changed. An unknown
// bucket gets none, nor one with a key the authority failed to renew.
//
// With fresh (the buckets are new, in a report), a key renewed within an
// eighth of its renewal interval is not renewed again: its new buckets
// wait for the rest of that eighth (see dueAt), so that a client adding a
// bucket a report does not have every bucket of the key reassigned at
// each. A bucket with an assignment out always has its keys renewed.
func (s *rlqsStream) renew(ctx context.Context, bs []*rlqsBucket, now time.Time, fresh bool) []*rlqspb.RateLimitQuotaResponse_BucketAction {
	var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
	var keys []*rlqsKey
	listed := map[*rlqsKey]bool{}
	for _, b := range bs {
		s.resolve(b)
		b.renewed = now
		keep := b.held[:0]
		for _, k := range b.held {
			if b.policy.result == RLQSAssigned && slices.ContainsFunc(b.policy.limits, func(l rlqsLimit) bool { return l.key == k }) {
				keep = append(keep, k)
			} else {
				s.detach(ctx, b, k)
			}
		}
		b.held = keep
		switch b.policy.result {
		case RLQSUnknown:
			b.last = nil
			continue
		case RLQSAssigned:
		default:
			as := assign(b, b.policy, s.keys, now)
			b.last = &as
			actions = append(actions, assignmentAction(b.id, as.strategy, as.ttl))
			continue
		}
		for _, l := range b.policy.limits {
			k := s.keys[l.key]
			if k == nil {
				k = &rlqsKey{key: l.key, buckets: make(map[*rlqsBucket]struct{})}
				s.keys[l.key] = k
			}
			k.rule = l.rule // a reload may change it
			if _, ok := k.buckets[b]; !ok {
				k.buckets[b] = struct{}{}
				b.held = append(b.held, l.key)
			}
			if !listed[k] {
				listed[k] = true
				keys = append(keys, k)
			}
		}
	}
	touched := map[*rlqsBucket]struct{}{}
	tried, failed := false, false
	for _, k := range keys {
		if fresh && now.Sub(k.tried) < k.every/8 {
			continue
		}
		tried = true
		if err := renewKey(ctx, s.set.Authority, s.holder, k, now); err != nil {
			s.set.Count(RLQSError)
			if !s.failing && ctx.Err() == nil {
				s.a.svc.Log.WarnContext(ctx, "rlqs: renewing a share failed: the stream's assignments expire at their TTL unless a renewal succeeds",
					"domain", s.domain, "err", err)
			}
			// Tried again a renewal later (tried), not at once.
			s.failing, failed = true, true
			continue
		}
		for o := range k.buckets {
			touched[o] = struct{}{}
		}
	}
	if tried {
		s.failing = failed
	}
	for o := range touched {
		if s.counted(o) {
			as := assign(o, o.policy, s.keys, now)
			o.last = &as
			actions = append(actions, assignmentAction(o.id, as.strategy, as.ttl))
		}
	}
	return actions
}

// counted reports whether every key of b's limits has a share whose last
// renewal counted b, so that b has a part of each.
func (s *rlqsStream) counted(b *rlqsBucket) bool {
	for _, key := range b.held {
		if _, ok := s.keys[key].weights[b]; !ok {
			return false
		}
	}
	return len(b.held) > 0
}

// detach takes b off the stream's key k; the stream gives its share of a
// key back when no bucket is left on it.
func (s *rlqsStream) detach(ctx context.Context, b *rlqsBucket, key string) {
	k := s.keys[key]
	if k == nil {
		return
	}
	delete(k.buckets, b)
	// Its part goes to the others at the key's next renewal; its weight
	// goes now, so that the key keeps no bucket the stream dropped.
	if w, ok := k.weights[b]; ok {
		delete(k.weights, b)
		k.sum -= w
	}
	if len(k.buckets) == 0 {
		delete(s.keys, key)
		s.release(ctx, []string{key})
	}
}

// age takes spent off the TTL of each assignment of actions, down to 0
// (an immediate expiry, when the assignment is already stale).
func age(actions []*rlqspb.RateLimitQuotaResponse_BucketAction, spent time.Duration) {
	if spent <= 0 {
		return
	}
	for _, a := range actions {
		if q := a.GetQuotaAssignmentAction(); q != nil {
			q.AssignmentTimeToLive = durationpb.New(max(q.GetAssignmentTimeToLive().AsDuration()-spent, 0))
		}
	}
}

func assignmentAction(id *rlqspb.BucketId, st *typepb.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    st,
			}}}
}

// due abandons the buckets not reported for AbandonAfter, and renews
// those whose renewal is due at now.
func (s *rlqsStream) due(ctx context.Context, now time.Time) []*rlqspb.RateLimitQuotaResponse_BucketAction {
	var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
	for id, b := range s.buckets {
		if now.Sub(b.lastReport) >= s.set.AbandonAfter {
			for _, k := range b.held {
				s.detach(ctx, b, k)
			}
			delete(s.buckets, id)
			s.a.rlqs.dropBuckets(s, 1)
			actions = append(actions, &rlqspb.RateLimitQuotaResponse_BucketAction{
				BucketId: b.id,
				BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
					AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
			})
		}
	}
	var due []*rlqsBucket
	for _, b := range s.buckets {
		if !s.dueAt(b).After(now) {
			due = append(due, b)
		}
	}
	return append(actions, s.renew(ctx, due, now, false)...)
}

// dueAt is when b's assignment is to be renewed: a renewal after its
// own, or for a token bucket a renewal after the oldest renewal (or
// failed attempt) of its keys, which its other buckets may have renewed
// since. A key that has not counted b yet (new beside a key renewed just
// before it, or whose renewal failed) is renewed an eighth of a renewal
// after its last.
func (s *rlqsStream) dueAt(b *rlqsBucket) time.Time {
	if b.policy.result != RLQSAssigned || len(b.held) == 0 {
		return b.renewed.Add(b.policy.renew)
	}
	var at time.Time
	for i, key := range b.held {
		k := s.keys[key]
		t := k.tried.Add(b.policy.renew)
		if _, ok := k.weights[b]; !ok {
			every := b.policy.renew
			if k.every > 0 {
				every = min(every, k.every)
			}
			t = k.tried.Add(every / 8)
		}
		if i == 0 || t.Before(at) {
			at = t
		}
	}
	return at
}

// next is how long until the stream's next renewal or abandonment.
func (s *rlqsStream) next(now time.Time) time.Duration {
	wait := s.set.AbandonAfter
	for _, b := range s.buckets {
		wait = min(wait, s.dueAt(b).Sub(now), b.lastReport.Add(s.set.AbandonAfter).Sub(now))
	}
	return max(wait, time.Millisecond)
}

// expireAll returns the response that expires each of the stream's
// assignments at once, nil if it has none.
func (s *rlqsStream) expireAll() *rlqspb.RateLimitQuotaResponse {
	var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
	for _, b := range s.buckets {
		if b.last != nil {
			actions = append(actions, assignmentAction(b.id, b.last.strategy, 0))
		}
	}
	if len(actions) == 0 {
		return nil
	}
	return &rlqspb.RateLimitQuotaResponse{BucketAction: actions}
}

// drop forgets the stream's buckets. Their shares are given back only
// when giveBack says the client was sent their expiry (a graceful stop):
// a stream that broke, or that the client closed, leaves a client that
// enforces its assignments until their TTL, so the authority keeps
// counting the shares until then, when they lapse.
func (s *rlqsStream) drop(ctx context.Context, giveBack bool) {
	if giveBack {
		s.release(ctx, slices.Collect(maps.Keys(s.keys)))
	}
	clear(s.keys)
	s.a.rlqs.dropBuckets(s, len(s.buckets))
	clear(s.buckets)
}

// release gives back the stream's shares of keys, with a context of its
// own when the stream's has ended.
func (s *rlqsStream) release(ctx context.Context, keys []string) {
	if len(keys) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var failed error
	for _, k := range keys {
		if err := s.set.Authority.Release(rctx, k, s.holder); err != nil && failed == nil {
			failed = err
		}
	}
	if failed != nil {
		// The shares lapse at their TTL all the same.
		s.a.svc.Log.WarnContext(ctx, "rlqs: giving a share back failed: it lapses at its TTL", "domain", s.domain, "err", failed)
	}
}

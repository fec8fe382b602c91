package sluice

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/algo"
)

// Algo names one of the algorithms, as configuration spells it.
type Algo string

// The algorithms a Rule can use.
const (
	AlgoTokenBucket    Algo = "token_bucket"
	AlgoLeakyBucket    Algo = "leaky_bucket"
	AlgoGCRA           Algo = "gcra"
	AlgoFixedWindow    Algo = "fixed_window"
	AlgoSlidingLog     Algo = "sliding_log"
	AlgoSlidingCounter Algo = "sliding_counter"
)

// AlgoInfo is what sluice knows of one algorithm: what configuration,
// documentation, the demo and the console say of it, and how a rule of it
// is kept. It encodes to JSON as its exported fields.
type AlgoInfo struct {
	// ID is the algorithm as configuration spells it.
	ID Algo `json:"id"`
	// Name is the algorithm as prose prints it: "token bucket".
	Name string `json:"name"`
	// Bucket reports whether the algorithm is a bucket: Limit.Burst
	// applies, and its quota is the capacity (Limit.Capacity), refilled
	// continuously. Otherwise it is a window: its quota is Rate per
	// Period, and Burst is ignored.
	Bucket bool `json:"bucket"`
	// Summary says in a sentence how it decides.
	Summary string `json:"summary"`

	kind   algo.Kind                      // the state a store keeps for a key
	single func(Limit) (Algorithm, error) // the single-key limiter
}

// registry lists every algorithm, once; everything that depends on which
// algorithms there are reads it. The order is the one Algos and the demo
// give: the buckets, then the windows. A new algorithm is its single-key
// type, in a file of its own, and an entry here; one that keeps a new kind
// of state also needs that state's arithmetic in internal/algo, and the
// stores' dispatch on it (memory, and the Redis store's Lua).
var registry = [...]AlgoInfo{
	{
		ID: AlgoTokenBucket, Name: "token bucket", Bucket: true, kind: algo.KindBucket,
		single:  single(NewTokenBucket),
		Summary: "A bucket of Burst tokens, full at the start and refilled at Rate per Period; a request takes its cost in tokens if the bucket holds them.",
	},
	{
		ID: AlgoLeakyBucket, Name: "leaky bucket", Bucket: true, kind: algo.KindBucket,
		single:  single(NewLeakyBucket),
		Summary: "A bucket of capacity Burst, empty at the start and leaking Rate per Period; a request pours its cost in if it fits. It decides as the token bucket does.",
	},
	{
		ID: AlgoGCRA, Name: "GCRA", Bucket: true, kind: algo.KindBucket,
		single:  single(NewGCRA),
		Summary: "The generic cell rate algorithm: the token bucket's decisions, kept as one theoretical arrival time.",
	},
	{
		ID: AlgoFixedWindow, Name: "fixed window", kind: algo.KindFixed,
		single:  single(NewFixedWindow),
		Summary: "A count per window of Period aligned to the Unix epoch: the cheapest, and the least exact, as up to twice Rate can pass across a boundary.",
	},
	{
		ID: AlgoSlidingLog, Name: "sliding log", kind: algo.KindLog,
		single:  single(NewSlidingLog),
		Summary: "The time of every request allowed in the last Period: exact, at the cost of memory for Rate requests per key.",
	},
	{
		ID: AlgoSlidingCounter, Name: "sliding counter", kind: algo.KindCounter,
		single:  single(NewSlidingCounter),
		Summary: "The current window's count plus the previous one's, weighted by how much of it the sliding window still covers: an estimate, in two counters.",
	},
}

// single adapts a single-key constructor to the registry, so that an
// error returns a nil Algorithm rather than a typed nil.
func single[T Algorithm](f func(Limit) (T, error)) func(Limit) (Algorithm, error) {
	return func(l Limit) (Algorithm, error) {
		x, err := f(l)
		if err != nil {
			return nil, err
		}
		return x, nil
	}
}

// Algos lists every algorithm: the buckets (token bucket, leaky bucket,
// GCRA), then the windows (fixed window, and the sliding window as a log
// and as a counter). The slice is new at each call.
func Algos() []Algo {
	out := make([]Algo, len(registry))
	for i := range registry {
		out[i] = registry[i].ID
	}
	return out
}

// AlgoInfos describes every algorithm, in the order of Algos. The slice is
// new at each call.
func AlgoInfos() []AlgoInfo { return append([]AlgoInfo(nil), registry[:]...) }

// Info returns what sluice knows of a, and false for an algorithm it does
// not know.
func (a Algo) Info() (AlgoInfo, bool) {
	for i := range registry {
		if registry[i].ID == a {
			return registry[i], true
		}
	}
	return AlgoInfo{}, false
}

// ErrUnknownAlgo is wrapped by the error for an algorithm name sluice does
// not know.
var ErrUnknownAlgo = errors.New("sluice: unknown algorithm")

// ParseAlgo returns the algorithm called s ("gcra", "token_bucket", ...).
func ParseAlgo(s string) (Algo, error) {
	if info, ok := Algo(s).Info(); ok {
		return info.ID, nil
	}
	return "", unknownAlgo(s)
}

// unknownAlgo is the error for the algorithm name s, which lists the
// names sluice knows.
func unknownAlgo(s string) error {
	ids := make([]string, len(registry))
	for i := range registry {
		ids[i] = string(registry[i].ID)
	}
	return fmt.Errorf("%w %q (want one of %s)", ErrUnknownAlgo, s, strings.Join(ids, ", "))
}

// New returns a single-key limiter of this algorithm for l.
func (a Algo) New(l Limit) (Algorithm, error) {
	info, ok := a.Info()
	if !ok {
		return nil, unknownAlgo(string(a))
	}
	return info.single(l)
}

// kind is the state the algorithm keeps.
func (a Algo) kind() (algo.Kind, error) {
	info, ok := a.Info()
	if !ok {
		return 0, unknownAlgo(string(a))
	}
	return info.kind, nil
}

// logCellBytes is the size of one cell of a sliding log (algo.Entry: a
// time and a count), and smallStateBytes about what the other algorithms
// keep for a key.
const (
	logCellBytes    = 16
	smallStateBytes = 64
)

// StateBytes is about how much memory one key of the algorithm holds
// under l: the sliding log allocates a cell per unit of the rate, at once;
// the others a few words.
func (a AlgoInfo) StateBytes(l Limit) int64 {
	if a.kind == algo.KindLog {
		return max(l.Rate, 0) * logCellBytes
	}
	return smallStateBytes
}

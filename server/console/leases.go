package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/lease"
)

// Leases is what the console reads of a service that decides leased rules
// (sluice.Lease): this process's leases, and each key's holders at the
// authority. Every field is set.
type Leases struct {
	// Holder is this process's name to the authority.
	Holder string
	// Held lists the leases this process holds (lease.Store.Leases).
	Held func() []HeldLease
	// Holdings lists the live holders of h's key at the authority
	// (lease.Authority.Holdings).
	Holdings func(ctx context.Context, h HeldLease) ([]lease.Holding, error)
}

// HeldLease is one lease this process holds: a rule's key, and its share
// of the key's quota until its expiry.
type HeldLease struct {
	Rule string // the rule's name
	Key  string // the key, as the requests name it
	// AuthorityKey is the lease's key at the authority, for Holdings.
	AuthorityKey string
	// Share is the units per period the process may admit, Burst its
	// part of the bucket's capacity, Demand what it was asked per period
	// over its last renewal.
	Share, Burst, Demand int64
	// Expires is when the share lapses without a renewal, on this
	// process's clock.
	Expires time.Time
}

// Bounds of GET /v1/leases: the keys it reports, and the time it gives
// the authority to answer for them all. Each key is one call to the
// authority (a Redis round trip), so a page refreshing every few seconds
// costs the authority a bounded amount.
const (
	maxLeaseKeys    = 50
	leasesReportFor = 2 * time.Second
)

// LeasesReport is GET /v1/leases: the leases this process holds, the keys
// asked most of first, with each key's holders at the authority.
type LeasesReport struct {
	// Leasing is whether the service decides leased rules: false when it
	// has no lease authority, and then the rest is empty.
	Leasing bool   `json:"leasing"`
	Holder  string `json:"holder,omitempty"` // this process's name to the authority
	// Held is how many leases this process holds; Keys the first
	// maxLeaseKeys of them by demand.
	Held int           `json:"held"`
	Keys []LeaseReport `json:"keys"`
	// KeysShown is whether keys are shown as they are (with the key
	// lookup on), or as '#' and 12 hex digits of their SHA-256.
	KeysShown bool `json:"keys_shown"`
}

// LeaseReport is one key's lease: this process's share, and every live
// holder's at the authority.
type LeaseReport struct {
	Rule    string    `json:"rule"`
	Key     string    `json:"key"`
	Share   int64     `json:"share"`
	Burst   int64     `json:"burst"`
	Demand  int64     `json:"demand"`
	Expires time.Time `json:"expires"`
	// Holders are the key's live holders, this process among them,
	// as the authority keeps them; none when it did not answer (Error).
	Holders []HolderReport `json:"holders"`
	Error   string         `json:"error,omitempty"`
}

// HolderReport is one holder's standing with a key at the authority.
type HolderReport struct {
	Holder string `json:"holder"`
	Self   bool   `json:"self,omitempty"` // this process
	Share  int64  `json:"share"`
	Burst  int64  `json:"burst"`
	Demand int64  `json:"demand"`
	// Expires is in the authority's time: Redis's clock for the Redis
	// authority.
	Expires time.Time `json:"expires"`
}

// serveLeases answers GET /v1/leases.
func (c *Console) serveLeases(w http.ResponseWriter, r *http.Request, opts Options) {
	ls := c.svc.Leases
	if ls == nil {
		writeJSON(w, http.StatusOK, &LeasesReport{Keys: []LeaseReport{}})
		return
	}
	held := ls.Held()
	out := &LeasesReport{Leasing: true, Holder: ls.Holder, Held: len(held), Keys: []LeaseReport{}, KeysShown: opts.Lookup}
	slices.SortFunc(held, func(a, b HeldLease) int {
		return cmp.Or(cmp.Compare(b.Demand, a.Demand), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key))
	})
	held = held[:min(len(held), maxLeaseKeys)]
	ctx, cancel := context.WithTimeout(r.Context(), leasesReportFor)
	defer cancel()
	for _, h := range held {
		lr := LeaseReport{Rule: h.Rule, Key: h.Key, Share: h.Share, Burst: h.Burst, Demand: h.Demand, Expires: h.Expires, Holders: []HolderReport{}}
		if !opts.Lookup {
			// A key names a client (an address, an API key): only the
			// key lookup shows one.
			lr.Key = config.SecretLabel(h.Key)
		}
		if hs, err := ls.Holdings(ctx, h); err != nil {
			lr.Error = "the authority did not answer: " + err.Error()
		} else {
			for _, x := range hs {
				lr.Holders = append(lr.Holders, HolderReport{Holder: x.Holder, Self: x.Holder == ls.Holder,
					Share: x.Share, Burst: x.Burst, Demand: x.Demand, Expires: x.Expires})
			}
		}
		out.Keys = append(out.Keys, lr)
	}
	writeJSON(w, http.StatusOK, out)
}

package console

import (
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/sim"
)

// reloadRecord remembers the outcome of the last reload, for the console.
type reloadRecord struct {
	mu   sync.Mutex
	last *reloadReport
}

// reloadReport is the last reload, as GET /v1/policy tells it.
type reloadReport struct {
	At     time.Time      `json:"at"`
	OK     bool           `json:"ok"`
	Errors []configReport `json:"errors,omitempty"` // when it failed: the last good config serves
}

// configReport is one problem of a config that did not load.
type configReport struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// record notes a reload at now that failed with err, or succeeded.
func (r *reloadRecord) record(now time.Time, err error) {
	rep := &reloadReport{At: now, OK: err == nil}
	for _, e := range flatten(err) {
		var ce *config.Error
		if errors.As(e, &ce) {
			rep.Errors = append(rep.Errors, configReport{File: ce.File, Line: ce.Line, Field: ce.Field, Message: ce.Err.Error()})
		} else {
			rep.Errors = append(rep.Errors, configReport{Message: e.Error()})
		}
	}
	r.mu.Lock()
	r.last = rep
	r.mu.Unlock()
}

func (r *reloadRecord) get() *reloadReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// flatten lists the errors errors.Join joined.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// PolicyReport is GET /v1/policy: the config as the server understands
// it.
type PolicyReport struct {
	Source []string `json:"source"` // the config files, or "(built-in)" or "(given in code)", or "xDS ADDR"
	// XDSVersion is the version_info of the xDS push in force, for a
	// config pushed over xDS; "" before the first.
	XDSVersion string         `json:"xds_version,omitempty"`
	Loaded     time.Time      `json:"loaded"` // when the config being served was loaded
	LastReload *reloadReport  `json:"last_reload"`
	Shadow     bool           `json:"shadow"` // every rule in shadow mode (--shadow)
	Domains    []domainReport `json:"domains"`
}

type domainReport struct {
	Name        string        `json:"name"`
	ForwardAuth string        `json:"forward_auth,omitempty"`
	Limits      []LimitReport `json:"limits"`
}

type LimitReport struct {
	Descriptor []entryJSON `json:"descriptor"` // a value ending in * is a wildcard; none: any value
	Name       string      `json:"name"`       // the rule's name: as written, or generated
	Unlimited  bool        `json:"unlimited,omitempty"`
	Algorithm  string      `json:"algorithm,omitempty"`
	Rate       int64       `json:"rate,omitempty"`
	Period     string      `json:"period,omitempty"`
	Burst      int64       `json:"burst,omitempty"`    // as written; 0 means the rate
	Capacity   int64       `json:"capacity,omitempty"` // the bucket's, for the buckets and GCRA
	Shadow     bool        `json:"shadow,omitempty"`
	Failure    string      `json:"failure,omitempty"`
	Charge     string      `json:"charge,omitempty"` // as decided: gate, usage, or count under ChargePerDescriptor
	// Lease, for a leased limit, is its renewal interval and its time to
	// live, defaults filled in: "renew 100ms, ttl 300ms".
	Lease    string   `json:"lease,omitempty"`
	Replaces []string `json:"replaces,omitempty"`
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Field    string   `json:"field"`
}

func (c *Console) policyReport() *PolicyReport {
	cfg, limits, loaded := c.svc.Current()
	out := &PolicyReport{Source: c.svc.Paths, Loaded: loaded, LastReload: c.reload.get(), Shadow: c.svc.Shadow}
	if c.svc.XDS != nil {
		addr, version := c.svc.XDS()
		out.Source, out.XDSVersion = []string{"xDS " + addr}, version
	} else if len(out.Source) == 0 {
		out.Source = []string{"(given in code)"}
		if c.svc.Policy == config.Default() {
			out.Source = []string{"(built-in policy)"}
		}
	}
	byDomain := map[string]*domainReport{}
	for _, d := range cfg.Domains() {
		dr := domainReport{Name: d, Limits: []LimitReport{}}
		if fa := cfg.ForwardAuth(d); fa != nil {
			dr.ForwardAuth = fa.String()
		}
		out.Domains = append(out.Domains, dr)
	}
	for i := range out.Domains {
		byDomain[out.Domains[i].Name] = &out.Domains[i]
	}
	for _, l := range cfg.Limits() {
		lr := LimitReport{Descriptor: entriesJSON(l.Descriptor), Name: l.Rule.Name, Unlimited: l.Unlimited, Shadow: l.Rule.Shadow,
			Replaces: l.Replaces, File: l.File, Line: l.Line, Field: l.Field}
		if !l.Unlimited {
			lr.Algorithm = string(l.Rule.Algorithm)
			lr.Rate, lr.Period, lr.Burst = l.Rule.Limit.Rate, sim.FmtDur(l.Rule.Limit.Period), l.Rule.Limit.Burst
			if info, ok := l.Rule.Algorithm.Info(); ok && info.Bucket {
				lr.Capacity = l.Rule.Limit.Capacity()
			}
			lr.Failure = l.Rule.Failure.String()
			lr.Charge = limits[l.ID].Rule.Rule().Charge.String()
			if ls := l.Rule.Lease; ls.Enabled {
				renew, ttl := ls.Times(l.Rule.Limit.Period)
				lr.Lease = "renew " + sim.FmtDur(renew) + ", ttl " + sim.FmtDur(ttl)
			}
		}
		if d := byDomain[l.Domain]; d != nil {
			d.Limits = append(d.Limits, lr)
		}
	}
	return out
}

// entryJSON is a descriptor entry in the admin API.
type entryJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func entriesJSON(es []config.Entry) []entryJSON {
	out := make([]entryJSON, len(es))
	for i, e := range es {
		out[i] = entryJSON(e)
	}
	return out
}

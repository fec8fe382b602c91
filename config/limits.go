package config

import (
	"slices"

	"github.com/sluicehq/sluice"
)

// LimitInfo describes one limit of a loaded config as the service
// understands it, for a tool or a console that lists the config.
type LimitInfo struct {
	Domain string
	// Descriptor is the path of entries a request descriptor takes to
	// land on the limit: a Value ending in * is a wildcard, an empty
	// Value stands for any value, and a secret descriptor's value is
	// shown as '#' and the first 12 hex digits of its SHA-256.
	Descriptor []Entry
	// Name is the limit's name as the config gives it, "" if none;
	// Rule.Name is Name or the generated one.
	Name string
	// Rule is the rule checked; for an unlimited limit only Name and
	// Shadow are set.
	Rule      sluice.Rule
	Unlimited bool
	Replaces  []string
	// File, Line and Field say where the limit is written.
	File  string
	Line  int
	Field string
	// ID is the rule's index in Rules, as in Match; -1 when unlimited.
	ID int
}

// Limits lists every limit, domain by domain in the order of Domains,
// each domain's in file order.
func (c *Config) Limits() []LimitInfo {
	if c == nil {
		return nil
	}
	var out []LimitInfo
	for _, name := range c.names {
		d := c.domains[name]
		paths := make(map[*limit][]Entry, len(d.limits))
		d.root.entries(nil, paths)
		for _, l := range d.limits {
			out = append(out, LimitInfo{
				Domain: name, Descriptor: paths[l], Name: l.name, Rule: l.rule,
				Unlimited: l.unlimited, Replaces: slices.Clone(l.replaces),
				File: l.file, Line: l.line, Field: l.field, ID: l.id,
			})
		}
	}
	return out
}

// entries records, for each limit at and under n, the entries that lead
// to it from the root, path being n's.
func (n *node) entries(path []Entry, out map[*limit][]Entry) {
	for i := range n.limits {
		out[&n.limits[i]] = slices.Clone(path)
	}
	walk := func(e Entry, child *node) {
		child.entries(append(path[:len(path):len(path)], e), out)
	}
	for e, child := range n.exact {
		walk(Entry{Key: e.Key, Value: child.shownValue()}, child)
	}
	for _, w := range n.wild {
		walk(Entry{Key: w.key, Value: w.node.shownValue()}, w.node)
	}
	for k, child := range n.any {
		walk(Entry{Key: k}, child)
	}
}

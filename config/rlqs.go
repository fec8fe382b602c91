package config

import (
	"cmp"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// RLQS is a domain's rlqs section: how Envoy's Rate Limit Quota Service
// turns a bucket id into a request descriptor of the domain. A bucket id
// is a map of keys to values, whose order does not matter; the descriptor
// is a list, whose order does. The keys BucketKeys lists come first, in
// its order, then the others, sorted by name. A domain without the
// section is served the same way with every key sorted by name. It is
// read-only and safe for concurrent use.
type RLQS struct {
	keys []string
	file string // where the section is, for errors
	line int
}

// BucketKeys are the section's bucket_keys, in order. Shared: do not
// modify.
func (q *RLQS) BucketKeys() []string {
	if q == nil {
		return nil
	}
	return q.keys
}

// Entries is the request descriptor of a bucket id, appended to buf: the
// keys BucketKeys lists, in its order, then the others sorted by name. q
// may be nil, for a domain without an rlqs section.
func (q *RLQS) Entries(bucket map[string]string, buf []Entry) []Entry {
	buf = buf[:0]
	listed := 0
	for _, k := range q.BucketKeys() {
		if v, ok := bucket[k]; ok {
			buf = append(buf, Entry{Key: k, Value: v})
			listed++
		}
	}
	rest := len(buf)
	if listed == len(bucket) {
		return buf
	}
	for k, v := range bucket {
		if !slices.Contains(q.BucketKeys(), k) {
			buf = append(buf, Entry{Key: k, Value: v})
		}
	}
	slices.SortFunc(buf[rest:], func(a, b Entry) int { return cmp.Compare(a.Key, b.Key) })
	return buf
}

var rlqsKeys = []string{"bucket_keys"}

func (w *walker) rlqs(n *yaml.Node, field string) *RLQS {
	m := w.mapping(n, field, rlqsKeys)
	if m == nil {
		return nil
	}
	q := &RLQS{file: w.file, line: n.Line}
	kf := join(field, "bucket_keys")
	items := w.sequence(m["bucket_keys"], kf)
	if len(items) > maxDepth {
		w.errorf(m["bucket_keys"], kf, "%d keys: at most %d, as descriptors nest", len(items), maxDepth)
		return q
	}
	seen := make(map[string]int, len(items))
	for i, item := range items {
		f := index(kf, i)
		k, ok := w.str(item, f)
		switch {
		case !ok:
			continue
		case k == "":
			w.errorf(item, f, "must not be empty")
			continue
		}
		if first, dup := seen[k]; dup {
			w.errorf(item, f, "%q is listed twice (first at line %d)", k, first)
			continue
		}
		seen[k] = item.Line
		q.keys = append(q.keys, k)
	}
	return q
}

// RLQS returns the rlqs section of domain, or nil if it has none.
func (c *Config) RLQS(domain string) *RLQS {
	if c == nil {
		return nil
	}
	if d := c.domains[domain]; d != nil {
		return d.rlqs
	}
	return nil
}

// mergeRLQS takes o's rlqs section into d, which may have only one.
func (d *domainConfig) mergeRLQS(o *domainConfig) error {
	switch {
	case o.rlqs == nil:
	case d.rlqs != nil:
		return &Error{File: o.rlqs.file, Line: o.rlqs.line, Field: "rlqs",
			Err: fmt.Errorf("domain %q already has an rlqs section, at %s:%d: give it in one file", d.name, d.rlqs.file, d.rlqs.line)}
	default:
		d.rlqs = o.rlqs
	}
	return nil
}

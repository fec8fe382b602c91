package config

import (
	"math"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// A descriptor's metadata is envoyproxy/ratelimit's: any YAML mapping,
// returned as the response's dynamic metadata when the server is asked to
// (see package server). It is read into the values JSON has, which is
// what a protobuf Struct holds: map[string]any, []any, string, int64 or
// float64, bool and nil.

// metadata reads a descriptor's metadata: a mapping, or nothing.
func (w *walker) metadata(n *yaml.Node, field string) map[string]any {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		w.errorf(n, field, "want a mapping of keys to values, got %s", describe(n))
		return nil
	}
	v, ok := w.metaValue(n, field, 0)
	if !ok {
		return nil
	}
	m := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	return m
}

// metaValue reads one value of metadata, depth levels down.
func (w *walker) metaValue(n *yaml.Node, field string, depth int) (any, bool) {
	if n = w.visit(n, field); n == nil {
		return nil, false
	}
	if depth > maxDepth {
		w.errorf(n, field, "nested deeper than %d levels", maxDepth)
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		return w.metaMapping(n, field, depth)
	case yaml.SequenceNode:
		list := make([]any, len(n.Content))
		for i, item := range n.Content {
			v, ok := w.metaValue(item, index(field, i), depth+1)
			if !ok {
				return nil, false
			}
			list[i] = v
		}
		return list, true
	case yaml.ScalarNode:
		return w.metaScalar(n, field)
	}
	w.errorf(n, field, "want a value, got %s", describe(n))
	return nil, false
}

// metaMapping reads a mapping of metadata. Its keys are plain scalars,
// each once; merge keys (<<) add the keys a mapping does not set itself.
func (w *walker) metaMapping(n *yaml.Node, field string, depth int) (any, bool) {
	m := make(map[string]any, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := w.visit(n.Content[i], field)
		if k == nil {
			return nil, false
		}
		if k.Kind != yaml.ScalarNode {
			w.errorf(k, field, "keys must be plain names, got %s", describe(k))
			return nil, false
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, n.Content[i+1])
			continue
		}
		if _, dup := m[k.Value]; dup {
			w.errorf(k, join(field, k.Value), "duplicate key")
			return nil, false
		}
		v, ok := w.metaValue(n.Content[i+1], join(field, k.Value), depth+1)
		if !ok {
			return nil, false
		}
		m[k.Value] = v
	}
	for _, mn := range merges {
		if mn = w.visit(mn, field); mn == nil {
			return nil, false
		}
		srcs := []*yaml.Node{mn}
		if mn.Kind == yaml.SequenceNode {
			srcs = mn.Content
		}
		for _, src := range srcs {
			if src = w.visit(src, field); src == nil {
				return nil, false
			}
			if src.Kind != yaml.MappingNode {
				w.errorf(src, field, "a merge key takes a mapping, got %s", describe(src))
				return nil, false
			}
			v, ok := w.metaMapping(src, field, depth+1)
			if !ok {
				return nil, false
			}
			for k, x := range v.(map[string]any) {
				if _, set := m[k]; !set {
					m[k] = x
				}
			}
		}
	}
	return m, true
}

// metaScalar reads a scalar of metadata as YAML types it: a number, a
// boolean, null, or else a string as written.
func (w *walker) metaScalar(n *yaml.Node, field string) (any, bool) {
	switch n.ShortTag() {
	case "!!null":
		return nil, true
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b, true
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return i, true
		}
		var f float64 // too large for an int64: a Struct holds a double anyway
		if n.Decode(&f) == nil && !math.IsInf(f, 0) {
			return f, true
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			if math.IsInf(f, 0) || math.IsNaN(f) {
				w.errorf(n, field, "%s: metadata numbers must be finite, as JSON's are", n.Value)
				return nil, false
			}
			return f, true
		}
	default:
		if !utf8.ValidString(n.Value) {
			w.errorf(n, field, "%s: not valid UTF-8", strconv.Quote(n.Value))
			return nil, false
		}
		return n.Value, true
	}
	w.errorf(n, field, "%s: not a value metadata can hold", strconv.Quote(n.Value))
	return nil, false
}

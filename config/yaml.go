package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML is read into yaml.v3's node tree and walked by hand rather than
// decoded into structs: every field then has a line for its error, unknown
// and duplicate keys are caught at every level with one message format,
// and a misplaced or misspelled key gets a hint.

// The caps on a config. A file is read into memory whole and parsed
// into yaml.v3's node tree, some 200 bytes a node, before a word of it is
// checked; so a file larger than MaxFileSize, or whose words and
// punctuation could make more than MaxNodes nodes, is refused before it
// is parsed. A file at the caps takes some 250 MB and a second to load;
// the files of a directory, read one at a time, at most MaxTotalSize
// together, and a loaded config keeps a few times its text.
const (
	// MaxFileSize is the most bytes a config file may hold: 4 MiB,
	// four times what a Kubernetes ConfigMap can.
	MaxFileSize = 4 << 20
	// MaxNodes is the most YAML nodes (keys, values, lists and mappings)
	// a config file may hold, counted with its aliases expanded: 2^20,
	// some 40,000 descriptors with a limit each, written out in full.
	MaxNodes = 1 << 20
	// MaxItems is the most descriptors and limits a config may hold, in
	// all its files together: 2^17, some 32 MB of them.
	MaxItems = 1 << 17
	// MaxTotalSize is the most bytes a config's files may hold together:
	// 32 MiB.
	MaxTotalSize = 32 << 20
)

const maxFileSize = MaxFileSize // parse.go's name for it

// Aliases let a few bytes stand for an exponential number of nodes, and
// may even form a cycle; so the walk counts the nodes it visits, aliases
// and merges included, and stops at a budget in proportion to the
// file's size, which a file without aliases never reaches (it has at
// most two nodes a byte), and at MaxNodes.
const (
	visitsPerByte = 4
	minVisits     = 4096
	maxDepth      = 64 // nested descriptors
)

// walker walks one file's node tree and collects its problems.
type walker struct {
	file   string
	errs   []error
	budget int  // nodes left to visit
	broke  bool // the budget is spent or there are too many errors
}

func newWalker(file string, size int) *walker {
	return &walker{file: file, budget: min(minVisits+visitsPerByte*size, MaxNodes)}
}

func (w *walker) errorf(n *yaml.Node, field, format string, args ...any) {
	w.error(n, field, fmt.Errorf(format, args...))
}

func (w *walker) error(n *yaml.Node, field string, err error) {
	if w.broke {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	if len(w.errs) == maxErrors {
		w.errs = append(w.errs, &Error{File: w.file, Line: line, Err: errors.New("too many problems: stopped reading the file here")})
		w.broke = true
		return
	}
	w.errs = append(w.errs, &Error{File: w.file, Line: line, Field: field, Err: err})
}

// visit charges one node to the budget and resolves aliases. It returns
// nil when n is nil, or the budget is spent, or there are too many errors
// to go on.
func (w *walker) visit(n *yaml.Node, field string) *yaml.Node {
	if w.broke {
		return nil
	}
	for n != nil && n.Kind == yaml.AliasNode {
		w.budget--
		n = n.Alias
	}
	if w.budget--; w.budget < 0 {
		w.errorf(n, field, "the file is too complex: its aliases expand to too many nodes")
		w.broke = true
		return nil
	}
	return n
}

// parseYAML reads the single YAML document in data.
func parseYAML(file string, data []byte) (doc *yaml.Node, err error) {
	// The parser has panicked on hostile input in the past; a config
	// file must never take the server down, so a panic is a parse error.
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, &Error{File: file, Err: fmt.Errorf("invalid YAML (%v)", r)}
		}
	}()
	if n := nodeBound(data); n > MaxNodes {
		return nil, &Error{File: file, Err: fmt.Errorf("too many YAML nodes: the file's words and punctuation allow for %d, and a config file may hold %d", n, MaxNodes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return &root, nil // empty file: reported as a missing domain
		}
		return nil, yamlError(file, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlError(file, err)
	default:
		return nil, &Error{File: file, Line: next.Line, Err: errors.New("a file holds one YAML document, one domain")}
	}
	return &root, nil
}

// nodeBound bounds from above the number of nodes yaml.v3 makes of data,
// without parsing it: one for each run of characters that are neither
// blank nor YAML punctuation, two for each punctuation character (":"
// alone is an empty key and an empty value; "-" an empty item and maybe
// a list), and two for the document. It knows nothing of quotes and
// comments, so that it can count what they hide but never miss what they
// do not: words in a comment or a quoted string count as if they were
// values. yaml.v3 takes the UTF-8 forms of NEL, LS and PS for line breaks,
// so a run ends at their last byte. TestNodeBound holds it to the bound.
func nodeBound(data []byte) int {
	n := 2
	inRun := false
	for _, c := range data {
		switch c {
		case ' ', '\t', '\r', '\n', 0x85, 0xa8, 0xa9:
			inRun = false
		case '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
			n += 2
			inRun = false
		default:
			if !inRun {
				n++
				inRun = true
			}
		}
	}
	return n
}

var wholeNumber = regexp.MustCompile(`^[-+]?[0-9][0-9_]*$`)

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns the YAML library's "yaml: line 3: ..." into an Error.
func yamlError(file string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if line, err := strconv.Atoi(m[1]); err == nil {
			return &Error{File: file, Line: line, Err: errors.New(m[2])}
		}
	}
	return &Error{File: file, Err: errors.New(strings.TrimPrefix(msg, "yaml: "))}
}

// mapping checks that n is a mapping whose keys are in known and appear
// once, and returns the value of each key whose value is not null. YAML
// merge keys (<<) are expanded; keys written out win over merged ones.
func (w *walker) mapping(n *yaml.Node, field string, known []string) map[string]*yaml.Node {
	n = w.visit(n, field)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		w.errorf(n, field, "want a mapping of keys to values, got %s", describe(n))
		return nil
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	lines := make(map[string]int, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode {
			if k = w.visit(k, field); k == nil {
				return nil
			}
		}
		if k.Kind != yaml.ScalarNode {
			w.errorf(k, field, "keys must be plain names, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := lines[k.Value]; dup {
			w.errorf(k, join(field, k.Value), "duplicate key: already set at line %d", first)
			continue
		}
		lines[k.Value] = k.Line
		if !slices.Contains(known, k.Value) {
			w.errorf(k, field, "%s", unknownKey(k.Value, known))
			continue
		}
		// A key set to null is taken as absent, as envoyproxy/ratelimit's
		// decoder takes it.
		if v = w.visit(v, join(field, k.Value)); v != nil && !isNull(v) {
			out[k.Value] = v
		}
	}
	for _, m := range merges {
		w.merge(m, field, known, out, lines)
	}
	return out
}

// merge adds the keys of a merge key's value to out, where not already set.
func (w *walker) merge(m *yaml.Node, field string, known []string, out map[string]*yaml.Node, lines map[string]int) {
	m = w.visit(m, field)
	if m == nil {
		return
	}
	srcs := []*yaml.Node{m}
	if m.Kind == yaml.SequenceNode {
		srcs = m.Content
	}
	for _, src := range srcs {
		for k, v := range w.mapping(src, field, known) {
			if _, set := lines[k]; !set {
				out[k] = v
				lines[k] = 0 // the first merge to set a key wins
			}
		}
	}
}

// sequence checks that n is a list and returns its items.
func (w *walker) sequence(n *yaml.Node, field string) []*yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		w.errorf(n, field, "want a list, got %s", describe(n))
		return nil
	}
	return n.Content
}

// str returns a scalar's text. Numbers and booleans are taken as written,
// as envoyproxy/ratelimit does: "value: 404" is the string "404".
func (w *walker) str(n *yaml.Node, field string) (string, bool) {
	if n == nil {
		return "", true
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!binary" {
		w.errorf(n, field, "want a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// boolean returns a scalar's truth: true or false (also yes/no, on/off,
// which YAML 1.1 readers such as envoyproxy/ratelimit's take as booleans).
func (w *walker) boolean(n *yaml.Node, field string) (bool, bool) {
	if n == nil {
		return false, true
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		w.errorf(n, field, "want true or false, got %s", describe(n))
		return false, false
	}
	return b, true
}

// integer returns a scalar's whole-number value. Quoted numbers are
// refused, as envoyproxy/ratelimit refuses them.
func (w *walker) integer(n *yaml.Node, field string) (int64, bool) {
	var i int64
	if n == nil {
		w.errorf(n, field, "missing")
		return 0, false
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && wholeNumber.MatchString(n.Value) {
		w.errorf(n, field, "%s is out of range", n.Value) // too long for an int, so YAML says float
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		w.errorf(n, field, "want a whole number, got %s", describe(n))
		return 0, false
	}
	if err := n.Decode(&i); err != nil {
		w.errorf(n, field, "%s is out of range", n.Value)
		return 0, false
	}
	return i, true
}

// describe names what n is, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// join appends a key to a field path.
func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// index appends a list index to a field path.
func index(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// Where each key belongs, for the hint on a misplaced one.
var keyHome = map[string]string{
	"domain":            "the top level",
	"forward_auth":      "the top level",
	"key":               "a descriptor",
	"value":             "a descriptor",
	"descriptors":       "a descriptor or the top level",
	"rate_limit":        "a descriptor",
	"rate_limits":       "a descriptor",
	"detailed_metric":   "a descriptor",
	"value_to_metric":   "a descriptor",
	"quota_mode":        "a descriptor",
	"metadata":          "a descriptor",
	"share_threshold":   "a descriptor",
	"shadow_mode":       "a descriptor or the top level",
	"failure":           "rate_limit or the top level",
	"name":              "rate_limit or a replaces entry",
	"unit":              "rate_limit",
	"unit_multiplier":   "rate_limit",
	"requests_per_unit": "rate_limit",
	"unlimited":         "rate_limit",
	"replaces":          "rate_limit",
	"algorithm":         "rate_limit",
	"period":            "rate_limit",
	"burst":             "rate_limit",
	"lease":             "rate_limit",
	"renew":             "a rate_limit's lease",
	"ttl":               "a rate_limit's lease",
	"deny_status":       "forward_auth",
	"entries":           "a forward_auth descriptor",
	"from":              "a forward_auth entry",
}

// unknownKey explains why key is not allowed where known keys are.
func unknownKey(key string, known []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
	}
	for _, k := range known {
		if a, b := norm(k), norm(key); a == b || len(b) >= 3 && editDistance(a, b) <= max(1, len(a)/5) {
			return fmt.Sprintf("unknown key %q (did you mean %q?)", key, k)
		}
	}
	if home, ok := keyHome[key]; ok {
		return fmt.Sprintf("key %q does not belong here (it goes in %s)", key, home)
	}
	return fmt.Sprintf("unknown key %q (want one of %s)", key, strings.Join(known, ", "))
}

// editDistance counts the single-byte insertions, deletions, substitutions
// and swaps of neighbours that turn a into b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // not worth it: no key is that long
	}
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

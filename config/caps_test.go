package config

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A file under MaxFileSize made of millions of tiny nodes is refused
// before it is parsed: parsed, each would cost some 200 bytes.
func TestParseRefusesTooManyNodes(t *testing.T) {
	const size = 3 << 20
	for name, text := range map[string]string{
		"flow keys":   "domain: d\nx: {" + strings.Repeat("a,", size/2) + "a}\n",
		"flow list":   "domain: d\nx: [" + strings.Repeat("a,", size/2) + "a]\n",
		"block list":  "domain: d\nx:\n" + strings.Repeat("-\n", size/2),
		"empty keys":  "domain: d\nx:\n" + strings.Repeat("  ?\n", size/4),
		"nested list": "domain: d\nx:\n" + strings.Repeat("- - - - - - - -\n", size/16),
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = Parse("bomb.yaml", []byte(text)) })
			if err == nil || !strings.Contains(err.Error(), "bomb.yaml: too many YAML nodes") {
				t.Errorf("Parse = %v, want too many nodes", err)
			}
			if n > 16<<20 {
				t.Errorf("Parse allocated %d MB refusing it, want it refused before parsing", n>>20)
			}
		})
	}
}

// A real config at the size cap is within the node cap: some 40,000
// descriptors with a limit each, written out in full, as MaxNodes says.
func TestNodeCapFitsRealConfigs(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := 0; b.Len() < MaxFileSize-200; i++ {
		fmt.Fprintf(&b, "  - key: user_%07d\n    value: v\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n", i)
	}
	if n := nodeBound([]byte(b.String())); n > MaxNodes {
		t.Errorf("a %d-byte config of %d descriptors counts %d nodes, over MaxNodes", b.Len(), strings.Count(b.String(), "- key"), n)
	}
}

// fanOut is a config whose one list of width descriptors, each with a
// limit, is repeated through an alias under parents descriptors, after a
// comment of pad bytes.
func fanOut(width, parents, pad int) string {
	var b strings.Builder
	b.WriteString("# " + strings.Repeat("x", pad) + "\ndomain: d\ndescriptors:\n  - key: list\n    descriptors: &list\n")
	for i := range width {
		fmt.Fprintf(&b, "      - {key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	for i := range parents {
		fmt.Fprintf(&b, "  - {key: p%d, descriptors: *list}\n", i)
	}
	return b.String()
}

// Aliases that expand a file past MaxNodes are refused, however large
// the file: its size is no licence to expand.
func TestParseRefusesAliasesPastMaxNodes(t *testing.T) {
	// Some 4 nodes a descriptor with its limit, a million in all; the
	// file is large enough (300 kB) that, in proportion to its size
	// alone, it could expand this far.
	text := fanOut(1000, 250, 300<<10)
	_, err := Parse("fan.yaml", []byte(text))
	if err == nil || !strings.Contains(err.Error(), "fan.yaml:") || !strings.Contains(err.Error(), "its aliases expand to too many nodes") {
		t.Errorf("Parse(aliases expanding to a million nodes) = %v, want them refused", err)
	}
	// Expanding within the cap is fine.
	c, err := Parse("fan.yaml", []byte(fanOut(100, 20, 0)))
	if err != nil || len(c.Rules()) != 100*21 {
		t.Errorf("Parse(a modest fan-out) = %d rules, %v; want %d", len(c.Rules()), err, 100*21)
	}
}

// A directory's files, each within the caps: the config as a whole holds
// at most MaxItems descriptors and limits, and Load stops reading at the
// file that passes it.
func TestLoadRefusesTooManyItems(t *testing.T) {
	dir := t.TempDir()
	// Each file: a list of 1000 descriptors, and 90 more copies of it
	// through an alias, 91,092 descriptors in all; and a comment, for a
	// size that allows for that much aliasing.
	for f := range 3 {
		var b strings.Builder
		fmt.Fprintf(&b, "# %s\n", strings.Repeat("x", 64<<10))
		fmt.Fprintf(&b, "domain: d%d\ndescriptors:\n  - key: list\n    descriptors: &list\n", f)
		for i := range 1000 {
			fmt.Fprintf(&b, "      - {key: k%d}\n", i)
		}
		for i := range 90 {
			fmt.Fprintf(&b, "  - {key: p%d, descriptors: *list}\n", i)
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("%d.yaml", f)), b.String())
	}
	if _, err := Load(filepath.Join(dir, "0.yaml")); err != nil {
		t.Fatalf("Load(one file) = %v", err)
	}
	_, err := Load(dir)
	want := filepath.Join(dir, "1.yaml") + ": too many descriptors and limits: with this file, the config holds more than 131072"
	if err == nil || err.Error() != want {
		t.Errorf("Load(three files) = %v, want %q", err, want)
	}
}

// A directory's files, each within the caps and of few items, hold at most
// MaxTotalSize bytes together: Load stops reading at the file that passes
// it, as a loaded config keeps its values, each a few times.
func TestLoadRefusesTooManyBytes(t *testing.T) {
	dir := t.TempDir()
	n := MaxTotalSize/(MaxFileSize-1024) + 1
	for f := range n {
		head := fmt.Sprintf("domain: d%d\ndescriptors:\n  - key: k\n    value: ", f)
		tail := "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
		writeFile(t, filepath.Join(dir, fmt.Sprintf("%02d.yaml", f)), head+strings.Repeat("v", MaxFileSize-1024-len(head)-len(tail))+tail)
	}
	if _, err := Load(filepath.Join(dir, "00.yaml")); err != nil {
		t.Fatalf("Load(one file) = %v", err)
	}
	_, err := Load(dir)
	want := filepath.Join(dir, fmt.Sprintf("%02d.yaml", n-1)) + ": the config's files hold more than 32 MiB together, the most a config may"
	if err == nil || err.Error() != want {
		t.Errorf("Load(%d files near the cap) = %v, want %q", n, err, want)
	}
}

package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// The package documentation's sample rate_limit lists every algorithm
// sluice knows, and which of them take a burst, so that an algorithm
// added to the registry cannot go undocumented.
func TestDocAlgorithms(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The comments of the sample's algorithm: and burst: keys, each a
	// key's line and the lines that continue its comment.
	comment := func(key string) string {
		var b strings.Builder
		in := false
		for line := range strings.Lines(string(src)) {
			line = strings.TrimPrefix(strings.TrimSpace(line), "//")
			switch {
			case strings.HasPrefix(line, "\t"+key+":"):
				in = true
			case in && !strings.HasPrefix(line, "\t "):
				return b.String()
			}
			if in {
				_, c, _ := strings.Cut(line, "#")
				b.WriteString(" " + strings.TrimSpace(c))
			}
		}
		return b.String()
	}
	list := func(s string) []string {
		return regexp.MustCompile(`[a-z]+(?:_[a-z]+)*`).FindAllString(s, -1)
	}

	var all, bursty []string
	for _, a := range sluice.AlgoInfos() {
		all = append(all, string(a.ID))
		if a.Bucket {
			bursty = append(bursty, string(a.ID))
		}
	}
	algos, _, ok := strings.Cut(comment("algorithm"), ". ")
	if got := slices.DeleteFunc(list(algos), func(w string) bool { return w == "or" }); !ok || !slices.Equal(got, all) {
		t.Errorf("doc.go's algorithm: lists %q, want %q (sluice.AlgoInfos)", got, all)
	}
	burst := comment("burst")
	_, burst, _ = strings.Cut(burst, " for ")
	burst, _, _ = strings.Cut(burst, ";")
	if got := slices.DeleteFunc(list(burst), func(w string) bool { return w == "and" }); !slices.Equal(got, bursty) {
		t.Errorf("doc.go's burst: is for %q, want %q (the buckets of sluice.AlgoInfos)", got, bursty)
	}
}

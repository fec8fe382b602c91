package config

import (
	"os"
	"strings"
	"testing"
)

// The README's YAML is a config that loads, so that it cannot drift from
// the format: each ```yaml block parses as a file of its own.
func TestREADMEConfig(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks int
		start  int // line of the open fence, 0 outside a block
		body   []string
	)
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, " \t")
		switch {
		case start == 0 && line == "```yaml":
			start, body = i+1, nil
		case start != 0 && line == "```":
			// Blank lines before the block make the errors' line numbers
			// the README's.
			text := strings.Repeat("\n", start) + strings.Join(body, "\n")
			if _, err := Parse("README.md", []byte(text)); err != nil {
				t.Errorf("the README's config does not load:\n%v", err)
			}
			blocks++
			start = 0
		case start != 0:
			body = append(body, line)
		}
	}
	if blocks == 0 {
		t.Fatal("README.md has no ```yaml block: the config section shows one")
	}
}

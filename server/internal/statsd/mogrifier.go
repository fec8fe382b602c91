package statsd

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A Mogrifier renames the statistics whose name its Pattern matches, and
// tags them, as envoyproxy/ratelimit's DogStatsD mogrifiers do
// (USE_DOG_STATSD_MOGRIFIERS): in Name and in each tag's value, $N
// stands for the pattern's Nth submatch ($0 the whole match), and stays
// as written when the pattern has no such group.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    []Tag
}

// placeholder is a $N in a Mogrifier's Name or tag value.
var placeholder = regexp.MustCompile(`\$\d+`)

// Validate reports what makes m unusable: no pattern, no name, or a tag
// without a name or a value.
func (m *Mogrifier) Validate() error {
	switch {
	case m.Pattern == nil || m.Pattern.String() == "":
		return fmt.Errorf("statsd: mogrifier: no pattern")
	case m.Name == "":
		return fmt.Errorf("statsd: mogrifier %q: no name", m.Pattern)
	}
	for _, t := range m.Tags {
		if t.Key == "" || t.Value == "" {
			return fmt.Errorf("statsd: mogrifier %q: tag %q: want a name and a value", m.Pattern, t.Key+":"+t.Value)
		}
	}
	return nil
}

// mogrify applies the first of ms whose pattern matches name: its new
// name and its tags; name itself and no tags when none matches.
func mogrify(ms []Mogrifier, name string) (string, []Tag) {
	for i := range ms {
		m := &ms[i]
		sub := m.Pattern.FindStringSubmatch(name)
		if sub == nil {
			continue
		}
		tags := make([]Tag, len(m.Tags))
		for j, t := range m.Tags {
			tags[j] = Tag{Key: t.Key, Value: expand(t.Value, sub)}
		}
		return expand(m.Name, sub), tags
	}
	return name, nil
}

// expand replaces each $N of s by sub[N], leaving those past sub as they
// are.
func expand(s string, sub []string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	return placeholder.ReplaceAllStringFunc(s, func(p string) string {
		n, err := strconv.Atoi(p[1:])
		if err != nil || n >= len(sub) {
			return p
		}
		return sub[n]
	})
}

package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func domainFile(name string) string {
	return "domain: " + name + "\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"
}

// configMap lays out dir as the kubelet mounts a ConfigMap: the data in a
// hidden timestamped directory, ..data a symlink to it, and each key a
// symlink through ..data. A new version is written beside the old one and
// ..data swapped over.
func configMap(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "..2026_01_02_03_04_05."+version)
	for name, text := range files {
		writeFile(t, filepath.Join(data, name), text)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	symlink(t, filepath.Base(data), tmp)
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
			symlink(t, filepath.Join("..data", name), link)
		}
	}
}

func TestLoadConfigMap(t *testing.T) {
	dir := t.TempDir()
	configMap(t, dir, "1", map[string]string{"api.yaml": domainFile("api"), "web.yml": domainFile("web")})
	// What else lives in such a directory and must be skipped.
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not: a config")
	writeFile(t, filepath.Join(dir, "README.md"), "# not a config")
	writeFile(t, filepath.Join(dir, ".git", "config.yaml"), "not: a config")

	c, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(ConfigMap dir) = %v", err)
	}
	if got, want := c.Domains(), []string{"api", "web"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %v, want %v", got, want)
	}
	files, err := Files(dir)
	if want := []string{filepath.Join(dir, "api.yaml"), filepath.Join(dir, "web.yml")}; err != nil || !slices.Equal(files, want) {
		t.Errorf("Files(dir) = %v, %v; want %v", files, err, want)
	}

	// The kubelet swaps ..data to a new version: the same paths now read
	// the new files.
	configMap(t, dir, "2", map[string]string{"api.yaml": domainFile("api2"), "web.yml": domainFile("web")})
	c, err = Load(dir)
	if err != nil {
		t.Fatalf("Load(ConfigMap dir, version 2) = %v", err)
	}
	if got, want := c.Domains(), []string{"api2", "web"}; !slices.Equal(got, want) {
		t.Errorf("after the swap, Domains() = %v, want %v", got, want)
	}
}

// TestLoadTree: a directory is read recursively, as envoyproxy/ratelimit
// reads its runtime directory, in lexical order within each directory;
// names starting with a dot are skipped at any depth, and a symlink to a
// directory is not followed (a link back up would loop).
func TestLoadTree(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.yaml"), domainFile("b"))
	writeFile(t, filepath.Join(dir, "a", "x.yaml"), domainFile("ax"))
	writeFile(t, filepath.Join(dir, "a", "deeper", "y.yml"), domainFile("ay"))
	writeFile(t, filepath.Join(dir, "a", ".old", "z.yaml"), domainFile("hidden"))
	writeFile(t, filepath.Join(dir, "a", "notes.txt"), "not yaml")
	writeFile(t, filepath.Join(dir, "c", "w.yaml"), domainFile("c"))
	symlink(t, "..", filepath.Join(dir, "c", "loop"))
	symlink(t, "../a", filepath.Join(dir, "c", "again.yaml"))

	files, err := Files(dir)
	want := []string{
		filepath.Join(dir, "a", "deeper", "y.yml"),
		filepath.Join(dir, "a", "x.yaml"),
		filepath.Join(dir, "b.yaml"),
		filepath.Join(dir, "c", "w.yaml"),
	}
	if err != nil || !slices.Equal(files, want) {
		t.Fatalf("Files(tree) = %v, %v; want %v", files, err, want)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(tree) = %v", err)
	}
	if got, want := c.Domains(), []string{"ax", "ay", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %v, want %v", got, want)
	}

	// A domain defined in two files of the tree is the usual error, naming both.
	writeFile(t, filepath.Join(dir, "c", "dup.yaml"), domainFile("ax"))
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `"ax" is already defined in `+filepath.Join(dir, "a", "x.yaml")) {
		t.Errorf("Load(tree with a domain twice) = %v; want it to name both files", err)
	}
}

// TestLoadTreeBounds: a tree too deep or with too many files is refused
// with an error naming the bound, not read without end.
func TestLoadTreeBounds(t *testing.T) {
	deep := t.TempDir()
	p := deep
	for range maxDirDepth + 1 {
		p = filepath.Join(p, "d")
	}
	writeFile(t, filepath.Join(p, "x.yaml"), domainFile("deep"))
	if _, err := Files(deep); err == nil || !strings.Contains(err.Error(), "nested more than 16 deep") {
		t.Errorf("Files(%d levels) = %v; want an error naming the depth", maxDirDepth+1, err)
	}

	wide := t.TempDir()
	for i := range maxDirFiles + 1 {
		writeFile(t, filepath.Join(wide, "s"+strconv.Itoa(i%3), strconv.Itoa(i)+".yaml"), "")
	}
	if _, err := Files(wide); err == nil || !strings.Contains(err.Error(), "more than 1000 config files") {
		t.Errorf("Files(%d files) = %v; want an error naming the bound", maxDirFiles+1, err)
	}
}

func TestLoadPaths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a", "one.yaml"), domainFile("one"))
	writeFile(t, filepath.Join(dir, "a", "two.YML"), domainFile("two"))
	writeFile(t, filepath.Join(dir, "three.conf"), domainFile("three"))
	writeFile(t, filepath.Join(dir, "empty", "notes.txt"), "")
	writeFile(t, filepath.Join(dir, "clash", "one.yaml"), domainFile("one"))
	if err := os.Mkdir(filepath.Join(dir, "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "nowhere.yaml", filepath.Join(dir, "broken", "dangling.yaml"))

	c, err := Load(filepath.Join(dir, "a"), filepath.Join(dir, "three.conf"))
	if err != nil {
		t.Fatalf("Load(dir, file) = %v", err)
	}
	if got, want := c.Domains(), []string{"one", "three", "two"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %v, want %v", got, want)
	}

	for _, tt := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"nothing", nil, "no config file or directory given"},
		{"missing", []string{filepath.Join(dir, "missing.yaml")}, "missing.yaml: no such file"},
		{"empty dir", []string{filepath.Join(dir, "empty")}, "no *.yaml or *.yml files"},
		{"dangling symlink", []string{filepath.Join(dir, "broken")}, "dangling.yaml: no such file"},
		{"domain twice", []string{filepath.Join(dir, "a"), filepath.Join(dir, "clash")},
			filepath.Join(dir, "clash", "one.yaml") + `:1: domain: "one" is already defined in ` + filepath.Join(dir, "a", "one.yaml") + ":1"},
		{"same file twice", []string{filepath.Join(dir, "three.conf"), filepath.Join(dir, "three.conf")}, `"three" is already defined`},
		{"duplicate domain fixture", []string{"testdata/duplicate_domain"},
			`testdata/duplicate_domain/b.yaml:2: domain: "shared" is already defined in testdata/duplicate_domain/a.yaml:1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.paths...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load(%q) = %v, %v; want an error containing %q", tt.paths, c, err, tt.want)
			}
		})
	}
}

func TestLoadReportsEveryFile(t *testing.T) {
	_, err := Load("testdata/bad_unit.yaml", "testdata/bad_algorithm.yaml")
	for _, want := range []string{"bad_unit.yaml:5:", "bad_algorithm.yaml:5:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(two bad files) = %v; want it to contain %q", err, want)
		}
	}
}

// A file over MaxFileSize is refused with its name and the cap, even one
// that is all comment.
func TestLoadRefusesHugeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "huge.yaml")
	text := domainFile("d") + "# " + strings.Repeat("x", MaxFileSize-len(domainFile("d"))-3) + "\n"
	writeFile(t, path, text)
	if _, err := Load(path); err != nil {
		t.Fatalf("Load(a file of exactly MaxFileSize bytes) = %v", err)
	}
	writeFile(t, path, text+"\n")
	want := path + ": larger than 4 MiB, the most a config file may hold"
	if _, err := Load(path); err == nil || err.Error() != want {
		t.Errorf("Load(a byte over MaxFileSize) = %v, want %q", err, want)
	}
	if _, err := Load(dir); err == nil || err.Error() != want {
		t.Errorf("Load(its directory) = %v, want %q", err, want)
	}
	if _, err := Parse("huge.yaml", []byte(text+"\n")); err == nil || !strings.Contains(err.Error(), "huge.yaml: ") {
		t.Errorf("Parse(a byte over MaxFileSize) = %v, want a size error", err)
	}
}

func TestReloadKeepsUnchangedRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	writeFile(t, path, `
domain: api
descriptors:
  - key: user
    rate_limits:
      - name: steady
        unit: second
        requests_per_unit: 10
      - name: daily
        unit: day
        requests_per_unit: 1000
  - key: ip
    rate_limit:
      unit: second
      requests_per_unit: 5
`)
	old, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rule := func(c *Config, key string, i int) any {
		t.Helper()
		ms, err := c.Match("api", []Entry{{key, "x"}})
		if err != nil || len(ms) <= i {
			t.Fatalf("Match(api, %s) = %v, %v", key, ms, err)
		}
		return ms[i].Rule
	}

	// The daily limit changes; the others do not.
	writeFile(t, path, strings.Replace(mustRead(t, path), "1000", "2000", 1))
	c, err := old.Reload(path)
	if err != nil {
		t.Fatal(err)
	}
	if rule(c, "user", 0) != rule(old, "user", 0) {
		t.Error("Reload: the unchanged rule 'steady' is a new pointer")
	}
	if rule(c, "ip", 0) != rule(old, "ip", 0) {
		t.Error("Reload: the unchanged unnamed rule is a new pointer")
	}
	if rule(c, "user", 1) == rule(old, "user", 1) {
		t.Error("Reload: the changed rule 'daily' kept its old pointer")
	}
	if got := c.Rules()[1].Limit.Rate; got != 2000 {
		t.Errorf("after Reload, daily rate = %d, want 2000", got)
	}

	// A bad config: an error, and the old Config is untouched.
	writeFile(t, path, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	bad, err := c.Reload(path)
	if err == nil || bad != nil {
		t.Fatalf("Reload(bad) = %v, %v; want nil and an error", bad, err)
	}
	if got := c.Rules()[1].Limit.Rate; got != 2000 {
		t.Errorf("after a failed Reload, daily rate = %d, want 2000", got)
	}

	// A nil Config reloads as Load.
	var none *Config
	if _, err := none.Reload("testdata/duplicate_domain/a.yaml"); err != nil {
		t.Errorf("(*Config)(nil).Reload = %v", err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// CheckRules reports a rule a check refuses at the limit that holds it.
func TestCheckRules(t *testing.T) {
	text := `domain: shop
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: second
      requests_per_unit: 10
  - key: ip
    rate_limits:
      - name: per_ip
        unit: minute
        requests_per_unit: 100
      - name: per_ip_daily
        unit: day
        requests_per_unit: 1000
`
	c, err := Parse("shop.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	errDaily := errors.New("no daily limits here")
	err = c.CheckRules(func(_ int, r sluice.Rule) error {
		if r.Limit.Period >= 24*time.Hour {
			return errDaily
		}
		return nil
	})
	var ce *Error
	if !errors.Is(err, errDaily) || !errors.As(err, &ce) || ce.File != "shop.yaml" || ce.Line != 13 || ce.Field != "descriptors[1].rate_limits[1]" {
		t.Errorf("CheckRules = %v (%+v), want shop.yaml:13: descriptors[1].rate_limits[1]", err, ce)
	}
	if err := c.CheckRules(func(int, sluice.Rule) error { return nil }); err != nil {
		t.Errorf("CheckRules with nothing to refuse = %v", err)
	}
}

// CheckRules gives each rule with its index in Rules, the ID its matches
// carry, so that a caller can keep what it prepares in a slice.
func TestCheckRulesIDs(t *testing.T) {
	c := mustParse(t, `domain: shop
descriptors:
  - key: user
    rate_limits:
      - {name: per_user, unit: second, requests_per_unit: 10}
      - {name: per_user_daily, unit: day, requests_per_unit: 1000}
  - key: health
    rate_limit: {unlimited: true}
  - key: ip
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 100}
`)
	rules := c.Rules()
	var ids []int
	err := c.CheckRules(func(id int, r sluice.Rule) error {
		if id < 0 || id >= len(rules) || rules[id] != r {
			t.Errorf("CheckRules gave %s as rule %d; Rules() = %v", r.Name, id, rules)
		}
		ids = append(ids, id)
		return nil
	})
	if err != nil || !slices.Equal(ids, []int{0, 1, 2}) {
		t.Errorf("CheckRules gave the ids %v, %v; want [0 1 2], nil", ids, err)
	}
	ms, _ := c.Match("shop", []Entry{{"ip", "192.0.2.1"}})
	if len(ms) != 1 || rules[ms[0].ID] != ms[0].Rule {
		t.Errorf("Match(ip) = %+v, want the rule at its ID in Rules", ms)
	}
}

package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
)

// Config is a loaded set of domains. It is immutable and safe for
// concurrent use; to change it, load a new one (see Reload).
type Config struct {
	domains map[string]*domainConfig
	names   []string // sorted
	opts    Options  // as loaded, for Reload
}

// Options change how a config is loaded. The zero value is Load's.
type Options struct {
	// MergeDomains lets several files define one domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. The domain is then
	// its files' top-level descriptors together, in the order the files
	// are read (which orders its wildcards); a descriptor, key and value,
	// at the top level of two of them is an error naming both, as is a
	// forward_auth section in two. A file's top-level shadow_mode and
	// failure still apply to its own descriptors only. Without it, a
	// domain defined in two files is an error.
	MergeDomains bool
	// EnvoyKeys makes a request descriptor's key envoyproxy/ratelimit's
	// cache key where a store could count it as envoyproxy/ratelimit does:
	// when the descriptor it lands on has one limit, a fixed window of
	// whole seconds, and no secret on the way, Match.Key is EnvoyKeyMark
	// followed by <domain>_<key>_<value>_…_ as envoyproxy/ratelimit writes
	// it (raw values; a share_threshold wildcard's pattern in place of the
	// value). A request value holding '_' keeps sluice's key: in
	// envoyproxy/ratelimit's, a client's "alice_path_/x" would count as the
	// descriptor (alice, /x) does; so does one holding "%#", with which a
	// short value could spell the digest a long key is cut to. A store appends the window's start in Unix seconds
	// (package redis, WithWindowKeys). Old and new pods of a rolling
	// swap then count in the same Redis keys. Other descriptors keep
	// sluice's keys.
	EnvoyKeys bool
}

// EnvoyKeyMark starts a key that is envoyproxy/ratelimit's cache key
// (Options.EnvoyKeys). sluice's own keys hold only printable ASCII, so no
// other key starts with it.
const EnvoyKeyMark = "\x1eenvoy\x1e"

// Load reads the config at each path: a YAML file, or a directory whose
// *.yaml and *.yml files, and those of its subdirectories, recursively,
// are each read, in name order, as envoyproxy/ratelimit reads its config
// directory. Each file is one domain; a domain defined twice is an error.
// In a directory, entries whose names start with a dot are skipped, files
// and directories alike: a Kubernetes ConfigMap mounted as a volume then
// reads right, its files being symlinks through the hidden ..data
// directory. Symlinks to directories are not followed. Each file must be
// a regular file, symlinks followed, within the caps (MaxFileSize,
// MaxNodes, MaxItems); a directory holds at most 1000 config files,
// nested at most 16 deep.
//
// Every problem found is reported, each as an *Error naming its file,
// line and field, joined with errors.Join. On error the Config is nil.
func Load(paths ...string) (*Config, error) { return Options{}.Load(paths...) }

// Load loads paths as the package's Load does, with the options o.
func (o Options) Load(paths ...string) (*Config, error) {
	if len(paths) == 0 {
		return nil, errors.New("config: no config file or directory given")
	}
	files, err := Files(paths...)
	if err != nil {
		return nil, err
	}
	return o.load(len(files), func(i int) (string, []byte, error) {
		data, err := readFile(files[i])
		return files[i], data, err
	})
}

// A Document is one config file's content, from elsewhere than a file:
// Name stands for the file in errors (Error.File) and in Limits.
type Document struct {
	Name string
	Data []byte
}

// Parse loads docs as Load loads files, with the options o: each is one
// domain, within the caps, and every problem is reported as an *Error
// naming its document. No document is an empty config, serving no
// domain. At most MaxDocuments documents are read.
func (o Options) Parse(docs ...Document) (*Config, error) {
	if len(docs) > MaxDocuments {
		return nil, fmt.Errorf("config: %d documents: at most %d", len(docs), MaxDocuments)
	}
	return o.load(len(docs), func(i int) (string, []byte, error) {
		if len(docs[i].Data) > MaxFileSize {
			return "", nil, errTooLarge(docs[i].Name)
		}
		return docs[i].Name, docs[i].Data, nil
	})
}

// MaxDocuments is the most documents Options.Parse reads, as a config
// directory holds at most as many files.
const MaxDocuments = maxDirFiles

// load parses n documents, the i-th read by doc, into a Config.
func (o Options) load(n int, doc func(i int) (name string, data []byte, err error)) (*Config, error) {
	var (
		ds    []*domainConfig
		errs  []error
		items int // descriptors and limits so far
		size  int // bytes so far
	)
	for i := range n {
		name, data, err := doc(i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// A loaded config keeps its values, some of them several
		// times (key, rule name, path): bound the whole, not each file.
		if size += len(data); size > MaxTotalSize {
			errs = append(errs, &Error{File: name, Err: fmt.Errorf("the config's files hold more than %d MiB together, the most a config may", MaxTotalSize>>20)})
			break
		}
		d, derrs := parseDomain(name, data)
		if d != nil {
			ds = append(ds, d)
			// Each document is within the caps, but a directory may
			// hold many files: stop reading them at the cap.
			if err := countItems(d, &items); err != nil {
				errs = append(errs, err)
				break
			}
		}
		errs = append(errs, derrs...)
	}
	c, cerrs := build(ds, o)
	if errs = append(errs, cerrs...); len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return c, nil
}

// countItems adds d's descriptors and limits to *items, and refuses more
// than MaxItems.
func countItems(d *domainConfig, items *int) error {
	if *items += d.root.size(); *items > MaxItems {
		return &Error{File: d.file, Err: fmt.Errorf("too many descriptors and limits: with this file, the config holds more than %d", MaxItems)}
	}
	return nil
}

// size counts the descriptors and limits at and under n.
func (n *node) size() int {
	c := 1 + len(n.limits)
	for _, k := range n.exact {
		c += k.size()
	}
	for _, w := range n.wild {
		c += w.node.size()
	}
	for _, k := range n.any {
		c += k.size()
	}
	return c
}

// Parse reads one file's content, named name in errors.
func Parse(name string, data []byte) (*Config, error) {
	d, errs := parseDomain(name, data)
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	if err := countItems(d, new(int)); err != nil {
		return nil, err
	}
	c, errs := build([]*domainConfig{d}, Options{})
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return c, nil
}

// Reload loads paths as Load does, with the Options c was loaded with.
// A store keeps a key's state under the rule's value, so a rule left
// unchanged keeps its counts across the reload. On error it returns nil
// and the error, and c is as good as before. c may be nil, for Load's
// options.
func (c *Config) Reload(paths ...string) (*Config, error) {
	var o Options
	if c != nil {
		o = c.opts
	}
	return o.Load(paths...)
}

func build(ds []*domainConfig, o Options) (*Config, []error) {
	c := &Config{domains: make(map[string]*domainConfig, len(ds)), opts: o}
	var errs []error
	for _, d := range ds {
		prev := c.domains[d.name]
		switch {
		case prev == nil:
			c.domains[d.name] = d
			c.names = append(c.names, d.name)
		case o.MergeDomains:
			errs = append(errs, prev.merge(d)...)
		default:
			errs = append(errs, &Error{File: d.file, Line: d.line, Field: "domain",
				Err: fmt.Errorf("%q is already defined in %s:%d (merging a domain's files takes -merge-domains, envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)", d.name, prev.file, prev.line)})
		}
	}
	for _, name := range c.names {
		errs = append(errs, checkForwardAuth(c.domains[name])...)
	}
	slices.Sort(c.names)
	c.number()
	return c, errs
}

// merge adds the top-level descriptors and the forward_auth and rlqs
// sections of another file of d's domain to d (Options.MergeDomains).
func (d *domainConfig) merge(o *domainConfig) []error {
	var errs []error
	dup := func(key string, n, first *node) {
		errs = append(errs, &Error{File: n.file, Line: n.line, Field: n.field,
			Err: fmt.Errorf("duplicate descriptor key %q value %q in domain %q: already defined at %s:%d", key, n.shownValue(), d.name, first.file, first.line)})
	}
	for e, n := range o.root.exact {
		if first := d.root.exact[e]; first != nil {
			dup(e.Key, n, first)
			continue
		}
		if d.root.exact == nil {
			d.root.exact = make(map[Entry]*node)
		}
		d.root.exact[e] = n
	}
	for _, w := range o.root.wild {
		if i := slices.IndexFunc(d.root.wild, func(x wildcard) bool { return x.key == w.key && x.node.value == w.node.value }); i >= 0 {
			dup(w.key, w.node, d.root.wild[i].node)
			continue
		}
		d.root.wild = append(d.root.wild, w)
	}
	for k, n := range o.root.any {
		if first := d.root.any[k]; first != nil {
			dup(k, n, first)
			continue
		}
		if d.root.any == nil {
			d.root.any = make(map[string]*node)
		}
		d.root.any[k] = n
	}
	switch {
	case o.auth == nil:
	case d.auth != nil:
		errs = append(errs, &Error{File: o.auth.file, Line: o.auth.line, Field: "forward_auth",
			Err: fmt.Errorf("domain %q already has a forward_auth section, at %s:%d: give it in one file", d.name, d.auth.file, d.auth.line)})
	default:
		d.auth = o.auth
	}
	if err := d.mergeRLQS(o); err != nil {
		errs = append(errs, err)
	}
	d.limits = append(d.limits, o.limits...)
	slices.SortFunc(errs, func(a, b error) int { return a.(*Error).Line - b.(*Error).Line })
	return errs
}

// number gives each limit its index in Rules, and unlimited ones -1.
func (c *Config) number() {
	id := 0
	for _, name := range c.names {
		for _, l := range c.domains[name].limits {
			l.id = -1
			if !l.unlimited {
				l.id = id
				id++
			}
		}
	}
}

// Files lists the files Load reads for paths, in the order it reads them,
// for a watcher that wants to know when they change. The error is for a
// path that cannot be read, a directory with no config file, or a file
// that is not a regular file (a named pipe, say), which Load refuses.
func Files(paths ...string) ([]string, error) {
	var files []string
	for _, p := range paths {
		fs, err := configFiles(p)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	return files, nil
}

// The most files and the deepest nesting a config directory may hold: a
// tree past them is refused rather than read without end.
const (
	maxDirFiles = 1000
	maxDirDepth = 16
)

// configFiles lists the files path stands for: path itself if it is a
// file; if a directory, its *.yaml and *.yml files and those of its
// subdirectories, recursively, in lexical order of their paths within
// each directory, as envoyproxy/ratelimit reads its runtime directory.
// Names that start with a dot are skipped, files and directories alike
// (a Kubernetes ConfigMap's ..data and timestamped directories hold a
// second copy of every file). A symlink to a file is followed (a
// ConfigMap's files are such links); a symlink to a directory is not, so
// that no link can make the walk loop.
func configFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !fi.IsDir() {
		if err := regular(path, fi); err != nil {
			return nil, err
		}
		return []string{path}, nil
	}
	var files []string
	if err := walkConfigDir(path, 0, &files); err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("config: %s: no *.yaml or *.yml files in the directory or below", path)
	}
	return files, nil
}

// walkConfigDir appends to files the config files of dir, depth levels
// below the directory given.
func walkConfigDir(dir string, depth int, files *[]string) error {
	if depth > maxDirDepth {
		return fmt.Errorf("config: %s: directories nested more than %d deep", dir, maxDirDepth)
	}
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		f := filepath.Join(dir, name)
		if e.IsDir() { // a real directory: ReadDir does not follow links
			if err := walkConfigDir(f, depth+1, files); err != nil {
				return err
			}
			continue
		}
		if ext := strings.ToLower(filepath.Ext(name)); ext != ".yaml" && ext != ".yml" {
			continue
		}
		// A ConfigMap's files are symlinks: follow them to see what they are.
		fi, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if fi.IsDir() { // a link to a directory named *.yaml: not followed
			continue
		}
		if err := regular(f, fi); err != nil {
			return err
		}
		if len(*files) == maxDirFiles {
			return fmt.Errorf("config: %s: more than %d config files", dir, maxDirFiles)
		}
		*files = append(*files, f)
	}
	return nil
}

// regular refuses what is not a regular file, symlinks followed: reading a
// named pipe waits for a writer that may never come, and a device may
// never end.
func regular(name string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	what := "not a regular file"
	switch m := fi.Mode(); {
	case m.IsDir():
		what = "a directory, not a file"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe, not a regular file"
	case m&fs.ModeSocket != 0:
		what = "a socket, not a regular file"
	case m&fs.ModeDevice != 0:
		what = "a device, not a regular file"
	}
	return &Error{File: name, Err: errors.New(what)}
}

// OpenFile opens a config file for reading as Load reads it: symlinks
// followed, it must be a regular file of at most MaxFileSize bytes. It
// never waits on the file: a named pipe, which blocks an ordinary open
// until a writer comes, is refused, even one swapped in for the file
// just before the open. The caller closes the file, and reads at most
// MaxFileSize+1 bytes of it: it may have grown since it was looked at.
func OpenFile(name string) (*os.File, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkFile(name, fi); err != nil {
		return nil, err
	}
	f, err := openNonblocking(name)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// What was opened may not be what was looked at.
	if fi, err = f.Stat(); err == nil {
		err = checkFile(name, fi)
	}
	if err == nil {
		err = setBlocking(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkFile refuses what OpenFile does not read.
func checkFile(name string, fi fs.FileInfo) error {
	if err := regular(name, fi); err != nil {
		return err
	}
	if fi.Size() > MaxFileSize {
		return errTooLarge(name)
	}
	return nil
}

func errTooLarge(name string) error {
	return &Error{File: name, Err: fmt.Errorf("larger than %d MiB, the most a config file may hold", MaxFileSize>>20)}
}

// readFile reads a config file, as OpenFile allows.
func readFile(name string) ([]byte, error) {
	f, err := OpenFile(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, errTooLarge(name)
	}
	return data, nil
}

// Domains lists the domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.names)
}

// Rules lists the rules to check, domain by domain in the order of
// Domains, each domain's in file order. Unlimited limits have no rule to
// check and are not listed. The slice is new at each call.
//
// A Match's ID is its rule's index here.
func (c *Config) Rules() []sluice.Rule {
	if c == nil {
		return nil
	}
	var rs []sluice.Rule
	for _, name := range c.names {
		for _, l := range c.domains[name].limits {
			if !l.unlimited {
				rs = append(rs, l.rule)
			}
		}
	}
	return rs
}

// CheckRules calls check on every rule of Rules, in order, with its
// index there, and returns its errors, joined, each as an *Error at the
// limit that holds the rule: for checks a config cannot make by itself,
// such as whether a store can hold the rule (sluice.Limiter.Prepare).
func (c *Config) CheckRules(check func(id int, r sluice.Rule) error) error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, name := range c.names {
		for _, l := range c.domains[name].limits {
			if l.unlimited {
				continue
			}
			if err := check(l.id, l.rule); err != nil {
				errs = append(errs, &Error{File: l.file, Line: l.line, Field: l.field, Err: err})
			}
		}
	}
	return errors.Join(errs...)
}

// ForwardAuth returns the forward_auth section of domain, or nil if it has
// none.
func (c *Config) ForwardAuth(domain string) *ForwardAuth {
	if c == nil {
		return nil
	}
	if d := c.domains[domain]; d != nil {
		return d.auth
	}
	return nil
}

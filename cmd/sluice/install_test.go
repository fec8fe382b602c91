package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// A workspaceModule is one module that go.work uses.
type workspaceModule struct {
	dir string // absolute
	mod *modfile.File
}

// readWorkspace parses go.work and the go.mod of every module it uses.
func readWorkspace(t *testing.T) (*modfile.WorkFile, []workspaceModule) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mods []workspaceModule
	for _, u := range work.Use {
		dir := filepath.Join(root, filepath.FromSlash(u.Path))
		name := filepath.Join(dir, "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, workspaceModule{dir: dir, mod: f})
	}
	return work, mods
}

// releaseVersion is the version the modules require of their siblings,
// which TestModulesInstallable holds to one.
func releaseVersion(t *testing.T, mods []workspaceModule) string {
	t.Helper()
	paths := map[string]bool{}
	for _, m := range mods {
		paths[m.mod.Module.Mod.Path] = true
	}
	for _, m := range mods {
		for _, r := range m.mod.Require {
			if paths[r.Mod.Path] {
				return r.Mod.Version
			}
		}
	}
	t.Fatal("no module requires a sibling")
	return ""
}

// Every module installs from a module proxy as it is: its go.mod has no
// replace directive and requires its siblings at one released version,
// and go.work, which joins the modules for development, uses every module
// of the tree and replaces that version of each required sibling by its
// directory (a workspace still reads a required version's go.mod, which
// does not exist before the release is tagged).
func TestModulesInstallable(t *testing.T) {
	work, mods := readWorkspace(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dirOf := map[string]string{} // module path -> directory
	for _, m := range mods {
		dirOf[m.mod.Module.Mod.Path] = m.dir
	}
	version := releaseVersion(t, mods)
	required := map[string]bool{}
	for _, m := range mods {
		name := m.mod.Module.Mod.Path
		for _, r := range m.mod.Replace {
			t.Errorf("%s: replace %s: go install refuses a module with replace directives; go.work joins the modules", name, r.Old.Path)
		}
		for _, r := range m.mod.Require {
			if _, ok := dirOf[r.Mod.Path]; !ok {
				continue
			}
			required[r.Mod.Path] = true
			if r.Mod.Version != version {
				t.Errorf("%s requires %s %s, want %s like its other siblings", name, r.Mod.Path, r.Mod.Version, version)
			}
		}
	}
	replaced := map[string]bool{}
	for _, r := range work.Replace {
		dir := filepath.Join(root, filepath.FromSlash(r.New.Path))
		switch {
		case dirOf[r.Old.Path] == "":
			t.Errorf("go.work replaces %s, which is no module of the workspace", r.Old.Path)
		case r.Old.Version != version:
			t.Errorf("go.work replaces %s at %q, want %s, the version the modules require", r.Old.Path, r.Old.Version, version)
		case dir != dirOf[r.Old.Path]:
			t.Errorf("go.work replaces %s by %s, want its directory %s", r.Old.Path, r.New.Path, dirOf[r.Old.Path])
		}
		replaced[r.Old.Path] = true
	}
	for p := range required {
		if !replaced[p] {
			t.Errorf("go.work does not replace %s %s by its directory: a build in the workspace would look for that version", p, version)
		}
	}

	// Every go.mod in the tree is a module go.work uses.
	used := map[string]bool{}
	for _, m := range mods {
		used[m.dir] = true
	}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" && !used[filepath.Dir(p)] {
			rel, _ := filepath.Rel(root, p)
			t.Errorf("%s: a module that go.work does not use", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A new user installs the library, the Redis store and the sluice command
// with the README's lines, in a module of their own outside this tree. The
// test serves this tree's modules, at the version they require of each
// other, from a file:// module proxy placed before the ordinary one (the
// modules they need come from the machine's module cache or that proxy),
// runs the README's lines in a fresh module with no workspace, builds a
// program that imports sluice and sluice/redis, and runs the installed
// sluice.
func TestInstallFromProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice from a module proxy made of this tree, a build of its own: skipped under -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to install sluice as a user does: %v", err)
	}
	lines := readmeInstallLines(t)
	u := newUserModule(t, gobin, nil)
	goCmd := func(args ...string) string {
		t.Helper()
		return u.goCmd(t, args...)
	}
	version, app, bin := u.version, u.app, u.bin

	for _, args := range lines {
		goCmd(args...)
	}
	for _, p := range []string{"github.com/sluicehq/sluice", "github.com/sluicehq/sluice/redis"} {
		if got := strings.TrimSpace(goCmd("list", "-m", "-f", "{{.Version}}", p)); got != version {
			t.Errorf("after the README's go get, %s is at %q, want %s from the proxy", p, got, version)
		}
	}

	const program = `package main

import (
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redis"
)

var _ sluice.Store = (*redis.Store)(nil)

func main() {
	lim, err := sluice.NewTokenBucket(sluice.PerSecond(5))
	if err != nil {
		panic(err)
	}
	fmt.Println(lim.AllowN(sluice.SystemClock.Now(), 1).Allowed)
}
`
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := goCmd("run", "."); strings.TrimSpace(out) != "true" {
		t.Errorf("go run of a program importing sluice and sluice/redis printed %q, want true", out)
	}

	sluiceBin := filepath.Join(bin, "sluice")
	info := goCmd("version", "-m", sluiceBin)
	for _, want := range []string{"mod\tgithub.com/sluicehq/sluice/cmd/sluice\t" + version, "dep\tgithub.com/sluicehq/sluice/server\t" + version} {
		if !strings.Contains(info, want) {
			t.Errorf("go version -m %s has no line %q:\n%s", sluiceBin, want, info)
		}
	}
	cmd := exec.Command(sluiceBin, "help")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "serve") {
		t.Errorf("sluice help: %v\n%s\nwant exit 0 and the commands", err, out)
	}
}

// userModule is a new user's module outside this tree, where the README's
// go get and go install lines run as they would for that user: this
// tree's modules, at the version they require of each other, come from a
// file:// module proxy placed before the ordinary one (the modules they
// need come from the machine's module cache or that proxy), with no
// workspace.
type userModule struct {
	gobin   string
	version string   // the modules' version in the proxy
	app     string   // the module's directory
	bin     string   // GOBIN: where go install puts sluice
	env     []string // the go command's environment
}

// newUserModule makes the proxy and an empty module example.com/app. The
// go command runs in this process's environment with the variables the
// proxy needs, and set's, in place of their own.
func newUserModule(t *testing.T, gobin string, set map[string]string) *userModule {
	t.Helper()
	_, mods := readWorkspace(t)
	version := releaseVersion(t, mods)
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range mods {
		writeProxyModule(t, proxy, m, version)
	}

	goEnv := func(name string) string {
		out, err := exec.Command(gobin, "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	// The module cache's download directory has the layout of a proxy:
	// what this machine has downloaded needs no network.
	upstream := []string{fileURL(proxy), fileURL(filepath.Join(goEnv("GOMODCACHE"), "cache", "download"))}
	if p := goEnv("GOPROXY"); p != "" {
		upstream = append(upstream, p)
	}
	u := &userModule{gobin: gobin, version: version, app: filepath.Join(tmp, "app"), bin: filepath.Join(tmp, "bin")}
	if err := os.MkdirAll(u.app, 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"GOWORK":  "off",
		"GOPROXY": strings.Join(upstream, ","),
		// The sumdb has not seen these versions; everything else is
		// checked as for any user. GOPRIVATE and GONOPROXY would fetch
		// the modules from their repository instead of the proxy.
		"GONOSUMDB": "github.com/sluicehq",
		"GOPRIVATE": "",
		"GONOPROXY": "",
		// -modcacherw lets the temporary module cache be removed;
		// -trimpath keeps the build cache's entries for the modules
		// independent of that cache's path, so a second run reuses them.
		"GOFLAGS":     "-mod=mod -modcacherw -trimpath",
		"GOMODCACHE":  filepath.Join(tmp, "modcache"), // this tree's content, not a cached v0.1.0 of another
		"GOBIN":       u.bin,
		"GOTOOLCHAIN": "local",
	}
	maps.Copy(vars, set)
	u.bin = vars["GOBIN"]
	u.env = installEnv(vars)
	u.goCmd(t, "mod", "init", "example.com/app")
	return u
}

// goCmd runs the go command in the user's module and returns its output,
// failing the test with its errors.
func (u *userModule) goCmd(t *testing.T, args ...string) string {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond)) }()
	cmd := exec.Command(u.gobin, args...)
	cmd.Dir = u.app
	cmd.Env = u.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// readmeInstallLines returns the go get and go install commands of the
// README's Install section, each as the arguments of go.
func readmeInstallLines(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][]string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Install"
			continue
		}
		cmd, _, _ := strings.Cut(line, "#")
		fields := strings.Fields(cmd)
		if in && strings.HasPrefix(line, "    ") && len(fields) > 2 && fields[0] == "go" {
			lines = append(lines, fields[1:])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var getRoot, installCmd bool
	for _, l := range lines {
		getRoot = getRoot || l[0] == "get" && strings.HasPrefix(l[len(l)-1], "github.com/sluicehq/sluice@")
		installCmd = installCmd || l[0] == "install" && strings.HasPrefix(l[len(l)-1], "github.com/sluicehq/sluice/cmd/sluice@")
	}
	if !getRoot || !installCmd {
		t.Fatalf("README.md's Install section (indented go get and go install lines) has no go get github.com/sluicehq/sluice@… or no go install github.com/sluicehq/sluice/cmd/sluice@…: %q", lines)
	}
	return lines
}

// writeProxyModule adds module m at version to the file:// proxy at dir,
// in the layout of the GOPROXY protocol: list, .info, .mod and .zip.
func writeProxyModule(t *testing.T, dir string, m workspaceModule, version string) {
	t.Helper()
	mv := module.Version{Path: m.mod.Module.Mod.Path, Version: version}
	esc, err := module.EscapePath(mv.Path)
	if err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339))
	var zip bytes.Buffer
	if err := modzip.Create(&zip, mv, treeFiles(t, m.dir)); err != nil {
		t.Fatalf("zip of %s: %v", mv, err)
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": []byte(info),
		version + ".mod":  gomod,
		version + ".zip":  zip.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// treeFiles lists the files of the working tree under dir as a commit of
// it would hold them: tracked and untracked, without the ignored ones (a
// built binary) or the .git file of a worktree. Files of nested modules
// are in the list; the zip leaves them out.
func treeFiles(t *testing.T, dir string) []modzip.File {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s (the proxy's zips hold what git would): %v", dir, err)
	}
	var files []modzip.File
	for name := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		p := filepath.Join(dir, filepath.FromSlash(name))
		fi, err := os.Lstat(p)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, treeFile{path: path.Clean(name), file: p, info: fi})
	}
	slices.SortFunc(files, func(a, b modzip.File) int { return strings.Compare(a.Path(), b.Path()) })
	return files
}

type treeFile struct {
	path, file string
	info       os.FileInfo
}

func (f treeFile) Path() string                 { return f.path }
func (f treeFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(f.file) }

func fileURL(dir string) string {
	return "file://" + filepath.ToSlash(dir)
}

// installEnv is this process's environment with set's variables in place
// of its own.
func installEnv(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeSkipped are the README's shell blocks the walk does not run, by
// the start of their first line, with the reason.
var readmeSkipped = map[string]string{
	"sluice serve --redis ":         "names placeholder hosts (redis, s1-s3, n1-n3); serve_test.go, sentinel_test.go and cluster_test.go run these flags on servers of their own",
	"sluice serve --grpc-tls-cert ": "names certificate files the README does not make; tls_test.go serves TLS and mTLS with certificates of its own",
}

// readmeShown are the README's blocks that are not commands, by the start
// of their first line: outputs, configs and tables. The banner is
// compared with the one the last sluice serve printed, and the demo's
// scenario is looked for in the demo's output.
var readmeShown = map[string]string{
	readmeBanner:   "sluice serve's banner",
	readmeDemo:     "sluice demo's boundary scenario",
	"location / {": "nginx's config (server/nginx_test.go runs examples/nginx/nginx.conf)",
	"http:":        "Traefik's dynamic config",
	"module ":      "the table of modules",
	"*.go ":        "the table of the layout",
}

const (
	readmeBanner = "sluice serve: the rate-limit service is up"
	readmeDemo   = "== boundary:"
)

// TestREADMEWalk holds the README's promise to a new user: its commands,
// in its order, all succeed on a fresh machine. It copies the tree as a
// clone has it (what git tracks, and what it would add) and runs the
// commands of the README's shell blocks (indented, or fenced as sh) in
// order, as a new user would, with a HOME, GOPATH and GOFLAGS of its own
// and the machine's module cache, build cache and proxy:
//
//   - go run ./cmd/sluice ...: in the clone, built once;
//   - go get and go install: in a module of the user's own, through the
//     file:// proxy of this tree that TestInstallFromProxy uses; sluice is
//     then the installed command;
//   - sluice serve: in the background on free loopback ports. One of the
//     built-in policy runs until the next such serve, and the curl
//     commands ask it; one with a config of its own is stopped once its
//     banner is out. curl must print what the README shows, the numbers
//     that move with time aside, within 30 seconds (a bucket that the
//     command before spent refills);
//   - ./scripts/test: not run (it runs this test) but checked to be what
//     .ci/run runs.
//
// A block the walk does not run is in readmeSkipped, with the reason, in
// readmeShown (outputs, configs, tables), or a program's output after "It
// prints:"; any other block fails the test, and so does a command of a
// kind the walk does not know.
func TestREADMEWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice from a module proxy made of this tree and from a copy of it: skipped under -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to walk the README: %v", err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed to run the README's curl commands: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	w := newReadmeWalk(t, gobin)
	for _, b := range readmeBlocks(string(md)) {
		w.block(b)
	}
}

// A readmeBlock is a code block of the README.
type readmeBlock struct {
	line  int      // of its first line
	lang  string   // a fence's language; "" for an indented block
	lines []string // without the block's indentation
	after string   // the text's last line before it
}

// readmeBlocks returns the README's code blocks, fenced and indented, in
// order.
func readmeBlocks(md string) []readmeBlock {
	lines := strings.Split(md, "\n")
	var out []readmeBlock
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if lang, ok := strings.CutPrefix(strings.TrimSpace(l), "```"); ok {
			b := readmeBlock{line: i + 2, lang: lang}
			ind := strings.Repeat(" ", indentOf(l))
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				b.lines = append(b.lines, strings.TrimPrefix(lines[i], ind))
			}
			out = append(out, b)
			continue
		}
		// An indented block starts after a blank line, four spaces in (six
		// in a list item), and runs while lines are blank or as far in.
		ind := indentOf(l)
		if ind < 4 || strings.TrimSpace(l) == "" || i > 0 && strings.TrimSpace(lines[i-1]) != "" {
			continue
		}
		b := readmeBlock{line: i + 1}
		for j := i - 1; j >= 0 && b.after == ""; j-- {
			b.after = strings.TrimSpace(lines[j])
		}
		for ; i < len(lines); i++ {
			switch {
			case strings.TrimSpace(lines[i]) == "":
				b.lines = append(b.lines, "")
				continue
			case indentOf(lines[i]) >= ind:
				b.lines = append(b.lines, lines[i][ind:])
				continue
			}
			break
		}
		i-- // the line that ended the block is read again
		for len(b.lines) > 0 && b.lines[len(b.lines)-1] == "" {
			b.lines = b.lines[:len(b.lines)-1]
		}
		out = append(out, b)
	}
	return out
}

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// readmeWalk is the state of the walk: the clone, the user's directories
// and environment, and what the commands so far left running or printed.
type readmeWalk struct {
	t      *testing.T
	gobin  string
	clone  string            // the copy of the tree
	work   string            // where the user runs sluice and curl
	bin    string            // GOBIN, on PATH
	env    []string          // the user's environment
	set    map[string]string // the user's variables, which go get and go install keep
	user   *userModule       // made by the first go get or go install
	sluice string            // the clone's sluice, built by the first go run ./cmd/sluice
	serve  *readmeServe      // of the built-in policy, running
	banner string            // the first line the last sluice serve printed
	yaml   string            // the README's last YAML block
	demo   string            // the demo's output
}

func newReadmeWalk(t *testing.T, gobin string) *readmeWalk {
	tmp := t.TempDir()
	w := &readmeWalk{t: t, gobin: gobin, clone: filepath.Join(tmp, "sluice"), work: filepath.Join(tmp, "work"), bin: filepath.Join(tmp, "gopath", "bin")}
	for _, d := range []string{w.clone, w.work, w.bin, filepath.Join(tmp, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range treeFiles(t, root) {
		copyTreeFile(t, f.(treeFile), filepath.Join(w.clone, filepath.FromSlash(f.Path())))
	}
	goEnv := func(name string) string {
		out, err := exec.Command(gobin, "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	// A fresh HOME and GOPATH, the user's (the go get and go install
	// lines add their module proxy's settings); the machine's build
	// cache, which only saves time.
	w.set = map[string]string{
		"HOME":    filepath.Join(tmp, "home"),
		"GOPATH":  filepath.Join(tmp, "gopath"),
		"GOBIN":   w.bin,
		"GOCACHE": goEnv("GOCACHE"),
		"PATH":    w.bin + string(filepath.ListSeparator) + os.Getenv("PATH"),
	}
	// In the clone, GOFLAGS of its own, and the machine's module cache
	// and proxy, as a user's machine has its own; go.work joins the
	// clone's modules.
	clone := map[string]string{
		"GOFLAGS":     "-trimpath",
		"GOTOOLCHAIN": "local",
		"GOWORK":      "",
		"GOMODCACHE":  goEnv("GOMODCACHE"),
		"GOPROXY":     goEnv("GOPROXY"),
	}
	maps.Copy(clone, w.set)
	w.env = installEnv(clone)
	t.Cleanup(func() {
		if w.serve != nil {
			w.serve.stop(t)
		}
	})
	return w
}

// copyTreeFile copies a file of the tree to dst, its mode kept.
func copyTreeFile(t *testing.T, f treeFile, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if f.info.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(f.file)
		if err == nil {
			err = os.Symlink(target, dst)
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(f.file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, f.info.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// A readmeCommand is a command of the README, with the output the README
// shows for it, if any.
type readmeCommand struct {
	line int
	cmd  string
	want string
}

// A readmePlan is what the walk does with a block: run its commands, or
// pass over it, as a block it does not run (skip: why) or one it shows
// (shown: its prefix in readmeShown).
type readmePlan struct {
	cmds  []readmeCommand
	skip  string
	shown string
}

// planBlock is the walk's plan for a block of the README's shell blocks,
// or an error for a block or a command the walk does not know.
func planBlock(b readmeBlock) (readmePlan, error) {
	if len(b.lines) == 0 || b.after == "It prints:" {
		return readmePlan{shown: "a program's output, which TestREADMEPrograms compares"}, nil
	}
	first := b.lines[0]
	for prefix, why := range readmeSkipped {
		if strings.HasPrefix(first, prefix) {
			return readmePlan{skip: why}, nil
		}
	}
	for prefix := range readmeShown {
		if strings.HasPrefix(first, prefix) {
			return readmePlan{shown: prefix}, nil
		}
	}
	var p readmePlan
	if strings.HasPrefix(first, "$ ") {
		// "$ command" lines, each followed by its output
		for _, l := range joinContinued(b.lines) {
			if cmd, ok := strings.CutPrefix(l.text, "$ "); ok {
				p.cmds = append(p.cmds, readmeCommand{line: b.line + l.at, cmd: cmd})
				continue
			}
			if len(p.cmds) == 0 {
				return p, fmt.Errorf("README.md:%d: a transcript that starts with no $ command", b.line)
			}
			c := &p.cmds[len(p.cmds)-1]
			if c.want != "" || l.text != "" {
				c.want += l.text + "\n"
			}
		}
	} else {
		for _, l := range joinContinued(b.lines) {
			if cmd, _, _ := strings.Cut(l.text, " #"); strings.TrimSpace(cmd) != "" {
				p.cmds = append(p.cmds, readmeCommand{line: b.line + l.at, cmd: strings.TrimSpace(cmd)})
			}
		}
	}
	for _, c := range p.cmds {
		if commandKind(c.cmd) == "" {
			return p, fmt.Errorf("README.md:%d: %q: a command the README walk neither runs nor lists in readmeSkipped or readmeShown", c.line, c.cmd)
		}
	}
	return p, nil
}

// commandKind is how the walk runs cmd, "" for a command it does not know.
func commandKind(cmd string) string {
	fields := strings.Fields(cmd)
	switch {
	case cmd == "./scripts/test":
		return "test script"
	case len(fields) >= 3 && fields[0] == "go" && (fields[1] == "get" || fields[1] == "install"):
		return "go get"
	case len(fields) >= 4 && fields[0] == "go" && fields[1] == "run" && fields[2] == "./cmd/sluice":
		return "clone sluice"
	case strings.HasPrefix(cmd, "go run ./examples/"):
		return "example"
	case len(fields) >= 2 && fields[0] == "sluice":
		return "sluice"
	case len(fields) >= 2 && fields[0] == "curl":
		return "curl"
	}
	return ""
}

// block runs, checks or passes over one block of the README.
func (w *readmeWalk) block(b readmeBlock) {
	t := w.t
	switch b.lang {
	case "yaml":
		w.yaml = strings.Join(b.lines, "\n") + "\n"
		return
	case "", "sh", "shell", "bash", "console":
	default:
		return // a program (TestREADMEPrograms) or data
	}
	p, err := planBlock(b)
	switch {
	case err != nil:
		t.Error(err)
	case p.skip != "":
		t.Logf("README.md:%d: not run: it %s", b.line, p.skip)
	case p.shown != "":
		w.shown(b, p.shown)
	}
	for _, c := range p.cmds {
		w.command(c.line, c.cmd, strings.TrimSuffix(c.want, "\n"))
	}
}

// TestREADMEWalkKnowsEveryBlock: every shell block of the README is run by
// TestREADMEWalk, or listed as not run or as shown. It is quick, so that a
// new command fails in the short tests too.
func TestREADMEWalkKnowsEveryBlock(t *testing.T) {
	md, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := 0
	for _, b := range readmeBlocks(string(md)) {
		switch b.lang {
		case "", "sh", "shell", "bash", "console":
			p, err := planBlock(b)
			if err != nil {
				t.Error(err)
			}
			cmds += len(p.cmds)
		}
	}
	if cmds == 0 {
		t.Error("the README walk finds no command in README.md")
	}
	bad, err := planBlock(readmeBlock{line: 1, lines: []string{"docker run sluice"}})
	if err == nil {
		t.Errorf("a block of docker run: plan %+v, want an error: the walk does not know it", bad)
	}
}

// A readmeLine is a line of a block, its continued lines joined, at its
// offset in the block.
type readmeLine struct {
	at   int
	text string
}

// joinContinued joins the lines that end in a backslash with the next.
func joinContinued(lines []string) []readmeLine {
	var out []readmeLine
	for i := 0; i < len(lines); i++ {
		l := readmeLine{at: i, text: lines[i]}
		for strings.HasSuffix(l.text, "\\") && i+1 < len(lines) {
			i++
			l.text = strings.TrimSuffix(l.text, "\\") + " " + strings.TrimSpace(lines[i])
		}
		out = append(out, l)
	}
	return out
}

// command runs one command of the README at line (its kind known). want,
// if not empty, is the output the README shows for it.
func (w *readmeWalk) command(line int, cmd, want string) {
	t := w.t
	t.Logf("README.md:%d: %s", line, cmd)
	fields := strings.Fields(cmd)
	switch commandKind(cmd) {
	case "test script":
		w.checkTestScript(line)
	case "go get":
		if w.user == nil {
			w.user = newUserModule(t, w.gobin, w.set)
		}
		w.user.goCmd(t, fields[1:]...)
	case "clone sluice":
		w.buildClone(line)
		w.sluiceCmd(line, w.clone, w.sluice, fields[3:], want)
	case "example":
		w.run(line, w.clone, "bash", "-c", cmd)
	case "sluice":
		bin := filepath.Join(w.bin, "sluice")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("README.md:%d: %s: sluice is not installed: the README runs it before its go install", line, cmd)
		}
		if len(fields) >= 3 && fields[1] == "check" {
			w.configFile(line, fields[len(fields)-1])
		}
		w.sluiceCmd(line, w.work, bin, fields[1:], want)
	case "curl":
		w.curl(line, cmd, want)
	}
}

// checkTestScript checks that ./scripts/test, the README's test command,
// is there and is what .ci/run runs.
func (w *readmeWalk) checkTestScript(line int) {
	t := w.t
	fi, err := os.Stat(filepath.Join(w.clone, "scripts", "test"))
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("README.md:%d: ./scripts/test is not an executable of the clone: %v", line, err)
	}
	ci, err := os.ReadFile(filepath.Join(w.clone, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^exec \./scripts/test$`).Match(ci) {
		t.Errorf("README.md:%d: .ci/run does not run ./scripts/test, the README's test command:\n%s", line, ci)
	}
}

// buildClone builds the clone's sluice, once, as go run would.
func (w *readmeWalk) buildClone(line int) {
	if w.sluice != "" {
		return
	}
	w.sluice = filepath.Join(filepath.Dir(w.clone), "clone-bin", "sluice")
	w.run(line, w.clone, w.gobin, "build", "-o", w.sluice, "./cmd/sluice")
}

// configFile writes the README's last YAML block to name in the user's
// directory, as the README asks before it checks it.
func (w *readmeWalk) configFile(line int, name string) {
	if w.yaml == "" {
		w.t.Fatalf("README.md:%d: no YAML block before the command that reads %s", line, name)
	}
	if err := os.WriteFile(filepath.Join(w.work, name), []byte(w.yaml), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// sluiceCmd runs sluice (bin) with args in dir: serve in the background,
// anything else to its end, its output compared with want if any.
func (w *readmeWalk) sluiceCmd(line int, dir, bin string, args []string, want string) {
	t := w.t
	if len(args) > 0 && args[0] == "serve" {
		s := startReadmeServe(t, line, dir, w.env, bin, args)
		w.banner = s.first
		if len(args) > 1 {
			s.stop(t) // a config of its own: up, then stopped
			return
		}
		if w.serve != nil {
			w.serve.stop(t)
		}
		w.serve = s
		return
	}
	out := w.run(line, dir, bin, args...)
	if len(args) > 0 && args[0] == "demo" {
		w.demo = out
	}
	if want != "" && masked(out) != masked(want) {
		t.Errorf("README.md:%d: sluice %s prints\n%s\nand the README shows\n%s", line, strings.Join(args, " "), out, want)
	}
}

// curl runs a curl command against the built-in policy's serve until its
// output is the README's, the numbers that move with time aside, for 30s
// at most.
func (w *readmeWalk) curl(line int, cmd, want string) {
	t := w.t
	if w.serve == nil {
		t.Fatalf("README.md:%d: %s: no sluice serve of the built-in policy is running", line, cmd)
	}
	cmd = strings.NewReplacer("localhost:8080", w.serve.http, "127.0.0.1:8080", w.serve.http).Replace(cmd)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := w.run(line, w.work, "bash", "-c", cmd)
		if want == "" || masked(out) == masked(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("README.md:%d: %s prints\n%s\nand the README shows\n%s", line, cmd, out, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shown checks a block that is not a command where the walk can: sluice
// serve's banner and the demo's scenario.
func (w *readmeWalk) shown(b readmeBlock, prefix string) {
	t := w.t
	switch prefix {
	case readmeBanner:
		if w.banner != b.lines[0] {
			t.Errorf("README.md:%d: the banner starts %q; the last sluice serve printed %q", b.line, b.lines[0], w.banner)
		}
	case readmeDemo:
		if !strings.Contains(trimLines(w.demo), trimLines(strings.Join(b.lines, "\n"))) {
			t.Errorf("README.md:%d: the demo's output has no scenario as the README shows it:\n%s\nit printed:\n%s", b.line, strings.Join(b.lines, "\n"), w.demo)
		}
	}
}

// run runs name with args in dir in the user's environment, to its end,
// and returns its output; it fails the test unless it exits 0.
func (w *readmeWalk) run(line int, dir, name string, args ...string) string {
	t := w.t
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = w.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("README.md:%d: %s %s: %v\n%s%s", line, name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// readmeMoving are the parts of an output that move with time.
var readmeMoving = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?m)^Date: .*$`), "Date: …"},
	{regexp.MustCompile(`\b([rt])=\d+`), "$1=…"},
	{regexp.MustCompile(`"limitRemaining":\d+`), `"limitRemaining":…`},
	{regexp.MustCompile(`"durationUntilReset":"[^"]*"`), `"durationUntilReset":"…"`},
}

// masked is an output with its lines' ends trimmed and the parts that move
// with time masked.
func masked(s string) string {
	s = trimLines(strings.ReplaceAll(s, "\r\n", "\n"))
	for _, m := range readmeMoving {
		s = m.re.ReplaceAllString(s, m.with)
	}
	return s
}

// trimLines trims the spaces at the ends of s's lines and the blank lines
// at its end.
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

// readmeServe is a sluice serve the walk started.
type readmeServe struct {
	cmd   *exec.Cmd
	first string // the first line it printed
	http  string // its HTTP address
	done  chan error
}

// startReadmeServe starts bin with args (serve ...) in dir on free
// loopback ports and waits for its banner, 30s at most.
func startReadmeServe(t *testing.T, line int, dir string, env []string, bin string, args []string) *readmeServe {
	t.Helper()
	args = append(args, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0")
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("README.md:%d: %v", line, err)
	}
	s := &readmeServe{cmd: cmd, done: make(chan error, 1)}
	// A process that prints no banner within 30s is killed, which ends
	// the wait for it.
	late := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if s.first == "" {
			s.first = sc.Text()
		}
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "http" {
			s.http = f[1]
		}
		if len(f) > 0 && f[0] == "shadow" {
			break // the banner's last line
		}
	}
	late.Stop()
	go func() {
		io.Copy(io.Discard, out)
		s.done <- cmd.Wait()
	}()
	if s.http == "" {
		cmd.Process.Kill()
		<-s.done
		t.Fatalf("README.md:%d: sluice %s printed no banner within 30s:\n%s", line, strings.Join(args, " "), stderr.Bytes())
	}
	return s
}

// stop sends SIGTERM and waits for the exit, a minute at most; it must be
// 0.
func (s *readmeServe) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("sluice serve, stopped: %v", err)
		}
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		t.Errorf("sluice serve did not exit within a minute of SIGTERM")
	}
}

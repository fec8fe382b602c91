package sluice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestREADMEPrograms holds the README's promise that its Go programs paste,
// build and run: every ```go block that is a whole program (package main)
// is built, with go vet, as a module of its own inside a copy of the
// workspace, so that it resolves sluice's modules as a user's program
// resolves them from a clone. A program whose block is followed by a
// paragraph "It prints:" is run, and must print the indented block after it.
func TestREADMEPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	programs := readmePrograms(data)
	if len(programs) == 0 {
		t.Fatal("README.md has no ```go block holding a whole program (package main)")
	}
	work := workspaceCopy(t, gobin)

	for _, p := range programs {
		t.Run(fmt.Sprintf("line%d", p.line), func(t *testing.T) {
			dir := filepath.Join(work, fmt.Sprintf("line%d", p.line))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.code), 0o644); err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(dir, "program")
			for _, args := range [][]string{{"vet", "."}, {"build", "-o", bin, "."}} {
				if out, err := goCommand(t, gobin, work, dir, args...); err != nil {
					t.Fatalf("README.md:%d: the program does not pass go %s: %v\n%s", p.line, args[0], err, readmeLines(out, p.line))
				}
			}
			if p.prints == "" {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("README.md:%d: the program fails: %v\n%s", p.line, err, stderr.Bytes())
			}
			if string(out) != p.prints {
				t.Errorf("README.md:%d: the program prints\n%s\nand the README says it prints\n%s", p.line, out, p.prints)
			}
		})
	}
}

// readmeLines rewrites the go command's positions in main.go as the
// README's lines, which the block's fence is line 0 of.
func readmeLines(out []byte, fence int) []byte {
	return mainPos.ReplaceAllFunc(out, func(m []byte) []byte {
		n, err := strconv.Atoi(string(mainPos.FindSubmatch(m)[1]))
		if err != nil {
			return m
		}
		return fmt.Appendf(nil, "README.md:%d:", fence+n)
	})
}

var mainPos = regexp.MustCompile(`(?:\./)?main\.go:(\d+):`)

type program struct {
	line   int    // of the opening fence
	code   string // the block, ending in a newline
	prints string // the indented block after "It prints:", unindented; "" when none follows
}

// readmePrograms returns the ```go blocks of a Markdown file that declare
// package main, each with the output the text says it prints.
func readmePrograms(md []byte) []program {
	lines := strings.Split(string(md), "\n")
	var out []program
	for i := 0; i < len(lines); i++ {
		if strings.TrimRight(lines[i], " \t") != "```go" {
			continue
		}
		start := i
		var code []string
		for i++; i < len(lines) && strings.TrimRight(lines[i], " \t") != "```"; i++ {
			code = append(code, lines[i])
		}
		if len(code) == 0 || strings.TrimSpace(code[0]) != "package main" {
			continue
		}
		p := program{line: start + 1, code: strings.Join(code, "\n") + "\n"}
		// After the fence: blank lines, "It prints:", a blank line, and the
		// output indented by four spaces.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j < len(lines) && strings.TrimSpace(lines[j]) == "It prints:" {
			var shown []string
			for j++; j < len(lines); j++ {
				l := lines[j]
				if strings.HasPrefix(l, "    ") {
					shown = append(shown, strings.TrimPrefix(l, "    "))
				} else if strings.TrimSpace(l) != "" || len(shown) > 0 {
					break
				}
			}
			p.prints = strings.Join(shown, "\n") + "\n"
		}
		out = append(out, p)
	}
	return out
}

// workspaceCopy returns a temporary directory holding a module of its own
// and a go.work that uses it beside every module of this repository's
// workspace, by absolute paths, so that a program there builds against the
// sluice modules in this tree.
func workspaceCopy(t *testing.T, gobin string) string {
	t.Helper()
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// The file is named, so that this holds under GOWORK=off too.
	cmd := exec.Command(gobin, "work", "edit", "-json", "go.work")
	cmd.Dir = root
	js, err := cmd.Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	type module struct{ Path, Version string }
	var gowork struct {
		Go      string
		Use     []struct{ DiskPath string }
		Replace []struct{ Old, New module }
	}
	if err := json.Unmarshal(js, &gowork); err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	if len(gowork.Use) == 0 {
		t.Fatal("go.work uses no module")
	}

	work := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "go %s\n\nuse (\n\t.\n", gowork.Go)
	for _, u := range gowork.Use {
		fmt.Fprintf(&b, "\t%q\n", filepath.Join(root, u.DiskPath))
	}
	b.WriteString(")\n")
	// The workspace's replaces stand for sibling versions not yet
	// published; a local one is made absolute, as the uses are.
	for _, r := range gowork.Replace {
		old, repl := r.Old.Path, r.New.Path
		if r.Old.Version != "" {
			old += " " + r.Old.Version
		}
		if r.New.Version != "" {
			repl += " " + r.New.Version
		} else if !filepath.IsAbs(repl) {
			repl = filepath.Join(root, repl)
		}
		fmt.Fprintf(&b, "replace %s => %s\n", old, repl)
	}
	files := map[string]string{
		"go.work": b.String(),
		"go.mod":  fmt.Sprintf("module readme.example/programs\n\ngo %s\n", gowork.Go),
	}
	// The workspace's checksums, so that the copy verifies the modules it
	// shares with the workspace as the workspace does.
	if sum, err := os.ReadFile(filepath.Join(root, "go.work.sum")); err == nil {
		files["go.work.sum"] = string(sum)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return work
}

// goCommand runs the go command in dir under the workspace copy's go.work.
func goCommand(t *testing.T, gobin, work, dir string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(work, "go.work"))
	return cmd.CombinedOutput()
}

package sluice_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocCode holds the code that newcomers read first to the API: every
// Go code block of the package documentation, and every ```go block of
// docs/library.md, which it links to, must appear line for line in the
// body of an Example function of this module that has an // Output:
// comment, which go test compiles and runs. To change such a block, change
// its Example and copy the lines back. (The README shows whole programs,
// which TestREADMEPrograms builds and runs.)
func TestDocCode(t *testing.T) {
	bodies := exampleBodies(t)
	check := func(where, code string) {
		t.Helper()
		want := "\n" + code + "\n"
		for _, b := range bodies {
			if strings.Contains("\n"+b.body+"\n", want) {
				return
			}
		}
		t.Errorf("%s: this code is in no Example of the module with an // Output: comment, so nothing compiles or runs it:\n%s\n"+
			"Copy it from the Example it was taken from, or write one that holds it.", where, code)
	}

	code := packageDocGo(t, "doc.go")
	if len(code) < 1 {
		t.Fatal("doc.go has no Go code block; the package comment shows a token bucket at explicit times")
	}
	for i, c := range code {
		check(fmt.Sprintf("doc.go, Go block %d", i+1), c)
	}

	blocks := markdownGo(t, "docs/library.md")
	if len(blocks) < 3 {
		t.Fatalf("docs/library.md has %d ```go blocks; the Limiter, time as a parameter and usage have one each", len(blocks))
	}
	for _, b := range blocks {
		check(fmt.Sprintf("docs/library.md:%d", b.line), b.code)
	}
}

type example struct {
	name string
	body string // the function's body, one tab of indent removed
}

// exampleBodies returns the Examples with output of every package in this
// module (directories holding a go.mod of their own are other modules).
func exampleBodies(t *testing.T) []example {
	t.Helper()
	var out []example
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if dir != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && dir != "." {
			return filepath.SkipDir
		}
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		var parsed []*ast.File
		src := map[string][]byte{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			af, err := parser.ParseFile(fset, f, b, parser.ParseComments)
			if err != nil {
				return err
			}
			src[f] = b
			parsed = append(parsed, af)
		}
		for _, ex := range doc.Examples(parsed...) {
			body, ok := ex.Code.(*ast.BlockStmt)
			if !ok || (ex.Output == "" && !ex.EmptyOutput) {
				continue // a whole-file example, or one go test only compiles
			}
			start, end := fset.Position(body.Lbrace), fset.Position(body.Rbrace)
			text := string(src[start.Filename][start.Offset+1 : end.Offset])
			var lines []string
			for l := range strings.SplitSeq(strings.Trim(text, "\n"), "\n") {
				lines = append(lines, strings.TrimRight(strings.TrimPrefix(l, "\t"), " \t"))
			}
			out = append(out, example{name: "Example" + ex.Name, body: strings.Join(lines, "\n")})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("found no Example with output in the module")
	}
	return out
}

type block struct {
	line int // of the opening fence
	code string
}

// markdownGo returns the ```go blocks of a Markdown file.
func markdownGo(t *testing.T, name string) []block {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out  []block
		cur  *block
		code []string
		n    int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \t")
		switch {
		case cur == nil && line == "```go":
			cur, code = &block{line: n}, nil
		case cur != nil && line == "```":
			cur.code = strings.Join(code, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			code = append(code, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: ```go block never closed", name, cur.line)
	}
	return out
}

// packageDocGo returns the code blocks of the package comment in file
// that are Go statements; the others (tables, say) are left alone.
func packageDocGo(t *testing.T, file string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatalf("%s has no package comment", file)
	}
	var p comment.Parser
	var out []string
	for _, b := range p.Parse(f.Doc.Text()).Content {
		c, ok := b.(*comment.Code)
		if !ok {
			continue
		}
		code := strings.TrimRight(c.Text, "\n")
		stmts := "package p\nfunc _() {\n" + code + "\n}\n"
		if _, err := parser.ParseFile(token.NewFileSet(), "", stmts, 0); err != nil {
			continue
		}
		out = append(out, code)
	}
	return out
}

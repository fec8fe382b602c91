package sluice_test

import (
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
// Go code block of the package documentation must appear line for line in
// the body of an Example function of this module that has an // Output:
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
	if len(code) < 2 {
		t.Fatalf("doc.go has %d Go code blocks; Where to start and Time is a parameter have one each", len(code))
	}
	for i, c := range code {
		check(fmt.Sprintf("doc.go, Go block %d", i+1), c)
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

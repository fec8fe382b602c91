// Command funclen lists the Go functions of the packages in the
// directories it is given, longest first, with their length in lines:
// a function's lines from its func keyword to its closing brace. Test
// files are left out unless -tests.
//
//	go run ./scripts/funclen -top 5 redis
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type fn struct {
	name  string
	pos   string
	lines int
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("funclen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	top := fs.Int("top", 0, "list only the `n` longest (0: all)")
	tests := fs.Bool("tests", false, "include _test.go files")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var fns []fn
	fset := token.NewFileSet()
	for _, dir := range fs.Args() {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			fmt.Fprintln(stderr, "funclen:", err)
			return 1
		}
		for _, path := range files {
			if !*tests && strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				fmt.Fprintln(stderr, "funclen:", err)
				return 1
			}
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					fns = append(fns, fn{name: name(fd), pos: fset.Position(fd.Pos()).String(),
						lines: fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1})
				}
			}
		}
	}
	sort.SliceStable(fns, func(i, j int) bool { return fns[i].lines > fns[j].lines })
	if *top > 0 && len(fns) > *top {
		fns = fns[:*top]
	}
	for _, f := range fns {
		fmt.Fprintf(stdout, "%4d %s %s\n", f.lines, f.name, f.pos)
	}
	return 0
}

// name is fd's name, with its receiver's type for a method.
func name(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

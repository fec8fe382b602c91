package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/config"
)

func checkHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: sluice check FILE|DIR...

Loads a config as 'sluice serve -config' would, without serving it. A
directory stands for its *.yaml and *.yml files. Prints what it holds and
exits 0, or prints every problem as

  FILE:LINE: FIELD: what is wrong

and exits 1.
`)
}

// runCheck is "sluice check".
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c, _ := lookup("check")
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	paths, code, ok := parseFlags(c, fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(paths) == 0 {
		fmt.Fprint(stderr, "sluice check: no config given: sluice check FILE|DIR...\nRun 'sluice help check' for usage.\n")
		return exitUsage
	}
	cfg, err := config.Load(paths...)
	if err != nil {
		// One line per problem, each "file:line: field: what".
		for _, e := range flatten(err) {
			fmt.Fprintln(stderr, e)
		}
		return exitFail
	}
	domains := cfg.Domains()
	fmt.Fprintf(stdout, "ok: %s, %s\n", plural(int64(len(domains)), "domain"), plural(int64(len(cfg.Rules())), "rule"))
	for _, d := range domains {
		auth := ""
		if fa := cfg.ForwardAuth(d); fa != nil {
			auth = "  forward_auth: " + fa.String()
		}
		fmt.Fprintf(stdout, "  %s%s\n", d, auth)
	}
	return exitOK
}

// flatten lists the errors errors.Join joined.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// Command sluice is the command-line face of sluice: demo replays a burst,
// a steady stream and a fixed window's boundary against every algorithm,
// serve runs the rate-limit service, and check validates its config; run
// "sluice help" for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, commandLine(os.Args[0], os.Args[1:]), os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// commandLine is the command line run takes. Installed as "ratelimit",
// envoyproxy/ratelimit's binary (/bin/ratelimit in its image, which
// Kubernetes manifests name as the container's command), sluice is
// "sluice serve" with the arguments given, unless the first of them is
// one of its commands: an image of sluice then runs a deployment of
// envoyproxy/ratelimit unchanged, and "ratelimit check DIR" still checks.
func commandLine(argv0 string, args []string) []string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") != "ratelimit" {
		return args
	}
	if len(args) > 0 {
		if _, ok := lookup(args[0]); ok {
			return args
		}
	}
	return append([]string{"serve"}, args...)
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed
	exitUsage = 2 // the command line was wrong
)

// A command is one subcommand. To add one, write its run function and add a
// line to commands.
type command struct {
	name    string
	summary string // one line for "sluice help"
	// run runs the command with the arguments after its name and returns
	// the exit code: exitUsage, with the reason on stderr, for a bad
	// command line. ctx ends on SIGINT or SIGTERM; lookupEnv reads the
	// environment (os.LookupEnv in main).
	run func(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int
	// help writes the command's full help: usage line, description, flags.
	help func(w io.Writer)
}

// commands is set in init: as an initializer it would refer to itself
// through runHelp.
var commands []command

func init() {
	commands = []command{
		{name: "demo", summary: "replay burst, steady and boundary scenarios against every algorithm", run: runDemo, help: demoHelp},
		{name: "serve", summary: "run the rate-limit service (Envoy RLS, JSON, forward auth)", run: runServe, help: serveHelp},
		{name: "check", summary: "validate a config file or directory", run: runCheck, help: checkHelp},
		{name: "help", summary: "show help for sluice or for a command", run: runHelp, help: helpHelp},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run is main without the process: it takes the arguments after the program
// name and the environment's lookup, and returns the exit code.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	if isHelpFlag(name) {
		usage(stdout)
		return exitOK
	}
	c, ok := lookup(name)
	if !ok {
		if strings.HasPrefix(name, "-") {
			fmt.Fprintf(stderr, "sluice: flag %s before a command; flags follow the command: sluice COMMAND [flags]\n", name)
		} else {
			fmt.Fprintf(stderr, "sluice: unknown command %q\n", name)
		}
		fmt.Fprintln(stderr, "Run 'sluice help' for usage.")
		return exitUsage
	}
	return c.run(ctx, args[1:], lookupEnv, stdout, stderr)
}

func isHelpFlag(s string) bool {
	return s == "-h" || s == "-help" || s == "--help"
}

func usage(w io.Writer) {
	fmt.Fprint(w, `sluice is a rate limiter: a Go library of the classic algorithms with time
as a parameter.

Usage:
  sluice COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'sluice help COMMAND' for a command's flags and arguments.\n")
}

func helpHelp(w io.Writer) {
	fmt.Fprint(w, "Usage: sluice help [COMMAND]\n\nShows the list of commands, or one command's help.\n")
}

func runHelp(_ context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		usage(stdout)
		return exitOK
	case 1:
		if isHelpFlag(args[0]) {
			helpHelp(stdout)
			return exitOK
		}
		c, ok := lookup(args[0])
		if !ok {
			fmt.Fprintf(stderr, "sluice help: unknown command %q\nRun 'sluice help' for the list.\n", args[0])
			return exitUsage
		}
		c.help(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "sluice help: too many arguments: %s\n", strings.Join(args, " "))
		return exitUsage
	}
}

// parseFlags parses a command's flags, which may come before, after or
// between its arguments, and returns the arguments; after "--" everything
// is an argument. On -h it writes the command's help to stdout, on a bad
// flag the error to stderr; either way ok is false and code is the exit
// code.
func parseFlags(c command, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (rest []string, code int, ok bool) {
	// The flag package would print its errors and the usage itself, to one
	// stream; sluice prints its own, to the right one.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.help(stdout)
			return nil, exitOK, false
		}
		if err != nil {
			fmt.Fprintf(stderr, "sluice %s: %v\nRun 'sluice help %s' for usage.\n", c.name, err, c.name)
			return nil, exitUsage, false
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, exitOK, true
		}
		// Parse stops at the first argument, or just after a "--".
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), exitOK, true
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

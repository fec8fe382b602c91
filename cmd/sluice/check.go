package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/redis"
)

func checkHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: sluice check [-store redis] FILE|DIR...

Loads a config as 'sluice serve -config' would, without serving it. A
directory stands for its *.yaml and *.yml files. Prints what it holds and
exits 0, or prints every problem as

  FILE:LINE: FIELD: what is wrong

and exits 1.

  -store redis   also check every rule against what the Redis store can
                 hold, as 'sluice serve -redis' does when it loads the
                 config (no connection is made); a rule it cannot hold
                 is printed as "rule NAME: what is wrong"
`)
}

// runCheck is "sluice check".
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	c, _ := lookup("check")
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	store := fs.String("store", "memory", "")
	paths, code, ok := parseFlags(c, fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if *store != "memory" && *store != "redis" {
		fmt.Fprintf(stderr, "sluice check: -store %q: want memory or redis\nRun 'sluice help check' for usage.\n", *store)
		return exitUsage
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
	if *store == "redis" {
		if problems := checkRedis(cfg); len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintln(stderr, p)
			}
			return exitFail
		}
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

// checkRedis lists the rules of cfg the Redis store cannot hold. The
// store checks a rule without contacting Redis.
func checkRedis(cfg *config.Config) []string {
	client := goredis.NewClient(&goredis.Options{})
	defer client.Close()
	rs, err := redis.New(client)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, r := range cfg.Rules() {
		if err := rs.CheckRule(r); err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: %v", r.Name, err))
		}
	}
	return problems
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

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/redis"
)

func checkHelp(w io.Writer) {
	fmt.Fprint(w, `Usage: sluice check [-store redis] [-merge-domains] FILE|DIR...

Loads a config as 'sluice serve -config' would, without serving it. A
directory stands for its *.yaml and *.yml files; a file named that is not
one is skipped with a note on stderr, so that a glob such as
examples/config/* can name a folder's README too. Prints what the config
holds (its domains, each with its limits charged by usage, its leased
limits and its forward_auth) and exits 0, or prints every problem as

  FILE:LINE: FIELD: what is wrong

and exits 1.

A config file is a regular file (symlinks followed; a named pipe or a
device is refused) of at most 4 MiB and 2^20 YAML nodes, aliases expanded;
a config holds at most 2^17 descriptors and limits in all its files.

  -store redis   also check every rule against what the Redis store can
                 hold, as 'sluice serve -redis' does when it loads the
                 config (no connection is made)
  -merge-domains let several files define one domain, as 'sluice serve
                 -merge-domains' does
`)
}

// runCheck is "sluice check".
func runCheck(_ context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) int {
	c, _ := lookup("check")
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	store := fs.String("store", "memory", "")
	merge := fs.Bool("merge-domains", false, "")
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
	if paths = yamlPaths(paths, stderr); len(paths) == 0 {
		fmt.Fprint(stderr, "sluice check: no YAML file or directory given: nothing to check\nRun 'sluice help check' for usage.\n")
		return exitUsage
	}
	cfg, err := config.Options{MergeDomains: *merge}.Load(paths...)
	if err != nil {
		// One line per problem, each "file:line: field: what".
		for _, e := range flatten(err) {
			fmt.Fprintln(stderr, e)
		}
		return exitFail
	}
	if *store == "redis" {
		if err := checkRedis(cfg); err != nil {
			for _, e := range flatten(err) {
				fmt.Fprintln(stderr, e)
			}
			return exitFail
		}
	}
	domains := cfg.Domains()
	fmt.Fprintf(stdout, "ok: %s, %s\n", plural(int64(len(domains)), "domain"), plural(int64(len(cfg.Rules())), "rule"))
	usage, leased := usageLimits(cfg), leasedLimits(cfg)
	for _, d := range domains {
		line := d
		if u := usage[d]; len(u) > 0 {
			line += "  usage: " + strings.Join(u, ", ")
		}
		if l := leased[d]; len(l) > 0 {
			line += "  leased: " + strings.Join(l, ", ")
		}
		if fa := cfg.ForwardAuth(d); fa != nil {
			line += "  forward_auth: " + fa.String()
		}
		fmt.Fprintf(stdout, "  %s\n", line)
	}
	return exitOK
}

// usageLimits names, by domain, the limits charged by usage (charge:
// usage), which record what they are charged past the limit: worth
// seeing beside the domain, as they decide unlike the rest.
func usageLimits(cfg *config.Config) map[string][]string {
	out := make(map[string][]string)
	for _, l := range cfg.Limits() {
		if !l.Unlimited && l.Rule.Charge == sluice.ChargeUsage {
			out[l.Domain] = append(out[l.Domain], l.Rule.Name)
		}
	}
	return out
}

// leasedLimits names, by domain, the limits decided on leased quota
// (lease: in the config), which hold their limit to a stated bound rather
// than exactly.
func leasedLimits(cfg *config.Config) map[string][]string {
	out := make(map[string][]string)
	for _, l := range cfg.Limits() {
		if !l.Unlimited && l.Rule.Lease.Enabled {
			out[l.Domain] = append(out[l.Domain], l.Rule.Name)
		}
	}
	return out
}

// yamlPaths returns paths without the files that are not YAML (*.yaml,
// *.yml, in any case), and says on stderr which it skipped. Directories,
// and paths it cannot stat, go on to config.Load, which reads a
// directory's YAML files and reports what is missing.
func yamlPaths(paths []string, stderr io.Writer) []string {
	var out []string
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			if ext := strings.ToLower(filepath.Ext(p)); ext != ".yaml" && ext != ".yml" {
				fmt.Fprintf(stderr, "sluice check: skipped %s: not a YAML file (*.yaml, *.yml)\n", p)
				continue
			}
		}
		out = append(out, p)
	}
	return out
}

// checkRedis returns where cfg has rules the Redis store cannot hold, as
// config errors. The store checks a rule without contacting Redis.
func checkRedis(cfg *config.Config) error {
	client := goredis.NewClient(&goredis.Options{})
	defer client.Close()
	rs, err := redis.New(client)
	if err != nil {
		return err
	}
	lim, err := sluice.NewLimiter(rs)
	if err != nil {
		return err
	}
	return cfg.CheckRules(func(_ int, r sluice.Rule) error {
		_, err := lim.Prepare(r)
		return err
	})
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

package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// secretFlags are never printed.
var secretFlags = map[string]bool{"redis-password": true, "redis-sentinel-password": true, "xds-headers": true}

// printConfig writes every setting of sluice serve, its value and where
// it came from: a flag, envoyproxy/ratelimit's variables (set, or their
// defaults in envoy mode), or sluice's default.
func printConfig(w io.Writer, fs *flag.FlagSet, sources map[string]string, mode envoyMode, notes []envNote) {
	if mode.on {
		fmt.Fprintf(w, "sluice serve: envoy mode (%s): envoyproxy/ratelimit's variables are read\n\n", mode.why)
	} else {
		fmt.Fprint(w, "sluice serve: envoyproxy/ratelimit's variables are not read (none is set)\n\n")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM")
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "print-config" || f.Name == "envoy-env" {
			return
		}
		v := f.Value.String()
		switch {
		case secretFlags[f.Name] && v != "":
			v = "(hidden)"
		case f.Name == "redis" && v != "":
			v = redactURL(v)
		case f.Name == "trusted-proxies" && sources[f.Name] == "":
			v = "127.0.0.0/8,::1"
		case f.Name == "max-memory" || f.Name == "gc-floor":
			v += " bytes"
		}
		if v == "" {
			v = `""`
		}
		from := sources[f.Name]
		if from == "" {
			from = "default"
		}
		fmt.Fprintf(tw, "-%s\t%s\t%s\n", f.Name, v, from)
	})
	tw.Flush()
	if len(notes) > 0 {
		fmt.Fprint(w, "\nenvoyproxy/ratelimit's variables that sluice does not implement or has no need of:\n")
		for _, n := range notes {
			fmt.Fprintf(w, "  %s\n", strings.TrimSpace(n.String()))
		}
	}
}

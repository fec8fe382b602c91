// Command ratios turns benchstat's CSV (one input file, default rows) into
// the ratio tables of BENCHMARKS.md: every figure is a ratio of medians
// from the same run.
//
//	benchstat -format csv results.txt | go run ./ratios
package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() { os.Exit(run(os.Stdin, os.Stdout, os.Stderr)) }

func run(stdin io.Reader, stdout, stderr io.Writer) int {
	m, err := parse(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "ratios:", err)
		return 1
	}
	write(stdout, m)
	return 0
}

// families are the benchmarks these tables cover: single key, one
// contender per alg= key, workloads by traffic= and run=.
var families = []string{"AllowN", "AllowNow"}

// peers are the contenders that are not sluice; baseline is the harness.
var peers = []string{"xrate", "uber", "sethvargo", "throttled"}

// row is one workload: a family of benchmarks at one traffic and one run.
type row struct{ family, traffic, run string }

// table holds one metric's medians by workload and contender, in the order
// they first appear.
type table struct {
	rows  []row
	algs  []string
	value map[row]map[string]float64
}

func (t *table) set(r row, alg string, v float64) {
	if t.value[r] == nil {
		t.value[r] = map[string]float64{}
		t.rows = append(t.rows, r)
	}
	if !slices.Contains(t.algs, alg) {
		t.algs = append(t.algs, alg)
	}
	t.value[r][alg] = v
}

// procs is the -GOMAXPROCS suffix of a benchmark name.
var procs = regexp.MustCompile(`-\d+$`)

// parse reads benchstat's CSV: for each metric a header line naming the
// input, a line naming the metric, then name,median,CI rows up to a blank
// line.
func parse(in io.Reader) (map[string]*table, error) {
	r := csv.NewReader(in)
	r.FieldsPerRecord = -1
	tables := map[string]*table{}
	var cur *table
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(rec) < 2 {
			continue // goos:, cpu: and the like
		}
		if rec[0] == "" { // a header: the file's name, then the metric
			if rec[1] != "" && !strings.Contains(rec[1], "/op") {
				continue
			}
			cur = &table{value: map[row]map[string]float64{}}
			tables[rec[1]] = cur
			continue
		}
		if cur == nil || rec[0] == "geomean" {
			continue
		}
		keys := map[string]string{}
		parts := strings.Split(procs.ReplaceAllString(rec[0], ""), "/")
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			keys[k] = v
		}
		if !slices.Contains(families, parts[0]) {
			continue // another section's benchmark
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rec[0], err)
		}
		cur.set(row{parts[0], keys["traffic"], keys["run"]}, keys["alg"], v)
	}
	if tables["sec/op"] == nil {
		return nil, errors.New("no sec/op table in the input: want benchstat -format csv of one file")
	}
	return tables, nil
}

func write(w io.Writer, tables map[string]*table) {
	t := tables["sec/op"]
	for _, family := range families {
		var rows []row
		for _, r := range t.rows {
			if r.family == family {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		// Peers first, then sluice's algorithms; the harness baseline last.
		var algs []string
		for _, a := range t.algs {
			if slices.Contains(peers, a) && has(t, rows, a) {
				algs = append(algs, a)
			}
		}
		for _, a := range t.algs {
			if !slices.Contains(peers, a) && a != "baseline" && has(t, rows, a) {
				algs = append(algs, a)
			}
		}
		if has(t, rows, "baseline") {
			algs = append(algs, "baseline")
		}
		// The best peer of each workload: the least median.
		best := map[row]string{}
		for _, r := range rows {
			for _, a := range peers {
				if v, ok := t.value[r][a]; ok && (best[r] == "" || v < t.value[r][best[r]]) {
					best[r] = a
				}
			}
		}
		fmt.Fprintf(w, "Benchmark%s, median ns/op; for sluice, (×) is the best peer's median divided by sluice's: above 1, sluice is faster.\n\n", family)
		fmt.Fprint(w, "| alg |")
		for _, r := range rows {
			fmt.Fprintf(w, " %s, %s |", r.traffic, r.run)
		}
		fmt.Fprintf(w, "\n| --- |%s\n", strings.Repeat(" ---: |", len(rows)))
		for _, a := range algs {
			name := a
			if slices.Contains(peers, a) {
				name += " (peer)"
			}
			fmt.Fprintf(w, "| %s |", name)
			for _, r := range rows {
				v, ok := t.value[r][a]
				switch {
				case !ok:
					fmt.Fprint(w, " – |")
				case slices.Contains(peers, a) || a == "baseline" || best[r] == "":
					fmt.Fprintf(w, " %.1f |", v*1e9)
				default:
					fmt.Fprintf(w, " %.1f (%.2f×) |", v*1e9, t.value[r][best[r]]/v)
				}
			}
			fmt.Fprintln(w)
		}
		fmt.Fprint(w, "| best peer |")
		for _, r := range rows {
			fmt.Fprintf(w, " %s |", best[r])
		}
		fmt.Fprint(w, "\n\n")
	}

	// Allocations: list what is not zero, or say that nothing is.
	a, by := tables["allocs/op"], tables["B/op"]
	if a == nil {
		return
	}
	var nonzero []string
	for _, r := range a.rows {
		for _, alg := range a.algs {
			if v, ok := a.value[r][alg]; ok && v != 0 {
				nonzero = append(nonzero, fmt.Sprintf("%s/traffic=%s/alg=%s/run=%s: %g allocs/op, %g B/op", r.family, r.traffic, alg, r.run, v, by.value[r][alg]))
			}
		}
	}
	if len(nonzero) == 0 {
		fmt.Fprintf(w, "Allocations: in %s, every median is 0 allocs/op and 0 B/op.\n", strings.Join(families, " and "))
		return
	}
	fmt.Fprintf(w, "Allocations: in %s, every other median is 0 allocs/op.\n", strings.Join(families, " and "))
	for _, s := range nonzero {
		fmt.Fprintln(w, "-", s)
	}
}

// has reports whether alg ran in any of rows.
func has(t *table, rows []row, alg string) bool {
	for _, r := range rows {
		if _, ok := t.value[r][alg]; ok {
			return true
		}
	}
	return false
}

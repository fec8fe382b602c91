package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// runArgs runs the command line args and returns the exit code and output.
func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, testEnv, &out, &errb)
	return code, out.String(), errb.String()
}

func TestGolden(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		{"demo.golden", []string{"demo"}},
		{"demo_burst10.golden", []string{"demo", "-burst", "10", "burst"}},
		{"demo_3_per_minute.golden", []string{"demo", "boundary", "--limit", "3/1m", "steady"}},
		{"help.golden", []string{"help"}},
		{"help_demo.golden", []string{"help", "demo"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != exitOK || stderr != "" {
				t.Fatalf("sluice %s: exit %d, stderr %q; want 0 and nothing", strings.Join(tt.args, " "), code, stderr)
			}
			path := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if stdout != string(want) {
				t.Errorf("sluice %s differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s",
					strings.Join(tt.args, " "), path, stdout, want)
			}
		})
	}
}

// The demo never reads the clock, so two runs print the same.
func TestDemoDeterministic(t *testing.T) {
	_, a, _ := runArgs(t, "demo")
	_, b, _ := runArgs(t, "demo")
	if a != b {
		t.Error("two runs of sluice demo differ")
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "demo"}, {"demo", "-h"}, {"demo", "--help"}, {"help", "help"}, {"help", "-h"}} {
		code, stdout, stderr := runArgs(t, args...)
		if code != exitOK || !strings.Contains(stdout, "sluice") || stderr != "" {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want 0, help on stdout, nothing on stderr",
				strings.Join(args, " "), code, stdout, stderr)
		}
	}
}

func TestBadUsage(t *testing.T) {
	tests := []struct {
		args []string
		want []string // in stderr
	}{
		{nil, []string{"Usage:", "demo"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`, "sluice help"}},
		{[]string{"-limit", "5/1s"}, []string{"flag -limit before a command"}},
		{[]string{"help", "frobnicate"}, []string{`unknown command "frobnicate"`}},
		{[]string{"help", "demo", "burst"}, []string{"too many arguments"}},
		{[]string{"demo", "surge"}, []string{`unknown scenario "surge"`, "burst, steady or boundary"}},
		{[]string{"demo", "burst", "surge"}, []string{`unknown scenario "surge"`}},
		{[]string{"demo", "-x"}, []string{"flag provided but not defined: -x", "sluice help demo"}},
		{[]string{"demo", "burst", "--verbose"}, []string{"flag provided but not defined: -verbose"}},
		{[]string{"demo", "-limit"}, []string{"flag needs an argument: -limit"}},
		{[]string{"demo", "-limit", "5"}, []string{`invalid value "5" for flag -limit`, "RATE/PERIOD"}},
		{[]string{"demo", "-limit", "0/1s"}, []string{`rate "0"`, "1 to 20"}},
		{[]string{"demo", "-limit", "21/1s"}, []string{`rate "21"`}},
		{[]string{"demo", "-limit", "x/1s"}, []string{`rate "x"`}},
		{[]string{"demo", "-limit", "5/0s"}, []string{"period 0s", "1ms to 24h"}},
		{[]string{"demo", "-limit", "5/-1s"}, []string{"period -1s"}},
		{[]string{"demo", "-limit", "5/48h"}, []string{"period 48h"}},
		{[]string{"demo", "-limit", "5/soon"}, []string{`period "soon"`}},
		{[]string{"demo", "-burst", "-1"}, []string{`invalid value "-1" for flag -burst`, "0 to 20"}},
		{[]string{"demo", "-burst", "lots"}, []string{`invalid value "lots" for flag -burst`}},
	}
	for _, tt := range tests {
		name := strings.Join(tt.args, " ")
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != exitUsage {
				t.Errorf("sluice %s: exit %d, want %d", name, code, exitUsage)
			}
			if stdout != "" {
				t.Errorf("sluice %s: stdout %q, want nothing", name, stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("sluice %s: stderr %q, want it to contain %q", name, stderr, w)
				}
			}
		})
	}
}

func TestDemoArgs(t *testing.T) {
	_, burst, _ := runArgs(t, "demo", "burst")
	tests := [][]string{
		{"demo", "--", "burst"},
		{"demo", "-limit", "5/1s", "burst"},
		{"demo", "burst", "-limit=5/s"},
		{"demo", "-burst", "0", "burst", "-limit", "5/1000ms"},
	}
	for _, args := range tests {
		code, stdout, stderr := runArgs(t, args...)
		if code != exitOK || stdout != burst || stderr != "" {
			t.Errorf("sluice %s: exit %d, stderr %q, stdout same as 'sluice demo burst': %v",
				strings.Join(args, " "), code, stderr, stdout == burst)
		}
	}
}

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in     string
		rate   int64
		period string
	}{
		{"5/1s", 5, "1s"},
		{"3/s", 3, "1s"},
		{"20/1m", 20, "1m0s"},
		{"1/24h", 1, "24h0m0s"},
		{"2/1.5s", 2, "1.5s"},
		{"2/.5s", 2, "500ms"},
		{"7/ms", 7, "1ms"},
	}
	for _, tt := range tests {
		rate, period, err := parseLimit(tt.in)
		if err != nil || rate != tt.rate || period.String() != tt.period {
			t.Errorf("parseLimit(%q) = %d, %v, %v; want %d, %s, nil", tt.in, rate, period, err, tt.rate, tt.period)
		}
	}
}

// The README shows part of the demo's output as the demo prints it: the
// indented block under "## The demo" that begins "== ".
func TestREADMEDemo(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## The demo\n")
	if !ok {
		t.Fatal(`README.md has no "## The demo" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "\n    == ")
	if !ok {
		t.Fatal(`README.md's demo section shows no output (an indented block beginning "== ")`)
	}
	var shown strings.Builder
	shown.WriteString("== ")
	for i, line := range strings.Split(block, "\n") {
		if i > 0 && line != "" && !strings.HasPrefix(line, "    ") {
			break // the prose after the block
		}
		shown.WriteString(strings.TrimPrefix(line, "    ") + "\n")
	}
	want := strings.TrimRight(shown.String(), "\n") + "\n"
	_, out, _ := runArgs(t, "demo")
	if !strings.Contains(out, want) {
		t.Errorf("README.md's demo output is not what sluice demo prints:\n%s\n--- sluice demo prints\n%s", want, out)
	}
}

// Installed as envoyproxy/ratelimit's binary, sluice serves.
func TestCommandLine(t *testing.T) {
	tests := []struct {
		argv0 string
		args  []string
		want  string
	}{
		{"sluice", nil, ""},
		{"/usr/local/bin/sluice", []string{"demo"}, "demo"},
		{"/bin/ratelimit", nil, "serve"},
		{"ratelimit", []string{"-print-config"}, "serve -print-config"},
		{"/bin/ratelimit", []string{"check", "/etc/rl"}, "check /etc/rl"},
		{"/bin/ratelimit", []string{"serve", "-shadow"}, "serve -shadow"},
		{"/bin/ratelimit", []string{"limits.yaml"}, "serve limits.yaml"},
	}
	for _, tt := range tests {
		if got := strings.Join(commandLine(tt.argv0, tt.args), " "); got != tt.want {
			t.Errorf("commandLine(%q, %q) = %q, want %q", tt.argv0, tt.args, got, tt.want)
		}
	}
}

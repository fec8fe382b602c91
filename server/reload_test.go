package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// watching runs s's config watcher until the test ends.
func watching(t *testing.T, s *Server) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		s.watch(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// limitOf decides one request for user and returns its status.
func limitOf(t *testing.T, s *Server, desc string) *rlspb.RateLimitResponse_DescriptorStatus {
	t.Helper()
	resp, err := s.ShouldRateLimit(t.Context(), rlReq("test", 0, desc))
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatuses()[0]
}

func TestHotReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := writeFile(t, t.TempDir(), "test.yaml", testYAML)
		logs := &logBuffer{}
		s, _ := newServer(t, Settings{Paths: []string{path}, Logger: logs.logger()}) // polls every second
		watching(t, s)
		tick := func() {
			time.Sleep(DefaultReloadInterval)
			synctest.Wait()
		}

		limitOf(t, s, "org=acme,user=a") // org_user: 1 of 2 used
		if st := limitOf(t, s, "user=alice"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 || st.GetLimitRemaining() != 2 {
			t.Fatalf("before: %v", st)
		}
		tick() // nothing changed: nothing happens
		if got := counter(t, s, "sluice_config_reloads_total", "result", "success"); got != 0 {
			t.Fatalf("reloads without a change: %v", got)
		}

		// A good change takes effect at the next poll.
		writeFile(t, filepath.Dir(path), "test.yaml", strings.Replace(testYAML, "requests_per_unit: 3", "requests_per_unit: 5", 1))
		tick()
		if got := counter(t, s, "sluice_config_reloads_total", "result", "success"); got != 1 {
			t.Errorf("successful reloads = %v, want 1", got)
		}
		if st := limitOf(t, s, "user=alice"); st.GetCurrentLimit().GetRequestsPerUnit() != 5 || st.GetLimitRemaining() != 4 {
			t.Errorf("after the change: %v, want per_user 5/min with 4 left (a changed rule starts afresh)", st)
		}
		if st := limitOf(t, s, "org=acme,user=a"); st.GetLimitRemaining() != 0 {
			t.Errorf("an unchanged rule: %v, want its count kept (0 left)", st)
		}

		// A bad change is logged and counted once, and the last good
		// config keeps serving.
		writeFile(t, filepath.Dir(path), "test.yaml", "domain: test\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n")
		tick()
		tick()
		tick()
		if got := counter(t, s, "sluice_config_reloads_total", "result", "failure"); got != 1 {
			t.Errorf("failed reloads = %v, want 1 (the same bad content is not tried again)", got)
		}
		if l := logs.String(); !strings.Contains(l, "config reload failed") || !strings.Contains(l, "test.yaml:5: descriptors[0].rate_limit.unit: unknown unit") {
			t.Errorf("log lacks the error with its file, line and field:\n%s", l)
		}
		if st := limitOf(t, s, "user=alice"); st.GetCurrentLimit().GetRequestsPerUnit() != 5 {
			t.Errorf("after a bad change: %v, want the last good config", st)
		}

		// Fixing it reloads.
		writeFile(t, filepath.Dir(path), "test.yaml", testYAML)
		tick()
		if got := counter(t, s, "sluice_config_reloads_total", "result", "success"); got != 2 {
			t.Errorf("successful reloads = %v, want 2", got)
		}
		if st := limitOf(t, s, "user=alice"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
			t.Errorf("after the fix: %v, want per_user 3/min", st)
		}
	})
}

// A Kubernetes ConfigMap volume changes by swapping the ..data symlink.
func TestHotReloadConfigMap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		version := func(name, text string) {
			t.Helper()
			if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, name), "test.yaml", text)
			if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}
		version("..2026_03_01_12_00_00.1", testYAML)
		if err := os.Symlink("..data/test.yaml", filepath.Join(dir, "test.yaml")); err != nil {
			t.Fatal(err)
		}
		s, _ := newServer(t, Settings{Paths: []string{dir}})
		watching(t, s)
		if st := limitOf(t, s, "user=a"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
			t.Fatalf("before: %v", st)
		}
		version("..2026_03_01_12_05_00.2", strings.Replace(testYAML, "requests_per_unit: 3", "requests_per_unit: 7", 1))
		if err := os.RemoveAll(filepath.Join(dir, "..2026_03_01_12_00_00.1")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultReloadInterval)
		synctest.Wait()
		if st := limitOf(t, s, "user=a"); st.GetCurrentLimit().GetRequestsPerUnit() != 7 {
			t.Errorf("after the swap: %v, want per_user 7/min", st)
		}
	})
}

// Reload (SIGHUP) loads at once, changed or not.
func TestReload(t *testing.T) {
	path := writeFile(t, t.TempDir(), "test.yaml", testYAML)
	s, _ := newServer(t, Settings{Paths: []string{path}, ReloadInterval: -1})
	ctx := t.Context()
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Dir(path), "test.yaml", "domain: test\nnonsense: 1\n")
	err := s.Reload(ctx)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != 2 {
		t.Errorf("Reload of a bad file = %v, want a config.Error at line 2", err)
	}
	if got := counter(t, s, "sluice_config_reloads_total", "result", "success"); got != 1 {
		t.Errorf("successful reloads = %v, want 1", got)
	}
	if got := counter(t, s, "sluice_config_reloads_total", "result", "failure"); got != 1 {
		t.Errorf("failed reloads = %v, want 1", got)
	}
	if st := limitOf(t, s, "user=a"); st.GetCurrentLimit().GetName() != "per_user" {
		t.Errorf("after a bad reload: %v, want the last good config", st)
	}
	p, _ := newServer(t, Settings{Policy: config.Default()})
	if err := p.Reload(ctx); !errors.Is(err, errNoPaths) {
		t.Errorf("Reload of a server given a Policy = %v, want errNoPaths", err)
	}
}

// Requests decided while the config is swapped under them all succeed.
func TestReloadUnderLoad(t *testing.T) {
	path := writeFile(t, t.TempDir(), "test.yaml", testYAML)
	s, _ := newServer(t, Settings{Paths: []string{path}, ReloadInterval: -1})
	ctx := t.Context()
	configs := []string{testYAML, strings.Replace(testYAML, "requests_per_unit: 3", "requests_per_unit: 4", 1)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := s.ShouldRateLimit(ctx, rlReq("test", 0, "user=u"+string(rune('a'+w)), "org=acme,user=x"))
				if err != nil || len(resp.GetStatuses()) != 2 {
					errs <- errors.Join(err, errors.New("bad response"))
					return
				}
			}
		})
	}
	for i := range 20 {
		writeFile(t, filepath.Dir(path), "test.yaml", configs[i%2])
		if err := s.Reload(ctx); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A config over the caps is refused on reload, naming the file, and the
// last good config keeps serving.
func TestReloadOverCaps(t *testing.T) {
	path := writeFile(t, t.TempDir(), "test.yaml", testYAML)
	s, _ := newServer(t, Settings{Paths: []string{path}, ReloadInterval: -1})
	for _, tt := range []struct{ name, text, want string }{
		{"over MaxFileSize", testYAML + "# " + strings.Repeat("x", config.MaxFileSize) + "\n", "test.yaml: larger than 4 MiB"},
		{"over MaxNodes", testYAML + "x: [" + strings.Repeat("a,", 3<<19) + "a]\n", "test.yaml: too many YAML nodes"},
	} {
		writeFile(t, filepath.Dir(path), "test.yaml", tt.text)
		if err := s.Reload(t.Context()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Reload(%s) = %v, want an error containing %q", tt.name, err, tt.want)
		}
		if st := limitOf(t, s, "user=a"); st.GetCurrentLimit().GetName() != "per_user" {
			t.Errorf("after Reload(%s): %v, want the last good config", tt.name, st)
		}
	}
}

// ruleCount is a store that counts the rules it is asked whether it can
// hold (sluice.RuleChecker), and the requests it decides.
type ruleCount struct {
	sluice.Store
	rules, takes atomic.Int64
}

func (c *ruleCount) CheckRule(*sluice.PreparedRule) error {
	c.rules.Add(1)
	return nil
}

func (c *ruleCount) Take(ctx context.Context, now time.Time, checks []sluice.Check, out []sluice.Decision) error {
	c.takes.Add(1)
	return c.Store.Take(ctx, now, checks, out)
}

// A config's rules are prepared once each, where it loads, in shadow mode
// too (the config's own rule beside the one checked): deciding a request
// prepares nothing, and a reload prepares the new config's rules once.
func TestRulesPreparedOnceWhereLoaded(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		st := &ruleCount{Store: newStore(t)}
		path := writeFile(t, t.TempDir(), "test.yaml", testYAML)
		s, _ := newServer(t, Settings{Paths: []string{path}, Store: st, Shadow: shadow})
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(len(c.Rules()))
		if got := st.rules.Load(); got != n {
			t.Errorf("shadow %v: New asked the store about %d rules, want the config's %d", shadow, got, n)
		}
		for _, desc := range []string{"user=alice", "org=acme,user=a", "bucket=b", "trial=t"} {
			limitOf(t, s, desc)
		}
		if got := st.rules.Load(); got != n || st.takes.Load() != 4 {
			t.Errorf("shadow %v: after 4 requests (%d takes) the store was asked about %d rules, want still %d", shadow, st.takes.Load(), got, n)
		}
		writeFile(t, filepath.Dir(path), "test.yaml", strings.Replace(testYAML, "requests_per_unit: 3", "requests_per_unit: 4", 1))
		if err := s.Reload(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := st.rules.Load(); got != 2*n {
			t.Errorf("shadow %v: after a reload the store was asked about %d rules, want %d", shadow, got, 2*n)
		}
	}
}

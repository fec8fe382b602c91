package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/sluicehq/sluice/server/internal/hosts"
)

// Options configure the admin listener (Serve, Handler). The zero value
// serves only GET /v1/stats, GET /v1/policy, GET /v1/leases and
// GET /v1/rlqs.
type Options struct {
	// UI serves the console at /ui/ (from the binary: nothing is loaded
	// from elsewhere) and the playground's POST /v1/simulate.
	UI bool
	// Lookup serves POST /v1/lookup and the console's key lookup, which
	// tells anyone who can reach the admin address a key's state, and
	// shows the keys of GET /v1/leases as they are. Off by default.
	Lookup bool
	// Hosts are the host names, besides IP addresses and localhost, that
	// the admin listener answers to in a request's Host header: a page
	// served under any other name (a DNS rebinding attack from a browser
	// on the same host) is refused.
	Hosts []string
	// Profile serves Go's profiles under /debug/pprof/ (net/http/pprof),
	// as envoyproxy/ratelimit's debug listener does. Off by default: a
	// CPU profile costs the service while it runs, and a heap profile
	// can show the keys in memory.
	Profile bool
}

//go:embed ui
var uiFiles embed.FS

// adminShutdownTimeout bounds the wait for admin requests in flight at
// shutdown; a simulation takes at most simulateBudget.
const adminShutdownTimeout = simulateBudget + time.Second

// maxAdminBody bounds the body of POST /v1/simulate and /v1/lookup: a
// pasted list of 100,000 arrival times takes about a megabyte.
const maxAdminBody = 4 << 20

// Handler returns the admin API and, with opts.UI, the console:
//
//   - GET /v1/stats: the requests of the last minutes, per second, per
//     domain, and the decisions per domain and rule, as JSON (see Serve);
//   - GET /v1/policy: the config being served, and the last reload;
//   - GET /v1/leases: the leases this process holds, each key's holders
//     at the authority (keys shown with Lookup, digested without);
//   - GET /v1/rlqs: the RLQS streams' assignments, per bucket and stream;
//   - POST /v1/simulate (with UI): replays arrivals through the exact
//     algorithms (the playground);
//   - GET /v1/algorithms (with UI): the algorithms it replays, from
//     sluice's registry;
//   - POST /v1/lookup (with Lookup): a key's state, charging nothing;
//   - GET /ui/ (with UI): the console;
//   - GET /debug/pprof/ (with Profile): the Go profiles.
//
// The statistics are sampled only while Serve runs.
func (c *Console) Handler(opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.stats.report(c, opts))
	})
	mux.HandleFunc("GET /v1/policy", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.policyReport())
	})
	mux.HandleFunc("GET /v1/leases", func(w http.ResponseWriter, r *http.Request) {
		c.serveLeases(w, r, opts)
	})
	mux.HandleFunc("GET /v1/rlqs", func(w http.ResponseWriter, r *http.Request) {
		c.serveRLQS(w, r, opts)
	})
	if opts.Lookup {
		mux.HandleFunc("POST /v1/lookup", c.serveLookup)
	} else {
		mux.HandleFunc("POST /v1/lookup", func(w http.ResponseWriter, r *http.Request) {
			jsonError(w, http.StatusNotFound, "the key lookup is off: it reveals per-key state; sluice serve --key-lookup turns it on")
		})
	}
	if opts.UI {
		mux.HandleFunc("POST /v1/simulate", c.serveSimulate)
		mux.HandleFunc("GET /v1/algorithms", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, algorithms())
		})
		sub, _ := fs.Sub(uiFiles, "ui")
		files := http.StripPrefix("/ui/", http.FileServerFS(sub))
		mux.Handle("GET /ui/", files)
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	}
	if opts.Profile {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	names := hosts.Set(opts.Hosts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts.Allowed(r.Host, names) {
			httpError(w, http.StatusForbidden, "host not allowed: the admin listener answers to IP addresses, localhost and the host of --admin")
			return
		}
		h := w.Header()
		// Everything the page loads comes from here: scripts, styles,
		// the charting library and the data.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if r.Method == http.MethodPost {
			// A cross-origin page can send a form or text/plain without
			// asking; JSON needs a CORS preflight, which is never granted.
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
				jsonError(w, http.StatusUnsupportedMediaType, "Content-Type: want application/json")
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// Serve serves the admin handler on ln, and samples the statistics
// GET /v1/stats reports, until ctx ends; then it lets the requests in
// flight finish, for a few seconds at most, and returns nil. It returns
// early with an error if the listener fails. Serve closes ln.
//
// The statistics are this process's own: with several replicas, each
// reports its own decisions. They hold the last five minutes, per second,
// per domain and rule: allowed, denied, and denied in shadow mode; the
// decision latency; the store's errors. No key, descriptor value or
// client address is kept.
func (c *Console) Serve(ctx context.Context, ln net.Listener, opts Options) error {
	hs := &http.Server{
		Handler:        c.Handler(opts),
		ReadTimeout:    c.svc.ReadTimeout,
		IdleTimeout:    c.svc.IdleTimeout,
		MaxHeaderBytes: c.svc.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(c.svc.Log.Handler(), slog.LevelWarn),
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { c.stats.run(sctx, &c.svc) })
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
		shctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminShutdownTimeout)
		if hs.Shutdown(shctx) != nil {
			hs.Close()
		}
		cancel()
		<-errc
	case err = <-errc:
		err = fmt.Errorf("server: admin: %w", err)
	}
	stop()
	wg.Wait()
	return err
}

// httpError answers msg as plain text.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// jsonError answers {"error": msg}, which the console shows as it is.
func jsonError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// readJSON decodes a POST body of at most maxAdminBody bytes into v,
// refusing unknown fields; on error it has answered.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		jsonError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", tooBig.Limit))
		return false
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("empty body")
	}
	jsonError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
	return false
}

package protocol

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server/internal/decide"
)

// allowAll are adapters whose decision allows every request, with no
// limit applied: the adapters alone, for what they do whatever is decided.
func allowAll() *Adapters {
	return New(Service{
		Current: func() *Snapshot { return &Snapshot{} },
		Decide: func(_ context.Context, _ *Snapshot, req *decide.Request, _ Endpoint) (*decide.Outcome, error) {
			return &decide.Outcome{Allowed: true, Statuses: make([]decide.Status, len(req.Descs))}, nil
		},
		Log:           slog.New(slog.DiscardHandler),
		MaxHitsAddend: 1 << 53,
		MaxBodyBytes:  64 << 10,
	})
}

// A buffer that grew past jsonBufKeep does not go back to the pool: a
// few huge bodies do not pin their memory. (Get right after Put on one
// goroutine finds what Put kept; under -race the pool drops some Puts at
// random, which makes this check weaker there, never wrong.)
func TestJSONBufBound(t *testing.T) {
	big := make([]byte, 0, jsonBufKeep+1)
	putJSONBuf(&big)
	for range 4 {
		bp := jsonBufs.Get().(*[]byte)
		if cap(*bp) > jsonBufKeep {
			t.Fatalf("the pool gave back a buffer of %d bytes, past jsonBufKeep (%d)", cap(*bp), jsonBufKeep)
		}
	}
}

// scribbler is a ResponseWriter whose Write first takes a buffer from
// POST /json's pool and overwrites it whole: if the handler had given its
// answer's buffer back before writing it, Write finds its answer changed.
type scribbler struct {
	*httptest.ResponseRecorder
	changed bool
}

func (w *scribbler) Write(p []byte) (int, error) {
	want := string(p)
	bp := jsonBufs.Get().(*[]byte)
	b := (*bp)[:cap(*bp)]
	for i := range b {
		b[i] = '#'
	}
	putJSONBuf(bp)
	if string(p) != want {
		w.changed = true
	}
	return w.ResponseRecorder.Write(p)
}

// The answer's buffer stays the handler's until its Write returns. (A Get
// right after a Put on one goroutine finds what Put kept; under -race the
// pool drops some Puts at random, so a few requests are sent.)
func TestJSONAnswerKeptUntilWritten(t *testing.T) {
	h := http.HandlerFunc(allowAll().ServeJSON)
	for i := range 20 {
		body := fmt.Sprintf(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"w%d"}]}]}`, i)
		w := &scribbler{ResponseRecorder: httptest.NewRecorder()}
		h.ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/json", strings.NewReader(body)))
		if w.Code != http.StatusOK || w.changed || !strings.Contains(w.Body.String(), `"overallCode":"OK"`) {
			t.Fatalf("request %d: %d %q, changed while written: %v", i, w.Code, w.Body.String(), w.changed)
		}
	}
}

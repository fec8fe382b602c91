package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/console"
)

// The console lists the algorithms from sluice's registry, and the leaky
// queue, and the simulator takes each one it lists.
func TestConsoleAlgorithms(t *testing.T) {
	s, _ := newServer(t, Settings{})
	h := s.AdminHandler(AdminOptions{UI: true})
	var got []console.AlgoReport
	if code, _, body := adminDo(t, h, "GET", "/v1/algorithms", "", &got); code != http.StatusOK {
		t.Fatalf("GET /v1/algorithms: %d %s", code, body)
	}
	infos := sluice.AlgoInfos()
	if len(got) != len(infos)+1 || got[len(got)-1].ID != "leaky_queue" {
		t.Fatalf("GET /v1/algorithms = %+v, want the %d of the registry and the leaky queue", got, len(infos))
	}
	for i, info := range infos {
		if a := got[i]; a.ID != string(info.ID) || a.Name != info.Name || a.Summary != info.Summary || a.Bucket != info.Bucket {
			t.Errorf("algorithm %d = %+v, want the registry's %+v", i, a, info)
		}
	}
	for _, a := range got {
		if code, _, body := adminDo(t, h, "POST", "/v1/simulate",
			simBody(`"`+a.ID+`"`, `{"rate":5,"period":"1s"}`, `{"kind":"scenario","scenario":"boundary"}`), nil); code != http.StatusOK {
			t.Errorf("simulate %s: %d %s", a.ID, code, body)
		}
	}
	code, _, body := adminDo(t, h, "POST", "/v1/simulate", simBody(`"nope"`, `{"rate":5,"period":"1s"}`, `{"kind":"scenario","scenario":"boundary"}`), nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "sliding_counter or leaky_queue") {
		t.Errorf("simulate nope: %d %s, want a 400 listing the algorithms", code, body)
	}
	if code, _, _ := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/v1/algorithms", "", nil); code != http.StatusNotFound {
		t.Errorf("UI off: GET /v1/algorithms: %d, want 404", code)
	}
}

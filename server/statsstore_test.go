package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/redis"
	"github.com/sluicehq/sluice/server/console"
)

// The Redis stores give the console and the metrics their counts through
// console.StatsStore, which they implement without importing the server.
var (
	_ console.StatsStore = (*redis.Store)(nil)
	_ console.StatsStore = (*redis.Pair)(nil)
)

// With a Redis store, the console's statistics show its counts and its
// breaker, and the metrics its breaker, read through console.StatsStore.
func TestRedisStatsThroughInterface(t *testing.T) {
	s, _ := newServer(t, Settings{Store: newRedisStore(t), StoreName: "redis"})
	if _, err := s.ShouldRateLimit(t.Context(), rlReq("test", 0, "user=a")); err != nil {
		t.Fatal(err)
	}
	var st statsReport
	if code, _, body := adminDo(t, s.AdminHandler(AdminOptions{}), "GET", "/v1/stats", "", &st); code != http.StatusOK {
		t.Fatalf("GET /v1/stats: %d %s", code, body)
	}
	if st.Store.Breaker != "closed" || st.Store.Health != "ok" || st.Store.Redis["Calls"] < 1 {
		t.Errorf("store %+v: want the breaker closed and the call counted", st.Store)
	}
	if _, ok := st.Store.Redis["BreakerOpens"]; !ok {
		t.Errorf("store.redis %v: want BreakerOpens among the counts", st.Store.Redis)
	}
	w := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{"sluice_store_breaker_open 0", "sluice_store_breaker_opens_total 0"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

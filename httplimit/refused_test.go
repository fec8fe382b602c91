package httplimit_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/teststore"
)

// A rule the store cannot hold is refused when the middleware is made, in
// shadow mode too, not with a 500 on every request.
func TestNewRefusesRuleOutOfStoreRange(t *testing.T) {
	lim, err := sluice.NewLimiter(teststore.Narrow{})
	if err != nil {
		t.Fatal(err)
	}
	daily := sluice.Rule{Name: "daily", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(10), Shadow: true}
	if _, err := httplimit.New(lim, httplimit.WithRule(daily, httplimit.ClientIP())); !errors.Is(err, sluice.ErrRefused) {
		t.Errorf("New with a rule the store refuses = %v, want ErrRefused", err)
	}
	hourly := sluice.Rule{Name: "hourly", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(10)}
	if _, err := httplimit.New(lim, httplimit.WithRule(hourly, httplimit.ClientIP())); err != nil {
		t.Errorf("New with a rule the store holds = %v", err)
	}
}

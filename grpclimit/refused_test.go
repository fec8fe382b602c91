package grpclimit_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/teststore"
)

// A rule the store cannot hold is refused when the interceptor is made,
// not with Internal on every call.
func TestNewRefusesRuleOutOfStoreRange(t *testing.T) {
	lim, err := sluice.NewLimiter(teststore.Narrow{})
	if err != nil {
		t.Fatal(err)
	}
	daily := sluice.Rule{Name: "daily", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerDay(10)}
	if _, err := grpclimit.New(lim, grpclimit.WithRule(daily, grpclimit.PeerIP())); !errors.Is(err, sluice.ErrRefused) {
		t.Errorf("New with a rule the store refuses = %v, want ErrRefused", err)
	}
	hourly := sluice.Rule{Name: "hourly", Algorithm: sluice.AlgoGCRA, Limit: sluice.PerHour(10)}
	if _, err := grpclimit.New(lim, grpclimit.WithRule(hourly, grpclimit.PeerIP())); err != nil {
		t.Errorf("New with a rule the store holds = %v", err)
	}
}

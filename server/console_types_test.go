package server

import "github.com/sluicehq/sluice/server/console"

// The admin API's answers, as the tests decode them.
type (
	statsReport    = console.StatsReport
	ruleReport     = console.RuleReport
	policyReport   = console.PolicyReport
	limitReport    = console.LimitReport
	lookupResponse = console.LookupResponse
	simResponse    = console.SimResponse
)

// maxBins is the most bins the simulator's series hold.
const maxBins = console.MaxSimBins

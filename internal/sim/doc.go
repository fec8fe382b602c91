// Package sim replays a list of arrivals through the exact algorithms,
// with explicit times, for `sluice demo` and the console's playground
// (POST /v1/simulate), so that both show the same answers: the demo's three
// scenarios (Scenarios), a Poisson stream (Poisson), and the replay
// itself (Run), which never reads the clock; Trace is the replay that also
// reads what each algorithm holds over time (Gauge), for the playground's
// charts.
//
// Times are offsets from t=0, which Start places on a fixed-window
// boundary at a fixed date, so that a replay gives the same answers on
// every run and every machine.
package sim

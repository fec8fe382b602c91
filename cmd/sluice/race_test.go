//go:build race

package main

// raceEnabled is true under the race detector, which slows a process
// several times: the floods, whose point is a service at full speed, skip.
const raceEnabled = true

//go:build race

package main

// raceEnabled is true under the race detector, which slows a process
// several times and makes its RSS several times the service's own: the
// floods, whose point is a service at full speed, skip, and so do the
// tests that read a child process's RSS.
const raceEnabled = true

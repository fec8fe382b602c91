//go:build race

package main

// raceEnabled is true under the race detector, whose shadow memory makes a
// child process's RSS several times the service's own.
const raceEnabled = true

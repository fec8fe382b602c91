//go:build race

package concurrency

// raceEnabled is true under the race detector, which makes memory-heavy
// tests several times slower: they shrink.
const raceEnabled = true

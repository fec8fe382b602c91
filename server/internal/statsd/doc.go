// Package statsd sends the server's statistics as envoyproxy/ratelimit
// does: counters and timers in the statsd line protocol, over TCP (its
// USE_STATSD) or, with tags in DogStatsD's "|#k:v" form, over UDP (its
// USE_DOG_STATSD). A Sink gathers counts in memory and writes them every
// flush interval from a goroutine of its own, so that a statsd that is
// slow, gone or refusing never holds up a decision: what cannot be sent
// is dropped and counted (Sink.Dropped).
package statsd

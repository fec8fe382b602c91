// Package lease decides rate limits on quota leased from a shared
// authority: each process holds a share of a key's quota, in proportion to
// its demand, and decides locally from it with the same algorithms,
// renewing its share as it goes. It trades the Redis round trip of every
// exact decision for one renewal per key per Renew interval, at a bound
// stated with the Store.
package lease

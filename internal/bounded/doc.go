// Package bounded holds what sluice's two in-memory keyed structures, the
// memory store and the concurrency limiter, share: their settings and the
// checks on them, the count of keys and bytes held against the bounds, the
// copy of a key, and the background sweeper with the Close that stops it.
//
// Each structure has options of its own that fill a Config and checks it
// with its own error values (Config.Check), so that neither package's API
// depends on the other's or names this package.
package bounded

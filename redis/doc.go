// Package redis is a sluice.Store in Redis, shared by every process that
// talks to the same Redis: single node, Sentinel or Cluster, through a
// go-redis v9 UniversalClient.
//
//	s, err := redis.New(client)
//	lim, err := sluice.NewLimiter(s, sluice.WithFallback(memoryStore))
//
// # One script per decision
//
// A request — all its checks — is decided by one run of one Lua script
// (take.lua, static, its parameters in ARGV). On a single Redis (node or
// Sentinel) of version 7 or later, and on each master of a Cluster (see
// Runs per Cluster node), the script is a library of Redis functions,
// sluice_take_SHA1 (SHA1 the script's hash), run by FCALL and loaded by
// FUNCTION LOAD when Redis answers that it has no such function (the first
// run, or after a restart, a failover or FUNCTION FLUSH): Redis then keeps
// what the script sets up between runs, which saves it a few µs a run (see
// take.lua). The library's second function, sluice_fixed_SHA1, decides a
// run whose every request is one unit of a fixed window, the commonest
// run, for less than take does. A library stays in Redis, persisted and
// replicated as Redis keeps functions, until FUNCTION DELETE or FLUSH; a
// new version of the script loads a library of its own. Through a
// Cluster's or a Ring's client, before Redis 7, or for a user whose ACL
// refuses functions, the script is sent by EVALSHA, and again with EVAL once if Redis answers
// NOSCRIPT. Either answer means the script did not run, so nothing is
// charged twice. The script decides every check as if charged; if every
// check not in shadow mode allows, it charges those that allow, shadow ones
// included; otherwise it charges none and reports, for the checks that
// would have allowed, a peek; but a check of a rule charged by usage is
// recorded either way (see Usage charges). The time is Redis TIME, so
// that the application servers' clocks do not matter, unless
// WithCallerTime.
//
// # Exact arithmetic in doubles
//
// Lua's numbers are doubles, exact for integers up to 2^53, and the script
// makes exactly the decisions of the single-key algorithms (every Decision
// field, RetryAfter and ResetAfter to the nanosecond) at whole-µs times;
// a time with a fraction of a µs is truncated to the µs. Time is kept in
// µs. The bucket algorithms and GCRA keep, per key, the last time seen and
// the debt then, in units of h/q ns where Period/Rate = p/q in lowest
// terms and h = gcd(1000, p), so that nothing is ever rounded; the windows
// keep counters, their products compared exactly in 26-bit limbs; the
// sliding log keeps one Redis list, an anchor and then an entry a push of
// units at a µs, at most Rate of them in the window: the list's length,
// less the entries that left the window (a later push trims them), and
// the units beyond one an entry that the anchor keeps give the count (see
// logread in take.lua). The range,
// checked before any call (ErrOutOfRange, which wraps
// sluice.ErrLimitTooLarge):
//
//   - buckets: Burst·p/h <= 2^51 and q <= 4.5·10^12. Any rate per second,
//     minute or hour with Burst = Rate fits; per day, 10^6 fits, but a rate
//     prime to 86400·10^9 above ~26000 does not.
//   - windows and the log: Period a whole number of µs, at most 2^51 µs
//     (71 years); Rate at most 10^12 (the sliding log: 2^20, as in memory).
//   - time: within 2^52 µs of the epoch (1827 to 2112).
//
// A time earlier than the last one seen for a key is read as the last one
// seen: a clock that goes back mints nothing.
//
// # Batching
//
// On a single Redis (node or Sentinel), requests that arrive while a
// script run is out are sent together as the next run, which decides each
// of them in order, all-or-nothing each, as if they had come one by one:
// Redis parses one command, enters Lua once and reads TIME once for many
// decisions. A run holds at most 64 requests (WithMaxBatch). One run is
// out at a time, and a second beside it only with a full run to send, or
// once the first has been out for half the store's timeout (a connection
// that stopped answering): so a run carries what arrives in a round trip.
// The callers take turns sending; no goroutine is started (but for the
// parts of a request across masters: see Requests across slots). On a
// Cluster, the same holds per master: the store sends runs to each master
// directly, the requests bound for one batched together (see Runs per
// Cluster node). On a Ring each request is a run of its own, sent through
// go-redis's autopipeliner.
//
// What Redis spends per decision is the part of the cost that does not
// scale by adding application servers, so the script does as little as
// the exactness allows and leaves the rest to Go. A request of one check
// of cost 1 on a bucket or a fixed window, the common case, is one byte in
// its run (its rule; the run's time is sent once) and is decided with one
// call when its key is idle or new: a bucket by SET ... GET of the state
// an idle bucket would have, written again only when the key was not
// idle; a fixed window by INCRBY on its window's counter (see below); a
// sliding window counter (Rate below 2^25) by a GET, and a SET only when
// allowed. The script answers it with one integer, from which the store
// computes the Decision with the script's arithmetic (for the sliding
// counter, the memory store's, from the two counts it decided from). Rules and their TTLs are sent as
// strings made once per rule, so that Redis formats no number per call.
// bench/redis_test.go measures Redis's time per decision.
//
// # Keys and Redis Cluster
//
// A check's state is at prefix{key}:rule:code, with the check's key as
// the hash tag, escaped (see keys.go). The code names the state's layout,
// and a new layout gets a new code, so that no server misreads another's
// state: since 2026-12 the sliding log is one list, "lu", where it was
// a count and a list, "l" and "l:e", and then a list of running totals,
// "log". Servers of two layouts side by side, in a rolling upgrade, keep
// two logs of each key, and a client may get up to twice a log's rate in
// the period the rollout takes; the old keys expire within two periods
// and a second of their last use. Its TTL is fixed per rule: the
// longest its state can stay live (a full bucket's refill, or two for a
// bucket that usage took below empty; a window's period, two for the
// sliding counter) and a second of slack, sent as a string made once per
// rule. The sliding log's is three periods and the
// slack, set on its one-unit path only by a push whose oldest entry in the
// window is of an earlier aligned span of two periods, the first push of
// each span among them: it lives a period and the slack past its newest
// entry at least, and, idle, three periods and the slack at most.
// So a key never expires while its state
// counts, even when it is read at a time other than Redis's (the
// callers' clocks with WithCallerTime, which may run behind Redis's, or
// the store's clock below), and idle keys go within that bound; a bucket
// or a window found idle is deleted at once, and a bucket with Rate 0,
// which never refills, has no TTL.
//
// # Runs per Cluster node
//
// A command's KEYS must share a slot on a Cluster, but a script may touch
// the keys of any slot its node holds. So the store sends each run to the
// master that holds its keys, directly, with the keys in ARGV: the checks
// of a request whose keys sit on one master (per IP and per user, in
// different slots) are decided in one run, all-or-nothing, and the
// requests bound for one master are batched. The master of a key is the
// cluster client's map of slots; a run that finds a key its node no
// longer holds (a slot moved, in a resharding or a failover) fails the
// requests on that key alone, before they wrote anything, and the store
// decides them again through the cluster client, which follows Redis's
// redirections and reloads its map (Stats.Moved). Only a request whose
// keys sit on different masters needs more than one run: see below.
// WithHashTag can give a request's checks a common tag, which keeps them
// on one master. WithoutBatching sends every run through the cluster
// client, so a request's keys must then share a slot to be decided in one
// run.
//
// # Requests across slots
//
// On a Cluster (and a Ring, by hash tag), a request whose keys one run
// cannot hold — on different masters, or in different slots
// WithoutBatching — is decided in parts, one per master (or slot), all
// sent at once, each a script run on its node, all-or-nothing within
// itself. If every
// part passes, the request is allowed. If a part denies, or fails, every
// part that charged is given back on its node, and its checks report the
// peek a denied request reports; once the request returns, nothing of its
// gate checks is charged (its usage is: see Usage charges). The give-back
// never mints: it takes off a window's count
// only while the window is the one charged (the sliding counter's, from
// its previous count once it rolled), the log's entry while it is in the
// log, and from a bucket no more than what is left of the charge had
// nothing else happened since: the debt after the take, drained since.
// That is exact unless another request charged the bucket in between
// and its debt would have drained below the charge; then part of the
// charge, at most what drains in the round trip, stays.
//
// A give-back sent twice (a client's retry after a lost answer) gives
// back once: it carries a token, a key in its part's first slot for ten
// seconds, longer than its sends and their retries last. (A client that
// floods denied requests across masters leaves at most one such key per
// give-back for those ten seconds; the denial cache answers repeats on a
// denied key for a while without any.)
//
// Two things differ from a request in one run. Between a part's take and
// its give-back, one round trip to the slowest node and one back, a
// concurrent request sees the charge and may be denied for it. And a
// give-back that fails (its node stopped answering) leaves its charge
// until the window ends or the bucket refills; the request then returns
// the error, which Stats.GiveBackErrors counts. WithoutSplit refuses
// such requests with ErrCrossSlot instead. split.go holds the protocol,
// take.lua's flavours 1 and 2 its Redis side; nodes.go the runs per
// master.
//
// # Usage charges
//
// A rule charged by usage (sluice.ChargeUsage, sluice.ChargeCount) is
// decided as the memory store decides it, every Decision field alike: its
// cost is recorded whether it fits or not, and the check allows iff it
// fits; the debt is capped at a period's worth (a bucket's at two full
// buckets', a window's count and the sliding log's units in the window at
// 2·Rate), so a key left alone is usable again within two periods. Its
// check of cost 0 records nothing and is denied while less than a unit is
// left (ChargeUsage) or while the limit is in debt (ChargeCount). In a
// request of several checks, the usage is recorded in the same run as the
// gate checks are decided, whatever they decide, and the gate checks are
// charged only if every check not in shadow mode, usage ones included,
// allows. A sliding log that holds Rate entries in the window records
// usage that does not fit into its newest entry, moved to the time of the
// charge (its units then leave the window a little later, never sooner),
// so its list holds at most Rate entries in the window, as the memory
// store's ring of Rate cells does.
//
// Usage is never taken back: a request across slots gives back only its
// gate checks' charges, and the denial cache never answers a usage charge
// of cost more than 0, which always reaches Redis (a check of cost 0 is
// answered from a denial of the same rule's charge, which only more usage
// can prolong). The script's one-byte paths serve gate rules alone: a
// usage charge takes the general path, which costs Redis a little more per
// decision.
//
// # The store's clock and the fixed window
//
// At Redis TIME on a single Redis (node or Sentinel), the store keeps its
// own clock at prefix+"clock", read and written once per script run: no
// decision is made at a time before one already decided at, even if
// Redis's clock steps back. With time that never goes back, a fixed
// window needs no state but its count: it is a plain integer per window,
// at prefix{key}:rule:w:START (START the window's start in Unix seconds,
// or in µs for a period that is not whole seconds), charged by INCRBY,
// given back by DECRBY when the request is denied, and given its TTL only
// when new. With WithCallerTime, or on a Cluster or a Ring, a fixed window
// keeps its window, count and latest time in one key, as the other
// algorithms do.
//
// # Failure
//
// Each call has a deadline (WithTimeout, 50ms; see Deadlines and clocks).
// Errors are returned, and
// the sluice.Limiter applies each rule's Failure (open, closed, local),
// except to a request the store refuses as given, which it returns as an
// error (ErrOutOfRange, ErrCrossSlot and two checks of one request on one
// key wrap sluice.ErrRefused): a refusal is not an outage.
// A circuit breaker opens when, over the last 10 seconds, at least 20
// calls reached Redis and at least half of them failed; open, it fails
// calls at once, then probes (WithBreaker). Stats counts calls, errors,
// sheds and reloads. Denials
// are remembered locally until their RetryAfter (WithDenyCache), so that a
// flood against one key does not reach Redis (but for usage charges, see
// Usage charges): nothing can make a denied
// key allowed sooner, so the cache never denies what Redis would allow;
// but a give-back can (see Requests across slots), so where requests may
// be split (a Cluster, a Ring, a Pair's stores) a denial is remembered at
// most five times the store's timeout, the longest a take and its
// give-back can last.
//
// # Load
//
// Load is not failure: no amount of traffic switches the limits off.
// The requests in flight towards each Redis (the store's, each master of
// a Cluster; each store of a Pair has its own) are bounded,
// WithMaxInFlight (1024 by default): queued for a script run or in one.
// A request that finds no room waits for it, and then for its run, at
// most until its caller's deadline or the store's timeout, whichever
// comes first; past that it is shed: Take returns an error wrapping
// sluice.ErrShed, having written and charged nothing, and the Limiter
// denies it (RetryAfter sluice.ShedRetry, one second), whatever the
// rules' failure modes. A request that was written but whose caller
// stopped waiting for the answer is shed too; its charge, if the script
// ran, stays, as any lost answer's.
//
// Waiting for a turn never counts towards the breaker; only calls written
// to Redis do, each with its outcome: an answer, or a failure (an error
// reply, a refused or broken connection, no answer within the store's
// timeout from the write). But a run that times out while its Redis
// answered another within the last second is load: a late answer from a
// Redis that answers others is as likely a process too busy to read it
// in time, under a flood, as a Redis gone. Its requests are shed, and
// the breaker does not count it. After a second without any answer, a
// timeout is a failure: the failure modes decide, and the breaker counts
// it, opening once failures are half the calls of its window; from then
// on the failure modes decide at once, until a probe finds Redis back.
//
// Before it takes traffic, a service should Load the script (and the
// library of functions) into every Redis: else, on a cold start under
// load, the first calls each load it, at once, and miss their deadlines.
//
// # Deadlines and clocks
//
// A call waits for its turn, then for Redis, and each wait has its bound:
//
//   - the caller's context: its end, a deadline or a cancellation, is the
//     caller giving up. A request that was waiting for its turn is shed
//     at its deadline (an error wrapping sluice.ErrShed and the context's
//     error), or returns the context's error when it was cancelled; the
//     circuit breaker learns nothing from either.
//   - the Limiter adds no bound of its own: it passes the caller's
//     context through, and the service (package server) adds none either.
//   - the store's own bound, WithTimeout (50ms by default), bounds the
//     wait for a turn, as the caller's deadline does, and then the call,
//     counted from when it is written to Redis: a call with no answer by
//     then is a timeout of the store's, ErrTimeout, counted in
//     Stats.Timeouts and towards the breaker.
//
// A run of several callers' requests lasts until the store's timeout
// from its writing, whatever their deadlines (each stops waiting at its
// own), so that the breaker learns how it ended; a run of one request
// ends at its caller's deadline too, and then tells the breaker nothing,
// unless that deadline is the Limiter's bound and the request never
// waited for its turn: the bound then ran from the write, a timeout of
// the store's. Below these, the client's own timeouts (go-redis's
// ReadTimeout, 3s by default) end a call the store no longer waits for:
// with ContextTimeoutEnabled, which is also the fastest, the client
// honours the call's deadline itself; otherwise the call waits aside, in
// a goroutine that ends when the client's timeouts end the call.
//
// Three clocks can take part in a decision:
//
//   - Redis TIME is the time of decisions by default, so that the
//     application servers' clocks do not matter.
//   - The caller's now, from the Limiter's clock (sluice.WithClock),
//     is the time of decisions instead with WithCallerTime, and then also
//     the denial cache's.
//   - The breaker's clock, WithBreakerClock (sluice.SystemClock by
//     default), times the breaker's cooldown and, at Redis TIME, the
//     denial cache: a denial's RetryAfter counts from when the request was
//     sent, which this clock reads no later than Redis decides.
//
// # Why go-redis
//
// go-redis v9 is what the rest of the project and most users already hold.
// What rueidis would bring, pipelining concurrent callers on one
// connection, the store gets from batching, which goes further (one
// script run for many requests; see bench/redis_test.go for the figures),
// and on a Cluster from batching per master.
//
// go-redis retries a command after a network error (Options.MaxRetries,
// 3 by default). A retry of a script that ran but whose answer was lost
// charges twice; set MaxRetries to -1 where exact counts matter more than
// a retry. (A give-back is safe to retry: see its token in Requests
// across slots.)
package redis

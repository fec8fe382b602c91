-- sluice: requests against several checks each, every request
-- all-or-nothing (but for usage, see CHARGE), decided in order, as if they
-- had come one by one. The arithmetic is explained in params.go, whose
-- checks keep every parameter in the range where the doubles below are
-- exact integers.
--
-- What costs Redis here is counted per decision: each redis.call,
-- each Lua number passed to one (Redis formats it), each KEYS entry, TIME.
-- So a single check takes a path of its own per kind, TTLs are strings
-- made once per rule, and TIME is read once per run.
--
-- ARGV[1] the run, one string, as struct.pack('<BBBBddI4I4') makes its
--   head (each ARGV element costs Redis a run's time to pass, so the
--   head's fields travel as one string):
--   node: 1 for a run on one node of a Cluster, its keys in ARGV (see
--     nodemode below), never with the clock; else 0
--   clock: 1 if KEYS[1] is the store's clock (see clock below), else 0
--   flavour: for the parts of a request that no one run can decide (see
--     split.go), 1, a take that also reports, per check, the time it was
--     decided at and a bucket's debt after, or 2, which gives back what
--     such a take charged (see giveback); else 0. Neither comes with
--     one-byte requests
--   fast: 1 if the run has one-byte requests, else 0
--   now: their time, in µs, or 2^53 for Redis TIME
--   guess: the time, in µs, at which the client guessed the windows of
--     the one-byte kind 5 requests: their keys come with their window's
--     start (see wkey)
--   the number of rules, and n, the number of requests;
--   then the shape of the run: a byte per request, in order. 0: a request
--   read from what follows. r > 0: one check of rule r, cost 1, at the
--   head's now, decided on a path of its own for its kind, with a reply
--   of one number (see bstretch, cstretch, lstretch and wstretch), the Go
--   side making the Decision from it: what Redis spends per decision is
--   what scales least;
--   then the other requests, little-endian doubles: for each request, now
--   in µs, or 2^53 for Redis TIME, and the number of checks; then per
--   check its rule (an index into the rules) and its cost.
-- ARGV[1+i] rule i, '<BBddddddss': kind,
--   its modes, shadow (1 or 0) plus twice its charge (see CHARGE), a1..a6,
--   and the TTL of its keys in ms as a string ('', none), then a bucket's
--   TTL for a state in debt past a full bucket's ('' for the windows),
--   made once per rule so that Redis formats no number per call:
--     kind 1 bucket  (a1..a6 = span, pt, m, h, q, burst)
--     kind 2 fixed   (a1, a2 = rate, period in µs), one packed state
--     kind 3 counter (a1, a2 = rate, period in µs)
--     kind 4 log     (a1, a2, a3 = rate, period and the span its TTL is
--            set once in, in µs), a list (see logread)
--     kind 5 fixed, a key per window (a1, a2, a3 = rate, period in µs, µs
--            per unit of the window start appended to the key): only with
--            the clock, which keeps time from going back
-- KEYS (or, on a node, ARGV after the rules): the clock if any, then
-- each check's key, in order; for kind 5, the key less the window's start, or, for a one-byte
-- request, with the start of the window the client guessed.
-- Reply: an array of integers: the time of the one-byte requests as
-- decided (0 if none), then per request one number for a one-byte
-- request, else 6 per check: allowed, remaining, retry µs, retry ns,
-- reset µs, reset ns; a µs of -1 is Never. In flavour 1, 8 per check: the
-- six, the time in µs the check was decided at, and a bucket's debt after
-- (0 for the other kinds). In flavour 2, requests come with 4 numbers per
-- check (rule, cost, and the take's two) and a token key after their
-- check's keys (see giveback), and the reply is the six per check of a
-- peek after the give-back.

-- How it runs: as a Redis function (FCALL, Redis 7 and later; see
-- library in store.go) this file is loaded once, and what its top level
-- makes, the helpers below, the rules' cache and the tables a run reuses
-- (out, rules, mends, notrule), lives from one run to the next, a run
-- being a call of take; as a script (EVAL, the fallback) it is all made
-- again at every run, closures, upvalues and tables, which Redis pays
-- for in every run. Loading a library sees no global but redis, and of it only
-- register_function: the globals a run needs are bound at the first run,
-- and KEYS and ARGV are the run's, set by take.
local evalkeys, evalargv -- as a script: the run's KEYS and ARGV
if not redis.register_function then evalkeys, evalargv = KEYS, ARGV end
local KEYS, ARGV

local P26 = 67108864 -- 2^26
local P52 = 4503599627370496 -- 2^52
-- struct.pack, struct.unpack, math.floor, redis.call, string.byte
local spack, sunpack, floor, call, byte

-- floor(a/b) for integers |a| < 2^53, b > 0, corrected for the rounding of
-- the float quotient.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

-- CHARGE: how a rule is charged (a rule's charge, in its modes byte).
-- GATE is all-or-nothing: a check is charged only when the whole request
-- passes, and only what fits; a cost of 0 peeks. USAGE and COUNT record
-- usage after the fact: a cost is recorded whether it fits or not (the
-- check allows iff it fits), in the request that denies too, into a debt
-- capped at a period's worth (a bucket's debt at two full buckets', a
-- window's count and a log's units at 2·Rate), and never given back. A
-- check of cost 0 records nothing and allows iff one unit fits (USAGE)
-- or the limit is not in debt (COUNT); asked is the cost it is decided
-- as. Only the general path knows them: the one-byte paths serve GATE
-- rules alone (see fastRule in store.go).
local GATE, USAGE = 0, 1
local function asked(n, charge)
  if n == 0 and charge == USAGE then return 1 end
  return n
end

-- wrecord is a window's count after usage of n (n >= 0) is recorded into
-- count, capped at twice the rate: a count already past the cap, left by
-- a higher rate under the same rule's name, is kept.
local function wrecord(count, n, rate)
  local cap = 2 * rate
  if count >= cap then return count end
  if n > cap - count then return cap end
  return count + n
end

-- A run's state, set by take.
-- The reply, out[1..nout]. Its table is kept from run to run, as a
-- function: its array part then grows once rather than at every run, and
-- what a longer run left past this one's end is cleared at the end (every
-- writer writes out from 1 without gaps).
local out, nout = {}, 0
local reqs, pos -- ARGV[1], and in it the position of the next request
local rules = {} -- the run's rules, by index (kept: a run reads only its own)

-- The rules as tables, unpacked once per record: as a function, once for
-- the runs to come (forgotten all at once past 256 records; a store names
-- few). A rule's table is read only.
local rcache, nrcache = {}, 0

-- The clock: the latest time the store has decided at, kept in KEYS[1] so
-- that no decision is made at an earlier time, whatever Redis TIME does.
-- With it no key needs a time of its own, and a fixed window can be a
-- plain counter per window. The first request of a run sets it and reads
-- the old one in one call (SET ... GET), and puts the old one back in the
-- rare run that finds it ahead of Redis TIME.
local ki -- next key
-- The head's fields (see ARGV[1]). nodemode: a run on one node of a
-- Cluster for keys of any of its slots: they come in ARGV after the rules
-- (Redis would refuse KEYS of several slots), and each request is decided
-- under pcall, so that a key the node no longer holds (a slot moved) fails
-- that request alone, before it wrote anything, with a reply of -2 (see
-- moved). take sets them all.
local nodemode
local clockon, receipts, giving
local clock, clocked -- clocked: set after the first write
local ahead -- set when the clock was ahead of the run's first time
local CLOCKTTL = '86400000' -- ms: a day

local redisnow -- Redis TIME in µs, once read
local REDISTIME = 9007199254740992 -- 2^53 as now: read Redis TIME

-- at is the time of a request sent with now.
-- theirs is set by at when the request's time is its caller's: neither
-- Redis's nor the store's clock.
local theirs
local function at(now)
  theirs = now ~= REDISTIME and not clockon
  if now == REDISTIME then
    if not redisnow then
      local t = call('TIME')
      redisnow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = redisnow
  end
  if not clockon then return now end
  if not clock then
    local raw = call('SET', KEYS[1], spack('<d', now), 'PX', CLOCKTTL, 'GET')
    if raw then
      local old = sunpack('<d', raw)
      if old > now then
        call('SET', KEYS[1], raw, 'PX', CLOCKTTL)
        now, ahead = old, true
      end
    end
    clock = now
  elseif now < clock then
    now = clock
  elseif now > clock then
    clock, clocked = now, true
  end
  return now
end

-- Kind 5: a key per window, its value the window's count, an integer that
-- INCRBY charges and DECRBY gives back. window returns the key of the
-- window holding now, for the key base, and how far into it now is; the
-- window's start, the key's suffix, is formatted once per period and time
-- (kept from run to run as a function: it is checked against now).
local wcache = {}
local function window(base, now, p, unit)
  local w = wcache[p]
  if not w or w[1] ~= now then
    local k = fdiv(now, p)
    w = {now, now - k * p, string.format('%.0f', k * p / unit)}
    wcache[p] = w
  end
  return base .. w[3], w[2]
end

-- a*b for 0 <= a, b < 2^52 as hi*2^52 + lo, 0 <= lo < 2^52.
local function mul(a, b)
  local a1 = floor(a / P26)
  local a0 = a - a1 * P26
  local b1 = floor(b / P26)
  local b0 = b - b1 * P26
  local mid = a1 * b0 + a0 * b1
  local m1 = floor(mid / P26)
  local lo = a0 * b0 + (mid - m1 * P26) * P26
  local hi = a1 * b1 + m1
  if lo >= P52 then
    lo = lo - P52
    hi = hi + 1
  end
  return hi, lo
end

local function less(h1, l1, h2, l2)
  return h1 < h2 or (h1 == h2 and l1 < l2)
end

-- prev*r < m*p, exactly.
local function fits(prev, r, m, p)
  local h1, l1 = mul(prev, r)
  local h2, l2 = mul(m, p)
  return less(h1, l1, h2, l2)
end

-- The one-byte requests (see ARGV[1]'s shape) are decided a stretch at
-- a time: the requests of one rule in a row, which in the commonest run
-- is all of them, with the rule's fields and the run's time in locals, so
-- that a request costs its redis.call and little else (upto finds the
-- stretch).
-- Each stretch function decides requests i to e, all of rule r, each at
-- key KEYS[ki], ki moving on; appends one number per request to the reply;
-- and returns e + 1, the next request.
-- shape is ARGV[1], the run's shape from shape[soff + 1] on; fastnow is
-- the time of its one-byte requests.
local shape, soff, fastnow

-- setstate writes a key's state with ttl, a rule's TTL in ms as a string
-- ('' for none), as every state but the sliding log's list is written.
local function setstate(key, state, ttl)
  if ttl == '' then
    call('SET', key, state)
  else
    call('SET', key, state, 'PX', ttl)
  end
end

-- bttl is the TTL of a bucket's state of debt D under rule r: a debt past
-- a full bucket's, which only usage records, takes longer to drain.
local function bttl(r, D)
  if D > r.a1 then return r.dttl end
  return r.ttl
end

-- cstretch decides single units from a sliding window counter (kind 3,
-- Rate below 2^25, with the store's clock) at now, as counter does: it
-- reads the state and writes it only if allowed (a denial changes nothing
-- that a later read does not roll the same way). Its number is the counts
-- the decision was made from, rolled to now's window, as (prev·(Rate+1) +
-- curr)·2, plus 1 if allowed: the Go side makes the Decision from them
-- (expandCounter). Or -3, deciding nothing, for a state this path cannot
-- decide from: one last written after now, which only a lost clock
-- allows, or counts above the rate, left by a higher rate under the same
-- rule's name. The Go side decides that request again on the general path
-- (which reads the time as the state's, and any counts).
local function cstretch(r, i, e)
  local rate, p, ttl, now = r.a1, r.a2, r.ttl, fastnow
  local k = fdiv(now, p)
  local off = p - (now - k * p) -- of the window's P, what is still ahead
  for _ = i, e do
    local key = KEYS[ki]
    ki = ki + 1
    local raw = call('GET', key)
    local prev, curr, v = 0, 0, nil
    if raw then
      local win, p0, c0, last = sunpack('dddd', raw)
      if last > now then
        v = -3
      else
        if k == win then
          prev, curr = p0, c0
        elseif k == win + 1 then
          prev = c0
        end
        -- counted under a higher rate of the same rule's name: more than
        -- the answer can pack
        if prev > rate or curr > rate then v = -3 end
      end
    end
    if not v then
      v = (prev * (rate + 1) + curr) * 2
      if curr < rate and fits(prev, off, rate - curr, p) then
        v = v + 1
        setstate(key, spack('dddd', k, prev, curr + 1, now), ttl)
      end
    end
    nout = nout + 1
    out[nout] = v
  end
  return e + 1
end

-- bstretch decides single units from a bucket (a rule of Burst >= 1) at
-- now. It writes first, optimistically, the state of a bucket that was
-- idle, and reads the old one in the same call (SET ... GET): a key that
-- was absent, the common case for keys many and idle, costs one call.
-- Otherwise it decides from the old state, as bcore does, and writes again
-- if the guess was wrong. Its number is the debt after, times 2, plus 1 if
-- allowed.
local function bstretch(r, i, e)
  local span, pt, m, ttl, now = r.a1, r.a2, r.a3, r.ttl, fastnow
  local drains = r.a5 ~= 0
  local idle = spack('dd', now, pt) -- the guess, the same for every key
  for _ = i, e do
    local key = KEYS[ki]
    ki = ki + 1
    local raw
    if ttl == '' then
      raw = call('SET', key, idle, 'GET')
    else
      raw = call('SET', key, idle, 'PX', ttl, 'GET')
    end
    local v = pt * 2 + 1
    if raw then
      local t0, D0 = sunpack('dd', raw)
      local t, D = now, 0
      if t < t0 then t = t0 end
      if not drains then
        D = D0
      elseif t - t0 < D0 / m + 1 then -- else el*m might not be exact: D is 0
        D = D0 - (t - t0) * m
        if D < 0 then D = 0 end
      end
      local after = D
      v = D * 2
      if D + pt <= span then
        after = D + pt
        v = after * 2 + 1
      end
      if t ~= now or after ~= pt then
        setstate(key, spack('dd', t, after), bttl(r, after))
      end
    end
    nout = nout + 1
    out[nout] = v
  end
  return e + 1
end

-- A sliding log (kind 4) is one list: its anchor, then its entries, oldest
-- first. An entry is one push of units at a µs: spack('d', at) for one
-- unit, spack('dd', at, n) for n > 1. The anchor is an entry that left
-- the window, the last a trim left (a list starts with ANCHOR, a time that
-- left every window; the entries after it may have left too, until a
-- trim), or a record written over it, spack('ddd', at, x, last), when
-- it has more to keep (see anchor): x, the units of the entries after it
-- beyond one an entry, and last, the latest time decided at when a
-- decision that pushed nothing made it later than every entry's (NOLAST
-- for none; a push at a caller's time writes its time there too). So the
-- count is the number of entries after the anchor, less those that left
-- the window, plus x less theirs: a push's RPUSH answers it, and an
-- allowed one-unit decision reads only the anchor and the oldest entries
-- (see lstretch). The time of the anchor, of the newest entry and
-- last bound the time decided at last: a time before them is read as
-- that time (see slog).
--
-- Its key expires lazily. The rule's TTL is a span (a3, some Periods)
-- plus a Period and the slack. The one-unit path sets it by a push whose
-- oldest entry in the window is of another aligned span than the push's
-- time, or that finds none, and leaves it alone otherwise: a busy log's
-- pushes in the first Period of each span. The first push of each span is
-- among them, and sets it at the span's start or after, which keeps the
-- key a Period and the slack past every entry the span pushes; and an
-- idle log goes within the span, a Period and the slack. The general path,
-- whose time may not run as Redis's does, sets it at every decision. (A
-- store's clock ahead of Redis's by more than the slack, and then back in
-- step, may see a key go that much early: the bound of every key's TTL,
-- see idleSlack in params.go.)
local ANCHOR -- spack('d', -2^53): a time that left every window
-- The one-unit path trims the entries that left the window once there are
-- LOGTRIM of them, rather than at every push: a busy log's push makes
-- about one leave, so it trims every other push, and reads one entry more.
local LOGTRIM = 2
local P53 = 9007199254740992
local NOLAST = -P53

-- entry is the entry of n units at t.
local function entry(t, n)
  if n == 1 then return spack('d', t) end
  return spack('dd', t, n)
end

-- unentry returns an entry's time and units.
local function unentry(raw)
  if #raw == 8 then return (sunpack('d', raw)), 1 end
  local t, n = sunpack('dd', raw)
  return t, n
end

-- anchor is the anchor at time t with x and last: an entry of one unit
-- when x is 0 and last says nothing t does not.
local function anchor(t, x, last)
  if x == 0 and last <= t then return spack('d', t) end
  return spack('ddd', t, x, last)
end

-- unanchor returns an anchor's time, x and last.
local function unanchor(raw)
  if #raw == 24 then
    local t, x, last = sunpack('ddd', raw)
    return t, x, last
  end
  return (sunpack('d', raw)), 0, NOLAST
end

-- logread reads the log at key at now, p its Period. It returns nothing
-- for no list; else the anchor's time, x and last; L, the number of
-- entries after the anchor that have left the window, lx their units
-- beyond one an entry, and the time of the last of them (the anchor's if
-- L is 0); and the time of the first entry in the window, or false; and,
-- when it read the list to its end, the list's length and its last
-- element. (The anchor itself may be in the window: a time before the
-- last trim's, which its caller checks.)
local function logread(key, now, p)
  local batch = call('LRANGE', key, 0, LOGTRIM + 1)
  if #batch == 0 then return end
  local at, x, last = unanchor(batch[1])
  local L, lx, lat, fat = 0, 0, at, false
  local from, j, k, nraw = 0, 2, LOGTRIM + 2, batch[#batch]
  while true do
    for q = j, #batch do
      local t, n = unentry(batch[q])
      if now - t < p then
        fat = t
        break
      end
      L, lx, lat = L + 1, lx + n - 1, t
    end
    if fat or #batch < k then break end
    from, j, k = from + k, 1, 32
    batch = call('LRANGE', key, from, from + 31)
    if #batch > 0 then nraw = batch[#batch] end
  end
  if #batch < k then -- read to its end: its length and last element too
    return at, x, last, L, lx, lat, fat, from + #batch, nraw
  end
  return at, x, last, L, lx, lat, fat
end

-- logtrim drops the L > 0 entries of the log at key that left the window,
-- the last of them, of time lat, becoming the anchor, with x and last:
-- written over only if it has more to say than its time (an entry of
-- several units reads as an anchor of its time, x 0 and no last).
local function logtrim(key, L, lat, x, last)
  call('LTRIM', key, L, -1)
  if x ~= 0 or last > lat then call('LSET', key, 0, anchor(lat, x, last)) end
end

-- lstretch decides single units from sliding logs (kind 4, Period below
-- 2^26 µs, with the store's clock) at now, as slog does. Its number is,
-- if allowed, the count after, times 2, plus 1; if denied, (retry·2^26 +
-- reset)·2, the µs until the oldest entry and the newest leave the window,
-- both at most the Period. A push comes first, its RPUSH answering the
-- count, and a denial takes it back (RPOP) and reads the newest entry;
-- but a list its first LRANGE read whole is counted from that read, and
-- denied with no push.
-- Or -3, deciding and writing nothing but a trim, for what this path does
-- not decide: a time before the last decided at (a lost clock: an anchor
-- still in the window, or a later last, which a push at a caller's time
-- writes, see logcommit; on a denial, a newest entry newer than now), a
-- run's time held back by the clock, ahead of Redis TIME (the TTLs set
-- once a span assume that time runs as Redis's does), or counts above the
-- rate (a rate lowered under the same rule's name). The general path then
-- decides as slog does.
local function lstretch(r, i, e)
  local rate, p, span, ttl, now = r.a1, r.a2, r.a3, r.ttl, fastnow
  if ahead then
    for _ = i, e do
      nout = nout + 1
      out[nout] = -3
    end
    ki = ki + e - i + 1
    return e + 1
  end
  local unit, nowspan = entry(now, 1), fdiv(now, span)
  for _ = i, e do
    local key = KEYS[ki]
    ki = ki + 1
    local v = -3
    local at, x, last, L, lx, lat, fat, len, nraw = logread(key, now, p)
    if not at then
      call('RPUSH', key, ANCHOR, unit)
      call('PEXPIRE', key, ttl)
      v = 3
    elseif now - at >= p and last <= now and len and len - 1 - L + x - lx >= rate then
      -- The whole list was read, and it is full: a denial with no push.
      if len - 1 - L + x - lx == rate and fat then
        local nat = unentry(nraw)
        if nat <= now then v = ((fat + p - now) * P26 + (nat + p - now)) * 2 end
      end
    elseif now - at >= p and last <= now then
      if L >= LOGTRIM then
        x = x - lx
        logtrim(key, L, lat, x, last)
        L, lx = 0, 0
      end
      local count = call('RPUSH', key, unit) - 2 - L + x - lx
      if count < rate then
        if not fat or fdiv(fat, span) ~= nowspan then call('PEXPIRE', key, ttl) end
        v = count * 2 + 3
      else
        call('RPOP', key)
        if count == rate and fat then
          local nat = unentry(call('LINDEX', key, -1))
          if nat <= now then v = ((fat + p - now) * P26 + (nat + p - now)) * 2 end
        end
      end
    end
    nout = nout + 1
    out[nout] = v
  end
  return e + 1
end

-- wkey returns how to mend the keys of rule r's one-byte requests, which
-- come with the window the client guessed from its own clock (the head's
-- guess),
-- for the window at now, the run's time: false when the guess was right,
-- as it nearly always is, so that the script makes no string per request;
-- else the length of the guessed start and the right one.
local guess -- the head's guess
local function wkey(r, now)
  local p = r.a2
  local k, g = fdiv(now, p), fdiv(guess, p)
  if k == g then return false end
  return {#string.format('%.0f', g * p / r.a3), string.format('%.0f', k * p / r.a3)}
end

-- loadgeneral defines what the requests not in one byte need, in the
-- first run that has any (as a script: in each such run), so that a run of
-- one-byte requests alone never makes them. It returns decide, which
-- decides the next request of reqs.
local function loadgeneral()
  ---------------------------------------------------------------------------
  -- Bucket (token, leaky, GCRA). State: the last time seen, in µs, and the
  -- debt then, in units of h/q ns. m units make a µs; a request unit costs pt
  -- units; span is a full bucket's debt. A time before the last one seen is
  -- read as the last one seen.
  --
  -- usns is y units of debt (y > 0, q > 0) as a wait in µs and ns, the
  -- ns rounded up.
  local function usns(y, m, h, q)
    local us = fdiv(y, m)
    return us, -fdiv(-(y - us * m) * h, q)
  end

  -- bcore decides without tables: has, t0, D0 the state if any (the last
  -- time seen and the debt then), charge the rule's (see CHARGE). It
  -- returns the decision's six values, the write (0 nothing, 1 SET the
  -- state (now, after) with the reset as TTL, 2 DEL), the time and the
  -- debt after.
  local function bcore(span, pt, m, h, q, burst, has, t0, D0, now, n, charge)
    local D = 0
    if has then
      if now < t0 then now = t0 end
      if q == 0 then
        D = D0
      else
        local el = now - t0
        if el < D0 / m + 1 then -- else el*m might not be exact: D is 0
          D = D0 - el * m
          if D < 0 then D = 0 end
        end
      end
    end
    local ok, rem, rus, rns, zus, zns = 0, 0, 0, 0, 0, 0
    local after = D
    if n < 0 then
      rus = -1
    elseif charge ~= GATE then
      local want = asked(n, charge)
      if want <= burst and D + want * pt <= span then ok = 1 end
      if n > 0 and ok == 1 then
        after = D + n * pt
      elseif n > 0 and q ~= 0 then -- recorded, up to the cap; Rate 0 would never drain it
        local cap = 2 * span
        if D < cap then
          after = D + n * pt -- inexact only far past the cap
          if after > cap then after = cap end
        end
      end
      if ok == 1 then -- no wait
      elseif want > burst or q == 0 then
        rus = -1
      else -- for the same check, on the debt after this one
        rus, rns = usns(after + want * pt - span, m, h, q)
      end
    elseif n > burst then
      rus = -1
    elseif n == 0 then
      ok = 1 -- a peek: nothing to take, even from an empty bucket
    else
      local need = n * pt
      if D + need <= span then
        ok = 1
        after = D + need
      elseif q == 0 then
        rus = -1
      else
        rus, rns = usns(D + need - span, m, h, q)
      end
    end
    if after <= span then rem = fdiv(span - after, pt) end
    if after == 0 then
      if has then return ok, rem, rus, rns, 0, 0, 2, now, 0 end -- idle: forget it
      return ok, rem, rus, rns, 0, 0, 0, now, 0
    end
    if q == 0 then
      zus = -1
    else
      zus, zns = usns(after, m, h, q)
    end
    if not has or t0 ~= now or D0 ~= after then
      return ok, rem, rus, rns, zus, zns, 1, now, after
    end
    return ok, rem, rus, rns, zus, zns, 0, now, after
  end

  -- put6 appends a check's decision to the reply.
  local function put6(ok, rem, rus, rns, zus, zns)
    out[nout + 1], out[nout + 2], out[nout + 3] = ok, rem, rus
    out[nout + 4], out[nout + 5], out[nout + 6] = rns, zus, zns
    nout = nout + 6
  end

  -- costs as redis.call arguments: a string, since Redis would format a number.
  local function arg(n)
    if n == 1 then return '1' end
    return string.format('%.0f', n)
  end

  -- wtake charges n to a window key, or not at all if the window has no room
  -- for them: it returns whether it did and the count after.
  local function wtake(key, r, n)
    local a = arg(n)
    local c = call('INCRBY', key, a)
    if c == n then call('PEXPIRE', key, r.ttl) end -- new: its window's first
    if c > r.a1 then
      call('DECRBY', key, a)
      return false, c - n
    end
    return true, c
  end

  -- wcount is a window key's count.
  local function wcount(key)
    local v = call('GET', key)
    if v then return tonumber(v) end
    return 0
  end

  -- wrecordkey records usage of n > 0 into a window key, as wrecord
  -- caps it, and returns the count before and after.
  local function wrecordkey(key, r, n)
    local cap = 2 * r.a1
    if cap == 0 then -- Rate 0 records nothing
      local c = wcount(key)
      return c, c
    end
    local add = n
    if add > cap then add = cap end
    local c = call('INCRBY', key, arg(add))
    if c == add then call('PEXPIRE', key, r.ttl) end -- new: its window's first
    local before = c - add
    if c > cap then
      local back = c - cap
      if back > add then back = add end -- a count past the cap is kept
      call('DECRBY', key, arg(back))
      c = c - back
    end
    return before, c
  end

  -- wdecision is kind 5's decision: the six values of the reply.
  local function wdecision(r, ok, count, off, never)
    local p = r.a2
    local rus, zus = 0, 0
    if never then
      rus = -1
    elseif not ok then
      rus = p - off
    end
    if count > 0 then zus = p - off end
    local rem = r.a1 - count
    if rem < 0 then rem = 0 end -- a rate lowered under the same name
    return ok and 1 or 0, rem, rus, 0, zus, 0
  end

  -- wone decides one kind 5 check.
  local function wone(r, base, now, n)
    local key, off = window(base, now, r.a2, r.a3)
    if r.charge ~= GATE and n >= 0 then
      local want, before, count = asked(n, r.charge), nil, nil
      if n > 0 then
        before, count = wrecordkey(key, r, n)
      else
        before = wcount(key)
        count = before
      end
      local ok = want <= r.a1 - before
      return wdecision(r, ok, count, off, not ok and want > r.a1)
    end
    if n < 0 or n > r.a1 then
      return wdecision(r, false, wcount(key), off, true)
    elseif n == 0 then
      return wdecision(r, true, wcount(key), off, false)
    end
    local ok, count = wtake(key, r, n)
    return wdecision(r, ok, count, off, false)
  end
  -- floor(a*b/c) and the remainder, for a, b, c < 2^52 and a quotient < 2^51.
  local function muldiv(a, b, c)
    local hi, lo = mul(a, b)
    local q = floor((hi * P52 + lo) / c)
    while true do
      local qh, ql = mul(q, c)
      if less(hi, lo, qh, ql) then
        q = q - 1
      else
        local r = (hi - qh) * P52 + (lo - ql)
        if r < c then return q, r end
        q = q + 1
      end
    end
  end

  -- put writes check c's state with its rule's TTL.
  local function put(c, state)
    setstate(c.key, state, c.r.ttl)
  end

  ---------------------------------------------------------------------------
  -- Each step decides a check c at now for cost n without writing, and
  -- returns d: the decision in d[1..6], as replied, and what to write in
  -- d[7..]: d[7] 0 nothing, 1 SET d[8] with a TTL of d[9] µs d[10] ns,
  -- 2 DEL, 3 the log's writes (logcommit, which reads d[8..18] as slog
  -- sets them).

  -- Bucket: bcore as a step.
  local function bucket(c, now, n)
    local st = c.st
    local has, t0, D0 = false, 0, 0
    if st then has, t0, D0 = true, st[1], st[2] end
    local r = c.r
    local ok, rem, rus, rns, zus, zns, w, t, after =
      bcore(r.a1, r.a2, r.a3, r.a4, r.a5, r.a6, has, t0, D0, now, n, r.charge)
    local d = {ok, rem, rus, rns, zus, zns, w, false, zus, zns}
    if w == 1 then d[8] = spack('dd', t, after) end
    d[15], d[16] = t, after
    return d
  end

  ---------------------------------------------------------------------------
  -- Windows, in µs: [k*P, (k+1)*P) from the Unix epoch.

  local function locate(now, p)
    local k = fdiv(now, p)
    return k, now - k * p
  end

  -- Fixed window. State: window, count, last.
  local function fixed(c, now, n)
    local rate, p = c.r.a1, c.r.a2
    local st = c.st
    local win, count = nil, 0
    if st then
      if now < st[3] then now = st[3] end
      win, count = st[1], st[2]
    end
    local k, off = locate(now, p)
    if k ~= win then count = 0 end
    local d = {0, 0, 0, 0, 0, 0, 0, false, 0, 0}
    local charge = c.r.charge
    if charge ~= GATE and n >= 0 then
      local want = asked(n, charge)
      if want <= rate - count then d[1] = 1 end
      count = wrecord(count, n, rate)
      if d[1] == 1 then -- no wait
      elseif want > rate then
        d[3] = -1
      else
        d[3] = p - off
      end
    elseif n < 0 or n > rate then
      d[3] = -1
    elseif n == 0 or n <= rate - count then -- a peek, even past the rate (usage's)
      d[1] = 1
      count = count + n
    else
      d[3] = p - off
    end
    d[2] = rate - count
    if d[2] < 0 then d[2] = 0 end -- a rate lowered under the same name
    if count > 0 then
      d[5] = p - off
      if not st or st[1] ~= k or st[2] ~= count or st[3] ~= now then
        d[7], d[8], d[9] = 1, spack('ddd', k, count, now), d[5]
      end
    elseif st then
      d[7] = 2
    end
    d[15] = now -- the time decided at, for a receipt
    return d
  end

  -- The least offset into a window after one of prev at which n more fit,
  -- as µs and ns (ns in [0, 1000)); nil when no offset in the window does.
  -- n fit at off iff prev*(P-off) < (rate-curr-n+1)*P; over ns offsets that
  -- is off = floor(1000*P*(prev-m)/prev) + 1.
  local function firstfit(rate, p, prev, curr, n)
    local m = rate - curr - n + 1
    if m <= 0 then return nil end
    if prev < m then return 0, 0 end
    local Q, R = muldiv(p, prev - m, prev)
    local s = fdiv(1000 * R, prev) + 1
    if s == 1000 then
      Q = Q + 1
      s = 0
    end
    if Q >= p then return nil end
    return Q, s
  end

  -- Sliding window counter. State: window, prev, curr, last.
  local function counter(c, now, n)
    local rate, p = c.r.a1, c.r.a2
    local st = c.st
    local win, prev, curr = nil, 0, 0
    if st then
      if now < st[4] then now = st[4] end
      win, prev, curr = st[1], st[2], st[3]
    end
    local k, off = locate(now, p)
    if win == nil then
      prev, curr = 0, 0
    elseif k == win + 1 then
      prev, curr = curr, 0
    elseif k ~= win then
      prev, curr = 0, 0
    end
    local d = {0, 0, 0, 0, 0, 0, 0, false, 0, 0}
    local charge, want = c.r.charge, n
    if charge ~= GATE and n >= 0 then
      want = asked(n, charge)
    end
    local m = rate - curr - want + 1
    if n < 0 or want > rate then
      d[3] = -1
    elseif (n == 0 and charge == GATE) or (m > 0 and fits(prev, p - off, m, p)) then
      d[1] = 1
      if charge == GATE then curr = curr + n end
    end
    if charge ~= GATE and n > 0 then curr = wrecord(curr, n, rate) end
    if d[1] == 0 and d[3] ~= -1 then
      -- the wait for the same check on the state after it
      local us, ns = firstfit(rate, p, prev, curr, want)
      if us then
        d[3], d[4] = us - off, ns
      else
        us, ns = firstfit(rate, p, curr, 0, want)
        if us then
          d[3], d[4] = p - off + us, ns
        else
          d[3] = 2 * p - off
        end
      end
    end
    local est = 0
    if prev > 0 then est = muldiv(prev, p - off, p) end
    local rem = rate - curr - est
    if rem < 0 then rem = 0 end
    d[2] = rem
    if curr > 0 then
      d[5] = 2 * p - off
    elseif prev > 0 then
      d[5] = p - off
    end
    if d[5] > 0 then
      if not st or st[1] ~= k or st[2] ~= prev or st[3] ~= curr or st[4] ~= now then
        d[7], d[8], d[9] = 1, spack('dddd', k, prev, curr, now), d[5]
      end
    elseif st then
      d[7] = 2
    end
    d[15] = now -- the time decided at, for a receipt
    return d
  end

  ---------------------------------------------------------------------------
  -- Sliding log: one list, its anchor and its entries (see logread). A
  -- time before the last decided at, the anchor's (a trim's), the newest
  -- entry's or the anchor's last, is read as that time. As time may not
  -- run here as Redis's does (the callers' clocks, or one read as a later
  -- time), every decision on a log with units in the window sets its
  -- TTL, as the one-unit path's once a span does not.

  local function slog(c, now, n)
    local rate, p, key = c.r.a1, c.r.a2, c.key
    local at, x, last, L, lx, lat, fat, len, nraw = logread(key, now, p)
    local nat, latest = NOLAST, NOLAST
    if not at then
      x, last, L, lx, len = 0, NOLAST, 0, 0, 0
    else
      if not len then
        len = call('LLEN', key)
        nraw = call('LINDEX', key, -1)
      end
      if len > 1 then nat = unentry(nraw) end
      latest = last
      if nat > latest then latest = nat end
      if now - at < p or latest > now then
        if latest > now then now = latest end
        if now - at < p then now = at + p end -- the anchor's
        at, x, last, L, lx, lat, fat = logread(key, now, p)
      end
    end
    local count = 0
    if at then count = len - 1 - L + x - lx end
    local d = {0, 0, 0, 0, 0, 0, 0, false, 0, 0}
    local charge, want = c.r.charge, n
    if charge ~= GATE and n >= 0 then want = asked(n, charge) end
    if n < 0 or want > rate then
      d[3] = -1
    elseif (n == 0 and charge == GATE) or count + want <= rate then
      d[1] = 1
    end
    -- add: the units pushed at now. A usage charge's are recorded up to the
    -- cap; when the log already holds Rate entries in the window, into the
    -- newest entry, moved to now (merge: its units), as the memory store
    -- does in its ring of Rate cells: later, never earlier, leaves no
    -- unit out.
    local add, merge = 0, false
    if charge == GATE then
      if d[1] == 1 then add = n end
    elseif n > 0 and count < 2 * rate then
      add = n
      if add > 2 * rate - count then add = 2 * rate - count end
      if len - 1 - L >= rate then
        local _, u = unentry(nraw)
        merge = u
      end
    end
    if d[1] == 0 and d[3] == 0 then
      -- Units leave oldest first: the wait is until the entry through
      -- which need units have left does, need being at most the count
      -- after the push, whose units leave last, a Period from now.
      local need, from, upto = count + add + want - rate, L + 1, len - 1
      if merge then upto = len - 2 end
      while d[3] == 0 and from <= upto do
        local to = from + 31
        if to > upto then to = upto end
        local batch = call('LRANGE', key, from, to)
        for j = 1, #batch do
          local t, u = unentry(batch[j])
          need = need - u
          if need <= 0 then
            d[3] = t + p - now
            break
          end
        end
        if #batch < 32 then break end
        from = from + 32
      end
      if d[3] == 0 then d[3] = p end
    end
    local push = add > 0
    count = count + add
    d[2] = rate - count
    if d[2] < 0 then d[2] = 0 end -- a rate lowered under the same name
    if push then
      d[5] = p
      d[7], d[9] = 3, 1
    elseif fat then
      d[5] = nat + p - now
      -- the time decided at, if later than any the log holds
      d[7], d[9], d[8] = 3, 0, now > latest
    elseif at then
      d[7] = 2 -- every entry left the window: the list goes
    end
    -- what logcommit writes from
    d[10], d[12], d[13], d[14], d[17], d[18] = L, lat, x - lx, last, at or false, x
    d[11], d[19] = add, merge
    d[15] = now -- the time decided at, for a receipt
    return d
  end

  -- logcommit writes what slog decided (d) at d[15]: the push of d[11]
  -- units (into the newest entry, of d[19] units, if not false), with the
  -- trim of the entries that left, or the time decided at as the
  -- anchor's last.
  local function logcommit(c, d)
    local key, now = c.key, d[15]
    if d[9] == 1 then
      local L, lat, x, last, at, n, merge = d[10], d[12], d[13], d[14], d[17], d[11], d[19]
      -- A push at a caller's time may be ahead of the time of the
      -- one-unit path (a store at the store's clock on the same keys),
      -- which reads no newest entry: the anchor keeps it as the latest
      -- time decided at, which that path checks, so that it never pushes
      -- before it.
      local was = last
      if theirs and now > last then last = now end
      -- the anchor's x grows by the units beyond one of the entry pushed,
      -- or by all of them, merged
      local grow = n - 1
      if merge then grow = n end
      if not at then
        call('RPUSH', key, anchor(-P53, grow, last), entry(now, n))
      else
        if L > 0 then
          logtrim(key, L, lat, x + grow, last)
        elseif grow ~= 0 or last ~= was then
          call('LSET', key, 0, anchor(at, x + grow, last))
        end
        if merge then
          call('LSET', key, -1, entry(now, merge + n))
        else
          call('RPUSH', key, entry(now, n))
        end
      end
    elseif d[8] then
      call('LSET', key, 0, anchor(d[17], d[18], now))
    end
    call('PEXPIRE', key, c.r.ttl)
  end

  ---------------------------------------------------------------------------
  -- Fixed window, a key per window (kind 5). It charges as it decides (d[7]
  -- 4): a request that does not pass gives the charge back. Usage is
  -- recorded as it is decided too (wone), and never given back.
  local function wfixed(c, now, n)
    local r = c.r
    local key, off = window(c.key, now, r.a2, r.a3)
    c.wkey = key
    local d = {0, 0, 0, 0, 0, 0, 0, false, 0, 0}
    local ok, count, never = true, 0, false
    if r.charge ~= GATE and n >= 0 then -- recorded, never given back
      d[1], d[2], d[3], d[4], d[5], d[6] = wone(r, c.key, now, n)
      d[15] = now
      return d
    elseif n < 0 or n > r.a1 then
      ok, count, never = false, wcount(key), true
    elseif n == 0 then
      count = wcount(key)
    else
      ok, count = wtake(key, r, n)
      if ok then d[7] = 4 end
    end
    d[1], d[2], d[3], d[4], d[5], d[6] = wdecision(r, ok, count, off, never)
    d[11], d[12] = count, off
    d[15] = now -- the time decided at, for a receipt: it names the window
    return d
  end

  local steps = {bucket, fixed, counter, slog, wfixed}
  local unpackfmt = {'dd', 'ddd', 'dddd'} -- the states of kinds 1 to 3
  -- checks[1..k] are the current request's checks, their tables reused
  -- from one request to the next.
  local checks = {}
  local function check(i)
    local c = checks[i]
    if not c then
      c = {}
      checks[i] = c
    end
    return c
  end

  -- open sets check c to rule ri, with the next keys, and reads its state.
  local function open(c, ri)
    local r = rules[ri]
    c.r, c.kind, c.shadow = r, r.kind, r.shadow == 1
    c.key, c.st, c.d = KEYS[ki], false, false
    ki = ki + 1
    if c.kind <= 3 then -- the log reads its list itself, kind 5 its window's key
      local raw = call('GET', c.key)
      if raw then c.st = {sunpack(unpackfmt[c.kind], raw)} end
    end
  end

  -- write makes check c's writes that a step's decision d says.
  local function write(c, d)
    local w = d[7]
    if w == 1 and c.kind == 1 then
      setstate(c.key, d[8], bttl(c.r, d[16]))
    elseif w == 1 then
      put(c, d[8])
    elseif w == 2 then
      call('DEL', c.key)
    elseif w == 3 then
      logcommit(c, d)
    end
  end

  local function multi(now, k)
    for i = 1, k do
      local c = check(i)
      local ri
      ri, c.n, pos = sunpack('<dd', reqs, pos)
      open(c, ri)
    end

    -- Phase 1: decide every check as if it were charged; the request passes
    -- iff every check not in shadow mode allows.
    local ok = true
    for i = 1, k do
      local c = checks[i]
      c.d = steps[c.kind](c, now, c.n)
      if c.d[1] == 0 and not c.shadow then ok = false end
    end

    -- Phase 2: charge the allowing checks if the request passes; if not, a
    -- gate check that would allow, shadow or not, reports a peek and is
    -- not charged. A usage check is recorded either way (see CHARGE).
    for i = 1, k do
      local c = checks[i]
      local d = c.d
      if not ok and d[1] == 1 and c.r.charge == GATE then
        if c.kind == 5 then
          if d[7] == 4 then
            call('DECRBY', c.wkey, arg(c.n))
            d[11] = d[11] - c.n
          end
          local p = {wdecision(c.r, true, d[11], d[12], false)}
          d = {p[1], p[2], p[3], p[4], p[5], p[6], 0}
        else
          d = steps[c.kind](c, now, 0)
        end
      end
      write(c, d)
      put6(d[1], d[2], d[3], d[4], d[5], d[6])
      if receipts then
        out[nout + 1], out[nout + 2] = d[15] or 0, d[16] or 0
        nout = nout + 2
      end
    end
  end

  ---------------------------------------------------------------------------
  -- Give back (flavour 2). A request split across slots was taken slot by
  -- slot (flavour 1); when a slot's part denies, the parts that were charged
  -- are given back here, on their own node, so that the request as a whole
  -- charged nothing. A give-back never mints: it takes off no more than is
  -- left of the take's charge had nothing else happened since, t1 being the
  -- time the take decided at. Then each check reports a peek, which is what
  -- it would have reported in a denied request decided in one run.

  -- A bucket: what is left of the take's charge at now is its debt after
  -- (x) drained since t1, at most the charge; the bucket's debt now holds
  -- at least that much of it.
  local function unbucket(c, now, n, t1, x)
    local st, r = c.st, c.r
    if not st then return end -- idle since: the charge is gone
    local pt, m, q = r.a2, r.a3, r.a5
    local t0, D = st[1], st[2]
    if now < t0 then now = t0 end
    local left = x
    if q ~= 0 then
      if now - t0 < D / m + 1 then D = D - (now - t0) * m else D = 0 end
      if D < 0 then D = 0 end
      local el = now - t1
      if el < 0 then el = 0 end
      if el < x / m + 1 then left = x - el * m else left = 0 end
      if left < 0 then left = 0 end
    end
    local give = n * pt
    if left < give then give = left end
    if D < give then give = D end
    D = D - give
    if D == 0 then
      call('DEL', c.key)
      c.st = false
    else
      c.st = {now, D}
      setstate(c.key, spack('dd', now, D), bttl(r, D))
    end
  end

  -- A fixed window: the charge is in the count while the window is the
  -- take's.
  local function unfixed(c, now, n, t1)
    local st = c.st
    if not st or st[1] ~= fdiv(t1, c.r.a2) then return end
    local count = st[2] - n
    if count <= 0 then
      call('DEL', c.key)
      c.st = false
    else
      c.st = {st[1], count, st[3]}
      put(c, spack('ddd', st[1], count, st[3]))
    end
  end

  -- A sliding counter: the charge is in the current count while the window
  -- is the take's, in the previous one for the window after.
  local function uncounter(c, now, n, t1)
    local st = c.st
    if not st then return end
    local k1 = fdiv(t1, c.r.a2)
    local win, prev, curr = st[1], st[2], st[3]
    if win == k1 then
      curr = curr - n
      if curr < 0 then curr = 0 end
    elseif win == k1 + 1 then
      prev = prev - n
      if prev < 0 then prev = 0 end
    else
      return
    end
    if prev == 0 and curr == 0 then
      call('DEL', c.key)
      c.st = false
    else
      c.st = {win, prev, curr, st[4]}
      put(c, spack('dddd', win, prev, curr, st[4]))
    end
  end

  -- A sliding log: the charge is the entry the take pushed, of time t1
  -- and n units, until it is trimmed (the anchor's time is then t1 or
  -- later). Any entry of the same time and units is as good: one is taken
  -- out, and the anchor keeps t1 as the latest time decided at, and the
  -- units it no longer has beyond one.
  local function unlog(c, now, n, t1)
    local key = c.key
    local raw = call('LINDEX', key, 0)
    if not raw then return end
    local at, x, last = unanchor(raw)
    if at >= t1 or call('LREM', key, -1, entry(t1, n)) == 0 then return end
    if n > 1 or last < t1 then
      if last < t1 then last = t1 end
      call('LSET', key, 0, anchor(at, x - n + 1, last))
    end
  end

  -- A fixed window, a key per window (kind 5): the charge is in the count
  -- of the take's window while its key lives, which is as long as the
  -- window (the clock keeps time from going back to it).
  local function unwfixed(c, now, n, t1)
    local key = window(c.key, t1, c.r.a2, c.r.a3)
    local count = wcount(key)
    if count < n then n = count end
    if n > 0 then call('DECRBY', key, arg(n)) end
  end

  local undo = {unbucket, unfixed, uncounter, unlog, unwfixed}

  -- giveback gives back one request's checks: per check its rule, the cost
  -- taken (0 if it was not charged), and the take's receipt (t1, x). The
  -- request's last key is its token, a key of its own in its first
  -- check's slot, for ten seconds: a give-back sent again (a client's retry after a lost
  -- answer, or the store's after a timeout) finds it set, and only peeks,
  -- so that nothing is given back twice.
  local function giveback(now, k)
    for i = 1, k do -- every key read before any is written
      local c = check(i)
      local ri
      ri, c.n, c.t1, c.x, pos = sunpack('<dddd', reqs, pos)
      open(c, ri)
      if c.kind == 4 then call('EXISTS', c.key) end -- read by unlog, later
    end
    local token = KEYS[ki]
    ki = ki + 1
    local first = call('SET', token, '1', 'NX', 'PX', '10000')
    for i = 1, k do
      local c = checks[i]
      if first and c.n > 0 and c.r.charge == GATE then undo[c.kind](c, now, c.n, c.t1, c.x) end
      local d = steps[c.kind](c, now, 0)
      write(c, d)
      put6(d[1], d[2], d[3], d[4], d[5], d[6])
    end
  end

  -- decide runs one request: reqs from pos, its checks' keys from KEYS[ki].
  local function decide()
    local now, k, ri, n
    now, k, ri, n, pos = sunpack('<dddd', reqs, pos)
    now = at(now)
    if giving then
      pos = pos - 16
      giveback(now, k)
      return
    end
    if k == 1 and not receipts then
      -- One check: no peeks, as it is charged iff it allows.
      local r = rules[ri]
      local kind = r.kind
      local key = KEYS[ki]
      if kind == 1 then
        ki = ki + 1
        local raw = call('GET', key)
        local has, t0, D0 = false, 0, 0
        if raw then
          has = true
          t0, D0 = sunpack('dd', raw)
        end
        local ok, rem, rus, rns, zus, zns, w, t, after =
          bcore(r.a1, r.a2, r.a3, r.a4, r.a5, r.a6, has, t0, D0, now, n, r.charge)
        if w == 1 then
          setstate(key, spack('dd', t, after), bttl(r, after))
        elseif w == 2 then
          call('DEL', key)
        end
        put6(ok, rem, rus, rns, zus, zns)
        return
      elseif kind == 5 then
        ki = ki + 1
        put6(wone(r, key, now, n))
        return
      end
    end
    pos = pos - 16 -- the general path reads the first check again
    multi(now, k)
  end

  return decide
end

-- decide is loadgeneral(), made by the first run that needs it: as a
-- function, once for the runs to come, as its closures keep no state of a
-- run but the reused tables of checks (see check), which each request sets
-- afresh; as a script, once a run.
local decide

-- wstretch takes single units from windows' counters (kind 5, Rate >= 1),
-- each given back if its window is full. Its number is the count after,
-- times 2, plus 1 if allowed.
local mends = {} -- by rule index: wkey's answer for the run, once asked
local function wstretch(r, i, e)
  local rate, ttl, ri = r.a1, r.ttl, byte(shape, soff + i)
  local mend = mends[ri]
  if mend == nil then
    mend = wkey(r, fastnow)
    mends[ri] = mend
  end
  for _ = i, e do
    local key = KEYS[ki]
    ki = ki + 1
    if mend then key = string.sub(key, 1, #key - mend[1]) .. mend[2] end
    local c = call('INCR', key)
    if c == 1 then call('PEXPIRE', key, ttl) end -- new: its window's first
    nout = nout + 1
    if c > rate then
      call('DECR', key)
      out[nout] = c * 2 - 2
    else
      out[nout] = c * 2 + 1
    end
  end
  return e + 1
end

-- notrule[ri] is a pattern of one byte other than ri, to find where a
-- stretch of rule ri's requests ends in the shape with one string.find
-- rather than a string.byte per request (a '%' before a byte not
-- alphanumeric takes it as itself).
local notrule = {}

-- upto decides the run's requests from i, up to n at most: one request
-- not in one byte, or a stretch of one-byte ones. It returns the index of
-- the next request.
local function upto(i, n)
  local ri = byte(shape, soff + i)
  if ri == 0 then
    if not decide then decide = loadgeneral() end
    decide()
    return i + 1
  end
  local e = n
  if i < n then
    local pat = notrule[ri]
    if not pat then
      local c = string.char(ri)
      if string.find(c, '%w') then pat = '[^' .. c .. ']' else pat = '[^%' .. c .. ']' end
      notrule[ri] = pat
    end
    local j = string.find(shape, pat, soff + i + 1)
    if j and j <= soff + n then e = j - soff - 1 end
  end
  local r = rules[ri]
  local kind = r.kind
  if kind == 1 then return bstretch(r, i, e) end
  if kind == 3 then return cstretch(r, i, e) end
  if kind == 4 then return lstretch(r, i, e) end
  return wstretch(r, i, e)
end

-- moved answers request i, which failed on a key the node does not hold,
-- with -2 as its first number, and moves past it: from key ki0, reqs
-- position pos0 and reply length nout0, where it began. Every path reads
-- a request's keys before it writes, so it charged nothing.
local function moved(i, ki0, pos0, nout0)
  nout = nout0
  local ri = byte(shape, soff + i)
  if ri ~= 0 then
    ki, nout = ki0 + 1, nout0 + 1
    out[nout] = -2
    return
  end
  local _, k = sunpack('<dd', reqs, pos0)
  local w, nk = 16, k
  if giving then w, nk = 32, k + 1 end -- and the token
  pos, ki = pos0 + 16 + w * k, ki0 + nk
  local per = 6
  if receipts then per = 8 end
  for j = 1, per * k do out[nout0 + j] = 0 end
  out[nout0 + 1] = -2
  nout = nout0 + per * k
end

-- take decides a run: keys and argv are its KEYS and ARGV. It returns the
-- reply.
local function take(keys, argv)
  KEYS, ARGV = keys, argv
  if not call then
    spack, sunpack, floor, call, byte = struct.pack, struct.unpack, math.floor, redis.call, string.byte
    ANCHOR = spack('d', -P53)
  end
  out[1], nout = 0, 1
  local run = ARGV[1]
  local node, clk, flavour, fast, now, n, nrules
  node, clk, flavour, fast, now, guess, nrules, n, soff = sunpack('<BBBBddI4I4', run)
  soff = soff - 1
  shape, reqs, pos = run, run, soff + n + 1
  for i = 1, nrules do
    local rec = ARGV[1 + i]
    local r = rcache[rec]
    if not r then
      -- A constructor sizes the table once.
      local kind, modes, a1, a2, a3, a4, a5, a6, ttl, dttl = sunpack('<BBddddddss', rec)
      r = {kind = kind, shadow = modes % 2, charge = floor(modes / 2), a1 = a1, a2 = a2, a3 = a3, a4 = a4,
        a5 = a5, a6 = a6, ttl = ttl, dttl = dttl}
      if nrcache == 256 then rcache, nrcache = {}, 0 end
      rcache[rec], nrcache = r, nrcache + 1
    end
    rules[i], mends[i] = r, nil
  end
  ki = 1
  nodemode = node == 1
  if nodemode then
    KEYS = {}
    local from = 1 + nrules
    for i = from + 1, #ARGV do KEYS[i - from] = ARGV[i] end
  end
  clockon = clk == 1
  receipts, giving = flavour == 1, flavour == 2
  if clockon then ki = 2 end
  clock, clocked, redisnow, ahead = nil, false, nil, false

  -- Redis before 5 replicates a script by its text unless told otherwise,
  -- and refuses writes after TIME; later ones replicate effects anyway,
  -- and a function runs on Redis 7 or later.
  if evalkeys and redis.replicate_commands then redis.replicate_commands() end
  fastnow = nil
  if fast == 1 then
    fastnow = at(now)
    out[1] = fastnow
  end
  local i = 1
  while i <= n do
    if nodemode then
      local ki0, pos0, nout0 = ki, pos, nout
      local ok, e = pcall(upto, i, i)
      if ok then
        i = e
      else
        local msg = e
        if type(e) == 'table' then msg = e.err end
        if type(msg) == 'string' and string.find(msg, 'non local key', 1, true) then
          moved(i, ki0, pos0, nout0)
          i = i + 1
        else
          error(e)
        end
      end
    else
      i = upto(i, n)
    end
  end
  if clocked then call('SET', KEYS[1], spack('<d', clock), 'PX', CLOCKTTL) end
  local j = nout + 1
  while out[j] ~= nil do
    out[j] = nil
    j = j + 1
  end
  return out
end

-- fixedrun decides a run whose every request is one unit of a rule of
-- kind 5 at the head's now, with the store's clock and not on a node: the
-- commonest run (one fixed-window limit a request, as
-- envoyproxy/ratelimit's), which the store sends to this function rather
-- than to take. Same ARGV, same reply, same effect as take (the clock as
-- at sets it, then wstretch's INCR, PEXPIRE and DECR per request). Under
-- a service's load, on cores Redis shares with it, take costs Redis more
-- a run than this function does for the same work: the cost, as far as
-- the measurements tell, of going through take's functions and upvalues
-- with cold caches. So fixedrun reads no upvalue: only its own locals, and
-- Redis's globals once a run. A rule's fields are read from its record
-- where a request of another rule than the one before begins a stretch.
local function fixedrun(keys, argv)
  local call, sunpack, byte, floor = redis.call, struct.unpack, string.byte, math.floor
  local run = argv[1]
  local node, clk, flavour, fast, now, guess, _, n, soff = sunpack('<BBBBddI4I4', run)
  if node ~= 0 or clk ~= 1 or flavour ~= 0 or fast ~= 1 then
    error('sluice: fixedrun: a run on the store\'s clock, of one-unit requests, and on no node, only')
  end
  soff = soff - 1 -- the shape is run[soff + 1 .. soff + n]
  if now == 9007199254740992 then -- Redis TIME
    local t = call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local raw = call('SET', keys[1], struct.pack('<d', now), 'PX', '86400000', 'GET')
  if raw then
    local old = sunpack('<d', raw)
    if old > now then
      call('SET', keys[1], raw, 'PX', '86400000')
      now = old
    end
  end
  local out = {now}
  local ri, rate, ttl, cut, start -- the stretch's rule, its fields, its keys' mending
  for i = 1, n do
    local b = byte(run, soff + i)
    if b ~= ri then
      local _, p, unit
      ri = b
      _, _, rate, p, unit, _, _, _, ttl = sunpack('<BBdddddds', argv[1 + ri])
      -- The keys come with the window the client guessed (see wkey):
      -- mended only if now's window is another.
      local k, g = floor(now / p), floor(guess / p)
      local r = now - k * p -- as fdiv: exact below 2^53
      if r < 0 then k = k - 1 elseif r >= p then k = k + 1 end
      r = guess - g * p
      if r < 0 then g = g - 1 elseif r >= p then g = g + 1 end
      cut = false
      if k ~= g then
        cut, start = #string.format('%.0f', g * p / unit), string.format('%.0f', k * p / unit)
      end
    end
    local key = keys[i + 1]
    if cut then key = string.sub(key, 1, #key - cut) .. start end
    local c = call('INCR', key)
    if c == 1 then call('PEXPIRE', key, ttl) end -- new: its window's first
    if c > rate then
      call('DECR', key)
      out[i + 1] = c * 2 - 2
    else
      out[i + 1] = c * 2 + 1
    end
  end
  return out
end

-- As a library, the store appends the registrations of take and fixedrun
-- under names of this text's version (see takeLibrary in store.go).
if evalkeys then return take(evalkeys, evalargv) end

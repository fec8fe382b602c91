-- sluice: runs of requests against several checks each, decided in order as
-- if they had come one by one, each all-or-nothing but for usage (CHARGE).
-- params.go keeps every parameter where these doubles are exact integers.
-- Each redis.call, Lua number passed to one (Redis formats it), KEYS entry
-- and TIME costs per decision: TTLs are strings made once per rule, TIME is
-- read once per run, and single units take a path per kind (a stretch)
-- answered with one number. docs/redis.md tells the whole design.
--
-- ARGV[1], the run: a head '<BBBBddI4I4': node (1: on one Cluster node,
--   its keys in ARGV after the rules; see moved), clock (1: KEYS[1] is the
--   store's clock, see at), flavour (1: a take reporting per check the time
--   decided at and a bucket's debt after; 2: a give-back; else 0), fast (1:
--   the run has one-byte requests), now (µs; 2^53: Redis TIME), guess (see
--   wkey), the number of rules, n requests. Then the shape, a byte per
--   request: r > 0 one unit of rule r at the head's now, else 0. Then each 0
--   request as '<d's: now, k checks, per check its rule and cost (flavour 2:
--   and the take's receipt, t1 and x).
-- ARGV[1+i], rule i, '<BBdddddddss': kind, modes (bit 0 shadow, the rest
--   CHARGE), a1..a7, its keys' TTL in ms and a bucket's TTL in debt past a
--   full bucket ('': none). Kinds: 1 bucket (span, pt, m, h, q, burst, qu);
--   2 fixed window (rate, period µs); 3 sliding counter (rate, period); 4
--   sliding log (rate, period, the span its TTL is set once in); 5 fixed
--   window, a key per window (rate, period, µs per unit of the key's start).
-- KEYS (on a node: ARGV after the rules): the clock if any, then each
--   check's key (kind 5: less the window's start; one-byte requests come
--   with one, guessed); in flavour 2 a token after the request's.
-- Reply: the one-byte requests' time (0: none), then per one-byte request
--   its number, else per check allowed, remaining, retry µs and ns, reset µs
--   and ns (µs -1: never), and in flavour 1 the time decided at and a
--   bucket's debt after. -2: a request on a key its node lost.
-- As a Redis function the file loads once, its tables living from run to
-- run; loading sees no global but redis, so the others are bound at the
-- first run. As a script (EVAL) all is made again each run.
local evalkeys, evalargv
if not redis.register_function then evalkeys, evalargv = KEYS, ARGV end
local KEYS, ARGV
local P26, P52, P53 = 67108864, 4503599627370496, 9007199254740992
local spack, sunpack, floor, call, byte

-- floor(a/b) for integers |a| < 2^53, b > 0: the float quotient, corrected.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

-- a*b for 0 <= a, b < 2^52 as hi*2^52 + lo, 0 <= lo < 2^52.
local function mul(a, b)
  local a1, b1 = floor(a / P26), floor(b / P26)
  local a0, b0 = a - a1 * P26, b - b1 * P26
  local mid = a1 * b0 + a0 * b1
  local m1 = floor(mid / P26)
  local lo, hi = a0 * b0 + (mid - m1 * P26) * P26, a1 * b1 + m1
  if lo >= P52 then return hi + 1, lo - P52 end
  return hi, lo
end

local function less(h1, l1, h2, l2) return h1 < h2 or (h1 == h2 and l1 < l2) end

-- prev*r < m*p, exactly.
local function fits(prev, r, m, p)
  local h1, l1 = mul(prev, r)
  local h2, l2 = mul(m, p)
  return less(h1, l1, h2, l2)
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

-- CHARGE: GATE is all-or-nothing, a check charged only when the whole
-- request passes (cost 0 peeks). USAGE and COUNT record a cost whether it
-- fits or not (the check allows iff it fits), denied or not, into a debt
-- capped at a period's worth (a bucket's at two full buckets, a window's
-- count and a log's units at 2·Rate), never given back. Cost 0 records
-- nothing and allows iff one unit fits (USAGE) or nothing is owed (COUNT):
-- asked is the cost decided. The stretches serve GATE alone (fastRule).
local GATE, USAGE = 0, 1
local function asked(n, charge)
  if n == 0 and charge == USAGE then return 1 end
  return n
end

-- wrecord is a window's count after usage n >= 0, capped at twice the
-- rate; a count already past it (a higher rate under the same name) stays.
local function wrecord(count, n, rate)
  local cap = 2 * rate
  if count >= cap then return count end
  if n > cap - count then return cap end
  return count + n
end

-- The run's state, set by take. out[1..nout] is the reply, its table kept
-- from run to run (take clears what a longer run left).
local out, nout = {}, 0
local reqs, pos -- ARGV[1], and the position of the next 0 request in it
local rules = {} -- the run's rules by index, read only
local rcache, nrcache = {}, 0 -- rules by record, forgotten past 256
local ki -- the next key
local nodemode, clockon, receipts, giving
local clock, clocked, ahead, redisnow, theirs
local shape, soff, fastnow, guess -- see the head
local CLOCKTTL = '86400000' -- ms: a day

-- at is the time of a request sent with now. The clock (KEYS[1]) is the
-- latest time the store decided at, so that no decision is made earlier
-- whatever Redis TIME does: the run's first request sets it and reads the
-- old one in one call, puts the old one back if it was ahead (ahead), and
-- a later time is written at the run's end (clocked). theirs: the time is
-- the caller's, neither Redis's nor the clock's.
local function at(now)
  theirs = now ~= P53 and not clockon
  if now == P53 then
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

-- setstate writes a key's state with ttl, in ms as a string ('': none).
local function setstate(key, state, ttl)
  if ttl == '' then return call('SET', key, state) end
  call('SET', key, state, 'PX', ttl)
end

-- arg is a cost as a redis.call argument, formatted as Redis would.
local function arg(n)
  if n == 1 then return '1' end
  return string.format('%.0f', n)
end

-- Bucket (token, leaky, GCRA). State 'dd': the last time seen (µs) and the
-- debt then, in units of h/q ns; m units make a quantum of qu µs, a unit
-- costs pt, a full bucket is span. qu is 1 but for a bucket too long for
-- units of a µs, which drains by the whole quanta (1ms or 1s) passed.

-- bttl: debt past a full bucket's, which only usage records, drains longer.
local function bttl(r, D)
  if D > r.a1 then return r.dttl end
  return r.ttl
end

-- bstep drains (t0, D0) to now and takes n >= 0 units if they fit: the
-- time (never before t0), 1 if they fit (else 0), the debt after and the
-- debt drained. It takes the rule's fields, as a field read costs the
-- one-unit path more than an argument.
local function bstep(span, pt, m, q, qu, t0, D0, now, n)
  if now < t0 then now = t0 end
  local D = D0
  if q ~= 0 then
    local el = now - t0
    if qu ~= 1 then el = fdiv(now, qu) - fdiv(t0, qu) end -- whole quanta passed
    D = 0
    if el < D0 / m + 1 then -- else el*m might not be exact: the debt is 0
      D = D0 - el * m
      if D < 0 then D = 0 end
    end
  end
  local after = D + n * pt
  if after <= span then return now, 1, after, D end
  return now, 0, D, D
end

-- usns is y > 0 units of debt as a wait in µs and ns, the ns rounded up;
-- with a coarser quantum, to the end of the quantum the debt drains in,
-- off µs being into now's.
local function usns(y, r, off)
  local m = r.a3
  local us = fdiv(y, m)
  if r.a7 ~= 1 then
    if y > us * m then us = us + 1 end
    return us * r.a7 - off, 0
  end
  return us, -fdiv(-(y - us * m) * r.a4, r.a5)
end

-- bstretch decides single units of rule r, requests i to e, at the run's
-- time. It writes the state of an idle bucket first, reading the old one in
-- the same call (an absent key costs one call), decides from the old state
-- as bucket does, and writes again if the guess was wrong. Its number: the
-- debt after, times 2, plus 1 if allowed.
local function bstretch(r, i, e)
  local span, pt, m, q, qu, ttl, now = r.a1, r.a2, r.a3, r.a5, r.a7, r.ttl, fastnow
  local idle = spack('dd', now, pt)
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
      local t, ok, after = bstep(span, pt, m, q, qu, t0, D0, now, 1)
      v = after * 2 + ok
      if t ~= now or after ~= pt then setstate(key, spack('dd', t, after), bttl(r, after)) end
    end
    nout = nout + 1
    out[nout] = v
  end
  return e + 1
end

-- Windows, in µs: [k*P, (k+1)*P) from the Unix epoch. locate returns now's
-- and how far into it now is.
local function locate(now, p)
  local k = fdiv(now, p)
  return k, now - k * p
end

-- wdecision is a fixed window's decision (kinds 2 and 5): ok, on the count
-- after, off into the window; never: no wait will do.
local function wdecision(r, ok, count, off, never)
  local p, rus, zus = r.a2, 0, 0
  if never then rus = -1 elseif not ok then rus = p - off end
  if count > 0 then zus = p - off end
  local rem = r.a1 - count
  if rem < 0 then rem = 0 end -- a rate lowered under the same name
  return ok and 1 or 0, rem, rus, 0, zus, 0
end

-- A step decides check c at now for cost n and returns d: the decision in
-- d[1..6], d[15] the time decided at, d[16] a bucket's debt after, and the
-- write in d[7]: 0 none, 1 SET d[8], 2 DEL, 3 the log's (logcommit), 4 kind
-- 5's charge, made. bucket is the step of kind 1.
local function bucket(c, now, n)
  local r, st = c.r, c.st
  local span, pt, q, burst, charge = r.a1, r.a2, r.a5, r.a6, r.charge
  local gate, took, after, D, off = n > 0 and n <= burst and charge == GATE, 0, 0, 0, 0
  local t0, D0 = now, 0
  if st then t0, D0 = st[1], st[2] end
  if st or gate then now, took, after, D = bstep(span, pt, r.a3, q, r.a7, t0, D0, now, gate and n or 0) end
  if r.a7 ~= 1 then off = now - fdiv(now, r.a7) * r.a7 end -- into now's quantum
  local ok, rem, rus, rns, zus, zns = 0, 0, 0, 0, 0, 0
  if not gate then after = D end
  if n < 0 then
    rus = -1
  elseif charge ~= GATE then
    local want = asked(n, charge)
    if want <= burst and D + want * pt <= span then ok = 1 end
    if n > 0 and (ok == 1 or (q ~= 0 and D < 2 * span)) then -- Rate 0 never drains it
      after = D + n * pt -- inexact only far past the cap
      if ok == 0 and after > 2 * span then after = 2 * span end
    end
    if ok == 0 and (want > burst or q == 0) then
      rus = -1
    elseif ok == 0 then -- for the same check, on the debt after this one
      rus, rns = usns(after + want * pt - span, r, off)
    end
  elseif n > burst then
    rus = -1
  elseif n == 0 then
    ok = 1 -- a peek, even of an empty bucket
  else
    ok = took
    if ok == 0 and q == 0 then
      rus = -1
    elseif ok == 0 then
      rus, rns = usns(D + n * pt - span, r, off)
    end
  end
  if after <= span then rem = fdiv(span - after, pt) end
  if after == 0 then -- idle: forget it
    return {ok, rem, rus, rns, 0, 0, st and 2 or 0, false, [15] = now, [16] = 0}
  end
  if q == 0 then zus = -1 else zus, zns = usns(after, r, off) end
  local d = {ok, rem, rus, rns, zus, zns, 0, false, [15] = now, [16] = after}
  if not st or t0 ~= now or D0 ~= after then d[7], d[8] = 1, spack('dd', now, after) end
  return d
end

-- Fixed window (kind 2). State 'ddd': window, count, last time seen.
local function fixed(c, now, n)
  local r, st = c.r, c.st
  local rate, charge = r.a1, r.charge
  local win, count = nil, 0
  if st then
    if now < st[3] then now = st[3] end
    win, count = st[1], st[2]
  end
  local k, off = locate(now, r.a2)
  if k ~= win then count = 0 end
  local ok, never = false, false
  if charge ~= GATE and n >= 0 then
    local want = asked(n, charge)
    ok, never = want <= rate - count, want > rate
    count = wrecord(count, n, rate)
  elseif n < 0 or n > rate then
    never = true
  elseif n == 0 or n <= rate - count then -- a peek, even past the rate (usage's)
    ok, count = true, count + n
  end
  local d = {wdecision(r, ok, count, off, never)}
  d[7], d[8], d[15] = 0, false, now
  if count > 0 then
    if not st or st[1] ~= k or st[2] ~= count or st[3] ~= now then d[7], d[8] = 1, spack('ddd', k, count, now) end
  elseif st then
    d[7] = 2
  end
  return d
end

-- Sliding window counter (kind 3). State 'dddd': window, prev, curr, last
-- time seen. cstep rolls window win's counts to now's, k, off into it:
-- prev, curr, and whether want more fit, prev·(P-off)/P + curr + want <=
-- rate, exactly. It takes the rule's fields, as bstep does.
local function cstep(rate, p, win, prev, curr, k, off, want)
  if k == win + 1 then
    prev, curr = curr, 0
  elseif k ~= win then
    prev, curr = 0, 0
  end
  local m = rate - curr - want + 1
  return prev, curr, m > 0 and fits(prev, p - off, m, p)
end

-- firstfit is the least offset, in µs and ns, into a window after one of
-- prev at which n more fit (nil: none in the window): prev*(P-off) < m*P,
-- m = rate-curr-n+1, at off = floor(1000*P*(prev-m)/prev) + 1 ns.
local function firstfit(rate, p, prev, curr, n)
  local m = rate - curr - n + 1
  if m <= 0 then return nil end
  if prev < m then return 0, 0 end
  local Q, R = muldiv(p, prev - m, prev)
  local s = fdiv(1000 * R, prev) + 1
  if s == 1000 then Q, s = Q + 1, 0 end
  if Q >= p then return nil end
  return Q, s
end

local function counter(c, now, n)
  local r, st = c.r, c.st
  local rate, p, charge = r.a1, r.a2, r.charge
  if st and now < st[4] then now = st[4] end
  local k, off = locate(now, p)
  local d = {0, 0, 0, 0, 0, 0, 0, false, 0, 0}
  local want = n
  if charge ~= GATE and n >= 0 then want = asked(n, charge) end
  local win, p0, c0 = k, 0, 0
  if st then win, p0, c0 = st[1], st[2], st[3] end
  local prev, curr, fit = cstep(rate, p, win, p0, c0, k, off, want)
  if n < 0 or want > rate then
    d[3] = -1
  elseif (n == 0 and charge == GATE) or fit then
    d[1] = 1
    if charge == GATE then curr = curr + n end
  end
  if charge ~= GATE and n > 0 then curr = wrecord(curr, n, rate) end
  if d[1] == 0 and d[3] ~= -1 then -- the wait for the same check after it
    local us, ns = firstfit(rate, p, prev, curr, want)
    if us then
      d[3], d[4] = us - off, ns
    else
      us, ns = firstfit(rate, p, curr, 0, want)
      if us then d[3], d[4] = p - off + us, ns else d[3] = 2 * p - off end
    end
  end
  local est = 0
  if prev > 0 then est = muldiv(prev, p - off, p) end
  d[2] = rate - curr - est
  if d[2] < 0 then d[2] = 0 end
  if curr > 0 then d[5] = 2 * p - off elseif prev > 0 then d[5] = p - off end
  if d[5] > 0 then
    if not st or st[1] ~= k or st[2] ~= prev or st[3] ~= curr or st[4] ~= now then
      d[7], d[8] = 1, spack('dddd', k, prev, curr, now)
    end
  elseif st then
    d[7] = 2
  end
  d[15] = now
  return d
end

-- cstretch decides single units (Rate < 2^25, with the clock) as counter
-- does; it writes only if allowed (a later read rolls a denial's state
-- alike). Its number: the counts rolled to now's window, (prev·(Rate+1) +
-- curr)·2, plus 1 if allowed (see expandCounter). Or -3, deciding nothing,
-- for a state written after now (a lost clock) or counts above the rate (a
-- higher rate under the same name): the Go side sends it to the general path.
local function cstretch(r, i, e)
  local rate, p, ttl, now = r.a1, r.a2, r.ttl, fastnow
  local k, off = locate(now, p)
  for _ = i, e do
    local key = KEYS[ki]
    ki = ki + 1
    local raw = call('GET', key)
    local prev, curr, fit, v
    if raw then
      local win, p0, c0, last = sunpack('dddd', raw)
      prev, curr, fit = cstep(rate, p, win, p0, c0, k, off, 1)
      if last > now or prev > rate or curr > rate then v = -3 end
    else
      prev, curr, fit = cstep(rate, p, k, 0, 0, k, off, 1)
    end
    if not v then
      v = (prev * (rate + 1) + curr) * 2
      if fit then
        v = v + 1
        setstate(key, spack('dddd', k, prev, curr + 1, now), ttl)
      end
    end
    nout = nout + 1
    out[nout] = v
  end
  return e + 1
end

-- Sliding log (kind 4): one list, its anchor, then its entries, oldest
-- first. An entry is a push of units at a µs: 'd' at for one unit, 'dd' at,
-- n for more. The anchor is the last entry a trim left (a new list starts
-- with ANCHOR, out of every window; the entries after it may have left the
-- window too, until a trim), or 'ddd' at, x, last when it keeps more: x,
-- the entries' units beyond one each, and last, the latest time decided at
-- when later than every entry's (NOLAST: none). The count is the entries
-- after the anchor, less those that left, plus x less theirs. A time before
-- the anchor's, the newest entry's or last is read as that time.
-- Its key expires lazily: the one-unit path sets its TTL (a span a3, a
-- Period and the slack) by a push whose oldest entry in the window is of
-- another aligned span, or that finds none; the general path, whose time
-- may not run as Redis's, at every decision (see logSpan in params.go).
local ANCHOR -- spack('d', -2^53)
local NOLAST = -P53
local LOGTRIM = 2 -- the one-unit path trims the entries that left once there are this many

local function entry(t, n)
  if n == 1 then return spack('d', t) end
  return spack('dd', t, n)
end

-- unentry returns an entry's time and units.
local function unentry(raw)
  if #raw == 8 then return (sunpack('d', raw)), 1 end
  return sunpack('dd', raw)
end

local function anchor(t, x, last)
  if x == 0 and last <= t then return spack('d', t) end
  return spack('ddd', t, x, last)
end

-- unanchor returns an anchor's time, x and last.
local function unanchor(raw)
  if #raw == 24 then return sunpack('ddd', raw) end
  return (sunpack('d', raw)), 0, NOLAST
end

-- logread reads the log at key at now: nothing for no list; else the
-- anchor's time, x and last; L, the entries after it that left the window,
-- lx their units beyond one each, lat the time of the last of them (else
-- the anchor's); fat, the time of the first entry in the window, or false;
-- and, when it read the list to its end, its length and last element.
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
  if #batch < k then return at, x, last, L, lx, lat, fat, from + #batch, nraw end
  return at, x, last, L, lx, lat, fat
end

-- logcount is the units in the window of a log of len elements, as read.
local function logcount(len, L, x, lx) return len - 1 - L + x - lx end

-- logtrim drops the L > 0 entries that left, the last, at lat, becoming
-- the anchor with x and last.
local function logtrim(key, L, lat, x, last)
  call('LTRIM', key, L, -1)
  if x ~= 0 or last > lat then call('LSET', key, 0, anchor(lat, x, last)) end
end

-- lstretch decides single units (Period < 2^26 µs, with the clock) as slog
-- does. Its number: if allowed, the count after, times 2, plus 1; if
-- denied, (retry·2^26 + reset)·2, the µs until the oldest entry and the
-- newest leave the window. A push comes first, RPUSH answering the count,
-- and a denial takes it back; a list read whole is counted from the read.
-- Or -3, writing nothing but a trim, for what slog decides: a time before
-- the last decided at (a lost clock), the clock ahead of Redis TIME (the
-- TTLs set once a span assume Redis's time), or counts above the rate.
local function lstretch(r, i, e)
  local rate, p, span, ttl, now = r.a1, r.a2, r.a3, r.ttl, fastnow
  local unit, nowspan = entry(now, 1), fdiv(now, span)
  for _ = i, e do
    local key = KEYS[ki]
    ki = ki + 1
    local v = -3
    local at, x, last, L, lx, lat, fat, len, nraw
    if not ahead then at, x, last, L, lx, lat, fat, len, nraw = logread(key, now, p) end
    if ahead then
    elseif not at then
      call('RPUSH', key, ANCHOR, unit)
      call('PEXPIRE', key, ttl)
      v = 3
    elseif now - at >= p and last <= now and len and logcount(len, L, x, lx) >= rate then
      -- read whole, and full: denied with no push
      if logcount(len, L, x, lx) == rate and fat then
        local nat = unentry(nraw)
        if nat <= now then v = ((fat + p - now) * P26 + (nat + p - now)) * 2 end
      end
    elseif now - at >= p and last <= now then
      if L >= LOGTRIM then
        x = x - lx
        logtrim(key, L, lat, x, last)
        L, lx = 0, 0
      end
      local count = logcount(call('RPUSH', key, unit) - 1, L, x, lx)
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

-- slog decides a check of a log: d[7] 3 has logcommit write from d[9..19].
local function slog(c, now, n)
  local rate, p, key, charge = c.r.a1, c.r.a2, c.key, c.r.charge
  local at, x, last, L, lx, lat, fat, len, nraw = logread(key, now, p)
  local nat, latest = NOLAST, NOLAST
  if not at then
    x, last, L, lx, len = 0, NOLAST, 0, 0, 0
  else
    if not len then len, nraw = call('LLEN', key), call('LINDEX', key, -1) end
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
  if at then count = logcount(len, L, x, lx) end
  local d = {0, 0, 0, 0, 0, 0, 0, false, 0, 0}
  local want = n
  if charge ~= GATE and n >= 0 then want = asked(n, charge) end
  if n < 0 or want > rate then
    d[3] = -1
  elseif (n == 0 and charge == GATE) or count + want <= rate then
    d[1] = 1
  end
  -- add: the units pushed at now. Usage is recorded up to the cap; when the
  -- log holds Rate entries in the window, into the newest entry, moved to
  -- now (merge: its units), as the memory store's ring of Rate cells.
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
    -- Units leave oldest first: the wait is until the entry through which
    -- need units have left does; the units pushed now leave a Period on.
    local need, from, upto = count + add + want - rate, L + 1, len - 1
    if merge then upto = len - 2 end
    while d[3] == 0 and from <= upto do
      local batch = call('LRANGE', key, from, math.min(from + 31, upto))
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
  count = count + add
  d[2] = rate - count
  if d[2] < 0 then d[2] = 0 end
  if add > 0 then
    d[5], d[7], d[9] = p, 3, 1
  elseif fat then -- the time decided at, if later than any the log holds
    d[5], d[7], d[9], d[8] = nat + p - now, 3, 0, now > latest
  elseif at then
    d[7] = 2 -- every entry left the window: the list goes
  end
  d[10], d[11], d[12], d[13], d[14] = L, add, lat, x - lx, last
  d[15], d[17], d[18], d[19] = now, at or false, x, merge
  return d
end

-- logcommit writes what slog decided (d) at d[15]: the push of d[11] units
-- (into the newest entry, of d[19] units, if not false) with the trim of
-- what left, or the time decided at as the anchor's last.
local function logcommit(c, d)
  local key, now = c.key, d[15]
  if d[9] == 1 then
    local L, n, lat, x, last, at, merge = d[10], d[11], d[12], d[13], d[14], d[17], d[19]
    -- A push at a caller's time may be ahead of the clock's on the same
    -- keys, whose one-unit path reads no newest entry: the anchor keeps it.
    local was = last
    if theirs and now > last then last = now end
    local grow = n - 1 -- the anchor's x: units beyond one, or all merged
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

-- Fixed window, a key per window (kind 5): its value the window's count,
-- which INCRBY charges and DECRBY gives back. window returns the key of the
-- window holding now, for the key base, and how far into it now is.
local function window(base, now, p, unit)
  local k = fdiv(now, p)
  return base .. string.format('%.0f', k * p / unit), now - k * p
end

-- wkey mends the keys of rule r's one-byte requests, which come with the
-- window the client guessed (guess), for the window at now: false when the
-- guess was right, else the guessed start's length and the right start.
local function wkey(r, now)
  local p = r.a2
  local k, g = fdiv(now, p), fdiv(guess, p)
  if k == g then return false end
  return {#string.format('%.0f', g * p / r.a3), string.format('%.0f', k * p / r.a3)}
end

-- wtake charges n to a window's key, or nothing if they do not fit: whether
-- it did and the count after. A unit goes by INCR and DECR, which Redis
-- parses no number for.
local function wtake(key, rate, ttl, n)
  local a, c = '1', nil
  if n == 1 then c = call('INCR', key) else a = arg(n); c = call('INCRBY', key, a) end
  if c == n then call('PEXPIRE', key, ttl) end -- new: its window's first
  if c > rate then
    if n == 1 then call('DECR', key) else call('DECRBY', key, a) end
    return false, c - n
  end
  return true, c
end

local function wcount(key) return tonumber(call('GET', key)) or 0 end

-- wrecordkey records usage n >= 0 into a window's key, capped as wrecord
-- caps it: the count before and after.
local function wrecordkey(key, r, n)
  local before = wcount(key)
  local add = math.min(n, 2 * r.a1 - before)
  if add <= 0 then return before, before end
  if call('INCRBY', key, arg(add)) == add then call('PEXPIRE', key, r.ttl) end -- new
  return before, before + add
end

-- wfixed charges as it decides (d[7] 4): a request that does not pass
-- gives the charge back. Usage is recorded as decided, never given back.
local function wfixed(c, now, n)
  local r = c.r
  local key, off = window(c.key, now, r.a2, r.a3)
  c.wkey = key
  local d = {0, 0, 0, 0, 0, 0, 0, false, 0, 0}
  local ok, count, never = true, 0, false
  if r.charge ~= GATE and n >= 0 then
    local want, before = asked(n, r.charge), 0
    before, count = wrecordkey(key, r, n)
    ok = want <= r.a1 - before
    never = not ok and want > r.a1
  elseif n < 0 or n > r.a1 then
    ok, count, never = false, wcount(key), true
  elseif n == 0 then
    count = wcount(key)
  else
    ok, count = wtake(key, r.a1, r.ttl, n)
    if ok then d[7] = 4 end
  end
  d[1], d[2], d[3], d[4], d[5], d[6] = wdecision(r, ok, count, off, never)
  d[11], d[12], d[15] = count, off, now
  return d
end

-- wstretch takes single units as wfixed does. Its number: the count after,
-- times 2, plus 1 if allowed.
local mends = {} -- by rule index: wkey's answer for the run
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
    local ok, c = wtake(key, rate, ttl, 1)
    nout = nout + 1
    if ok then out[nout] = c * 2 + 1 else out[nout] = c * 2 end
  end
  return e + 1
end

local steps = {bucket, fixed, counter, slog, wfixed}
local unpackfmt = {'dd', 'ddd', 'dddd'} -- the states of kinds 1 to 3
local checks = {} -- the request's checks, their tables reused

-- open sets check i to rule ri with the next key, and reads its state.
local function open(i, ri)
  local c = checks[i]
  if not c then
    c = {}
    checks[i] = c
  end
  local r = rules[ri]
  c.r, c.kind, c.shadow, c.key, c.st = r, r.kind, r.shadow == 1, KEYS[ki], false
  ki = ki + 1
  if c.kind <= 3 then -- the log reads its list itself, kind 5 its window's key
    local raw = call('GET', c.key)
    if raw then c.st = {sunpack(unpackfmt[c.kind], raw)} end
  end
  return c
end

-- write makes the writes of check c's decision d, and answers it.
local function write(c, d)
  local w = d[7]
  if w == 1 and c.kind == 1 then
    setstate(c.key, d[8], bttl(c.r, d[16]))
  elseif w == 1 then
    setstate(c.key, d[8], c.r.ttl)
  elseif w == 2 then
    call('DEL', c.key)
  elseif w == 3 then
    logcommit(c, d)
  end
  out[nout + 1], out[nout + 2], out[nout + 3] = d[1], d[2], d[3]
  out[nout + 4], out[nout + 5], out[nout + 6] = d[4], d[5], d[6]
  nout = nout + 6
end

-- multi decides a request of k checks, each as if charged: it passes iff
-- every check not in shadow mode allows. If not, a gate check that would
-- allow reports a peek and is not charged; usage is recorded either way.
local function multi(now, k)
  local ok = true
  for i = 1, k do
    local ri, n
    ri, n, pos = sunpack('<dd', reqs, pos)
    open(i, ri).n = n
  end
  for i = 1, k do
    local c = checks[i]
    c.d = steps[c.kind](c, now, c.n)
    if c.d[1] == 0 and not c.shadow then ok = false end
  end
  for i = 1, k do
    local c = checks[i]
    local d = c.d
    if not ok and d[1] == 1 and c.r.charge == GATE then
      if c.kind == 5 then
        if d[7] == 4 then
          call('DECRBY', c.wkey, arg(c.n))
          d[11] = d[11] - c.n
        end
        d = {wdecision(c.r, true, d[11], d[12], false)}
        d[7] = 0
      else
        d = steps[c.kind](c, now, 0)
      end
    end
    write(c, d)
    if receipts then
      out[nout + 1], out[nout + 2] = d[15] or 0, d[16] or 0
      nout = nout + 2
    end
  end
end

-- Give back (flavour 2): a request split across slots is taken slot by
-- slot (flavour 1); when a part denies, the parts charged are given back
-- here, each on its node. A give-back never mints: it takes off no more
-- than is left of the take's charge had nothing happened since, t1 being
-- the time the take decided at. Then each check reports a peek.

-- restate keeps check c's state st, packed as fmt, with ttl; st false
-- drops its key (the state is idle).
local function restate(c, st, fmt, ttl)
  c.st = st
  if not st then return call('DEL', c.key) end
  setstate(c.key, spack(fmt, unpack(st)), ttl)
end

-- A bucket: the take's debt after (x), drained since t1, at most the
-- charge; the bucket's debt now holds at least that much of it.
local function unbucket(c, now, n, t1, x)
  local st, r = c.st, c.r
  if not st then return end -- idle since: the charge is gone
  local m = r.a3
  local t, _, _, D = bstep(r.a1, r.a2, m, r.a5, r.a7, st[1], st[2], now, 0)
  local left = x
  if r.a5 ~= 0 then
    local el = math.max(t - t1, 0)
    if r.a7 ~= 1 then el = math.max(fdiv(t, r.a7) - fdiv(t1, r.a7), 0) end
    if el < x / m + 1 then left = math.max(x - el * m, 0) else left = 0 end
  end
  D = D - math.min(n * r.a2, left, D)
  restate(c, D ~= 0 and {t, D}, 'dd', bttl(r, D))
end

-- A fixed window: the charge is in the count while the window is the take's.
local function unfixed(c, now, n, t1)
  local st = c.st
  if not st or st[1] ~= fdiv(t1, c.r.a2) then return end
  local count = st[2] - n
  restate(c, count > 0 and {st[1], count, st[3]}, 'ddd', c.r.ttl)
end

-- A sliding counter: in the current count while the window is the take's,
-- in the previous one for the window after.
local function uncounter(c, now, n, t1)
  local st = c.st
  if not st then return end
  local k1, win, prev, curr = fdiv(t1, c.r.a2), st[1], st[2], st[3]
  if win == k1 then
    curr = math.max(curr - n, 0)
  elseif win == k1 + 1 then
    prev = math.max(prev - n, 0)
  else
    return
  end
  restate(c, (prev > 0 or curr > 0) and {win, prev, curr, st[4]}, 'dddd', c.r.ttl)
end

-- A sliding log: the entry the take pushed, of time t1 and n units, until
-- it is trimmed (the anchor's time is then t1 or later). One such entry is
-- taken out; the anchor keeps t1 as the latest time decided at, and the
-- units it no longer has beyond one.
local function unlog(c, now, n, t1)
  local raw = call('LINDEX', c.key, 0)
  if not raw then return end
  local at, x, last = unanchor(raw)
  if at >= t1 or call('LREM', c.key, -1, entry(t1, n)) == 0 then return end
  if n > 1 or last < t1 then call('LSET', c.key, 0, anchor(at, x - n + 1, math.max(last, t1))) end
end

-- Kind 5: the charge is in the count of the take's window while its key
-- lives, as long as the window (the clock keeps time from going back).
local function unwfixed(c, now, n, t1)
  local key = window(c.key, t1, c.r.a2, c.r.a3)
  n = math.min(n, wcount(key))
  if n > 0 then call('DECRBY', key, arg(n)) end
end

local undo = {unbucket, unfixed, uncounter, unlog, unwfixed}

-- giveback gives back a request's checks: per check its rule, the cost
-- taken (0 if not charged) and the take's receipt (t1, x). The request's
-- last key is its token, in its first check's slot, for ten seconds: a
-- give-back sent again finds it set, and only peeks.
local function giveback(now, k)
  for i = 1, k do -- every key read before any is written
    local ri, n, t1, x
    ri, n, t1, x, pos = sunpack('<dddd', reqs, pos)
    local c = open(i, ri)
    c.n, c.t1, c.x = n, t1, x
    if c.kind == 4 then call('EXISTS', c.key) end -- read by unlog, later
  end
  local token = KEYS[ki]
  ki = ki + 1
  local first = call('SET', token, '1', 'NX', 'PX', '10000')
  for i = 1, k do
    local c = checks[i]
    if first and c.n > 0 and c.r.charge == GATE then undo[c.kind](c, now, c.n, c.t1, c.x) end
    write(c, steps[c.kind](c, now, 0))
  end
end

-- notrule[ri] is a pattern of one byte other than ri, to find where a
-- stretch of rule ri's requests ends with one string.find.
local notrule = {}
local stretches = {bstretch, nil, cstretch, lstretch, wstretch}

-- upto decides the run's requests from i, up to n at most: one request
-- not in one byte, or a stretch of one-byte ones of one rule. It returns
-- the next request's index.
local function upto(i, n)
  local ri = byte(shape, soff + i)
  if ri == 0 then
    local now, k
    now, k, pos = sunpack('<dd', reqs, pos)
    now = at(now)
    if giving then giveback(now, k) else multi(now, k) end
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
  return stretches[r.kind](r, i, e)
end

-- moved answers request i, which failed on a key the node does not hold,
-- with -2 as its first number, and moves past it from where it began (key
-- ki0, position pos0, reply length nout0). Every path reads a request's
-- keys before it writes, so it charged nothing.
local function moved(i, ki0, pos0, nout0)
  nout = nout0
  if byte(shape, soff + i) ~= 0 then
    ki, nout = ki0 + 1, nout0 + 1
    out[nout] = -2
    return
  end
  local _, k = sunpack('<dd', reqs, pos0)
  local w, nk, per = 16, k, 6
  if giving then w, nk = 32, k + 1 end -- and the token
  if receipts then per = 8 end
  pos, ki = pos0 + 16 + w * k, ki0 + nk
  for j = 1, per * k do out[nout0 + j] = 0 end
  out[nout0 + 1] = -2
  nout = nout0 + per * k
end

-- take decides a run from its KEYS and ARGV, and returns the reply.
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
      local kind, modes, a1, a2, a3, a4, a5, a6, a7, ttl, dttl = sunpack('<BBdddddddss', rec)
      r = {kind = kind, shadow = modes % 2, charge = floor(modes / 2), a1 = a1, a2 = a2, a3 = a3, a4 = a4,
        a5 = a5, a6 = a6, a7 = a7, ttl = ttl, dttl = dttl}
      if nrcache == 256 then rcache, nrcache = {}, 0 end
      rcache[rec], nrcache = r, nrcache + 1
    end
    rules[i], mends[i] = r, nil
  end
  nodemode, clockon = node == 1, clk == 1
  if nodemode then
    KEYS = {}
    for i = 2 + nrules, #ARGV do KEYS[i - 1 - nrules] = ARGV[i] end
  end
  receipts, giving = flavour == 1, flavour == 2
  ki = 1
  if clockon then ki = 2 end
  clock, clocked, redisnow, ahead = nil, false, nil, false
  -- Redis before 5 replicates a script by its text unless told otherwise,
  -- and refuses writes after TIME.
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
        if type(msg) ~= 'string' or not string.find(msg, 'non local key', 1, true) then error(e) end
        moved(i, ki0, pos0, nout0)
        i = i + 1
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

-- fixedrun decides, as take does, a run whose every request is one unit of
-- a kind 5 rule, with the clock and on no node: the commonest run (one
-- fixed-window limit a request).
local function fixedrun(keys, argv)
  local node, clk, flavour, fast = struct.unpack('<BBBB', argv[1])
  if node ~= 0 or clk ~= 1 or flavour ~= 0 or fast ~= 1 then
    error('sluice: fixedrun: a run on the store\'s clock, of one-unit requests, and on no node, only')
  end
  return take(keys, argv)
end

-- As a library, the store appends the registrations of take and fixedrun
-- (see takeLibrary in store.go).
if evalkeys then return take(evalkeys, evalargv) end

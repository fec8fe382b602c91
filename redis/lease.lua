-- sluice: leases, the authority's side (see Leases in docs/redis.md).
-- KEYS[1] is a key's hash: a field per holder, its value '<dddddd>':
-- demand, share, burst, window, allowance, and its expiry (µs, Redis TIME);
-- and the field '' ('<d'), when a bucket holding of the key last ended.
-- The hash outlives a bucket's holdings by the time the bucket takes to
-- refill, so that a holder new to a key no one holds starts with what it
-- refilled since (lease.StartTokens; Refill in µs, the same doubles).
-- ARGV[1] 'r' renews ARGV[2]'s share; ARGV[3] '<ddddddddd>' is the kind
--   (1 bucket, 2 window), rate, capacity, demand, window, used, TTL µs, the
--   most holders and the period (µs). lease.Allocate in Go is the same
--   arithmetic, in the same doubles (every sum is of integers below 2^53,
--   so exact in any order). An expired window holding counts until the
--   window it expired in ends, as the memory authority's (its holder may
--   have admitted its allowance there). Reply: 0, share, burst, allowance,
--   holders, their demand, the tokens it starts with; or 1 and the
--   holders, when the key has the most and ARGV[2] is not one.
-- ARGV[1] 'R' renews each of KEYS in one run, on a single Redis: ARGV[2i]
--   and ARGV[2i+1] are KEYS[i]'s holder and argument, as 'r''s. Reply:
--   seven numbers per key, 'r''s reply padded with zeros; 2 for a key
--   whose renewal Redis failed.
-- ARGV[1] 'x' releases ARGV[2]'s share: its holding expires now, with no
--   share or demand; a window's is still counted in its window.
-- ARGV[1] 'h' lists: the time (µs), then each holder and its value.
-- renew is one holder's renewal of key k at now (µs), as 'r' replies.
local function renew(k, who, arg, now)
  local floor, min, max = math.floor, math.min, math.max
  local all = redis.call('HGETALL', k)
  local kind, c, cap, d, win, used, ttl, most, per = struct.unpack('<ddddddddd', arg)
  d = min(max(d, 0), 4 * c + 4)
  local total, held, committed, n, late, gone, found = d, 0, 0, 1, now + ttl, {}, false
  local ended, ended0 -- when a bucket holding last ended, as kept and now
  for i = 1, #all, 2 do
    if all[i] == '' then
      ended = struct.unpack('<d', all[i + 1])
      ended0 = ended
      break
    end
  end
  for i = 1, #all, 2 do
    local od, osh, _, ow, oa, oe
    if all[i] ~= '' then od, osh, _, ow, oa, oe = struct.unpack('<dddddd', all[i + 1]) end
    if not oe then
    elseif oe <= now and (kind ~= 2 or floor(oe / per) < win) then
      gone[#gone + 1] = all[i]
      if kind == 1 then ended = max(ended or oe, oe) end
    elseif all[i] == who then
      found = true
    else
      total, held, n = total + od, held + osh, n + 1
      if kind == 2 and ow == win then committed = committed + oa else committed = committed + osh end
      late = max(late, oe)
    end
  end
  -- The expired go first, so that their shares come back.
  if #gone > 0 then redis.call('HDEL', k, unpack(gone)) end
  if not found and n > most then return {1, n - 1} end
  local target
  if total <= c then
    local k = n
    if 2 * total <= c then k = n + 1 end
    target = d + floor((c - total) / k)
  else
    target = floor(c * d / total)
  end
  local share, burst, allow = max(min(target, c - held), 0), 0, 0
  if c > 0 then burst = floor(cap * share / c) end
  if kind == 2 then allow = max(min(target, c - committed), used, 0) end
  local tokens, refill = 0, 0
  if c > 0 then refill = min(per * cap / c, 604800000000) end
  if kind == 1 and not found and n == 1 and burst > 0 then
    if not ended or now >= ended + refill then
      tokens = burst
    elseif now > ended then
      tokens = min(burst, floor(c * (now - ended) / per))
    end
  end
  redis.call('HSET', k, who, struct.pack('<dddddd', d, share, burst, win, allow, now + ttl))
  if ended and ended ~= ended0 then redis.call('HSET', k, '', struct.pack('<d', ended)) end
  if kind == 1 then late = late + refill end
  if kind == 2 then late = (floor(late / per) + 1) * per end
  redis.call('PEXPIRE', k, math.ceil((late - now) / 1000))
  return {0, share, burst, allow, n, total, tokens}
end

local function lease(keys, argv)
  -- Redis before 5 replicates a script by its text unless told otherwise,
  -- and refuses writes after TIME.
  if redis.replicate_commands then redis.replicate_commands() end
  local k = keys[1]
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  if argv[1] == 'x' then
    local v = redis.call('HGET', k, argv[2])
    if v then
      local _, _, _, ow, oa, oe = struct.unpack('<dddddd', v)
      if oe > now then redis.call('HSET', k, argv[2], struct.pack('<dddddd', 0, 0, 0, ow, oa, now)) end
    end
    return 0
  end
  if argv[1] == 'R' then
    local out = {}
    for i = 1, #keys do
      -- A key Redis refuses (another type's) fails its renewal alone.
      local ok, r = pcall(renew, keys[i], argv[2 * i], argv[2 * i + 1], now)
      if not ok then r = {2} end
      for j = 1, 7 do out[#out + 1] = r[j] or 0 end
    end
    return out
  end
  if argv[1] == 'h' then
    local all = redis.call('HGETALL', k)
    table.insert(all, 1, now)
    return all
  end
  return renew(k, argv[2], argv[3], now)
end

-- As a library, the store appends lease's registration (see lease.go).
if not redis.register_function then return lease(KEYS, ARGV) end

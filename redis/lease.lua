-- sluice: leases, the authority's side (see Leases in docs/redis.md).
-- KEYS[1] is a key's hash: a field per holder, its value '<dddddd>':
-- demand, share, burst, window, allowance, and its expiry (µs, Redis TIME).
-- ARGV[1] 'r' renews ARGV[2]'s share; ARGV[3] '<ddddddddd>' is the kind
--   (1 bucket, 2 window), rate, capacity, demand, window, used, TTL µs, the
--   most holders and the period (µs). lease.Allocate in Go is the same
--   arithmetic, in the same doubles (every sum is of integers below 2^53,
--   so exact in any order). An expired window holding counts until the
--   window it expired in ends, as the memory authority's (its holder may
--   have admitted its allowance there). Reply: 0, share, burst, allowance,
--   holders, their demand; or 1 and the holders, when the key has the
--   most and ARGV[2] is not one.
-- ARGV[1] 'h' lists: the time (µs), then each holder and its value.
local function lease(keys, argv)
  -- Redis before 5 replicates a script by its text unless told otherwise,
  -- and refuses writes after TIME.
  if redis.replicate_commands then redis.replicate_commands() end
  local k, floor, min, max = keys[1], math.floor, math.min, math.max
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  local all = redis.call('HGETALL', k)
  if argv[1] == 'h' then
    table.insert(all, 1, now)
    return all
  end
  local who = argv[2]
  local kind, c, cap, d, win, used, ttl, most, per = struct.unpack('<ddddddddd', argv[3])
  d = min(max(d, 0), 4 * c + 4)
  local total, held, committed, n, late, gone, found = d, 0, 0, 1, now + ttl, {}, false
  for i = 1, #all, 2 do
    local od, osh, _, ow, oa, oe = struct.unpack('<dddddd', all[i + 1])
    if oe <= now and (kind ~= 2 or floor(oe / per) < win) then
      gone[#gone + 1] = all[i]
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
    target = d + floor((c - total) / (n + 1))
  else
    target = floor(c * d / total)
  end
  local share, burst, allow = max(min(target, c - held), 0), 0, 0
  if c > 0 then burst = floor(cap * share / c) end
  if kind == 2 then allow = max(min(target, c - committed), used, 0) end
  redis.call('HSET', k, who, struct.pack('<dddddd', d, share, burst, win, allow, now + ttl))
  if kind == 2 then late = (floor(late / per) + 1) * per end
  redis.call('PEXPIRE', k, math.ceil((late - now) / 1000))
  return {0, share, burst, allow, n, total}
end

-- As a library, the store appends lease's registration (see lease.go).
if not redis.register_function then return lease(KEYS, ARGV) end

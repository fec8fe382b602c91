package bench

// FloorLibrary is about the least a run can cost Redis and keep the
// store's guarantees for a single unit of one check (exact,
// all-or-nothing, at Redis TIME, never at a time before one already
// decided at): TIME, the clock's SET ... GET, then per key one call for a
// bucket and an INCR (PEXPIRE if new, DECR if over) for a fixed window,
// with one number of reply per decision, as take.lua's one-byte requests.
// Its sliding log is a list of one entry per unit, its length the count:
// an LRANGE of the oldest, an LTRIM of those that left the window, an
// RPUSH whose answer is the count (an RPOP if over) and a PEXPIRE. That is
// below anything the store can be: a request of cost n would take n
// entries there, where the store's log takes one for all the units of a
// µs; and it keeps no record of the latest time decided at but the clock.
// It knows one rule, whose constants argv passes as strings
// (BenchmarkRedis passes PerSecond(1000)'s, rlsload floor-grpc
// bench.yaml's). It takes no rules, shapes or other kinds of request, and
// it trusts the window the client put in a fixed window's
// key, which the store checks against Redis TIME once a run (wkey in
// take.lua) and mends when wrong, so the floor is a shade lower than
// exact. What the store's run pays beyond it is its generality.
const FloorLibrary = `#!lua name=sluicefloor
local function at(clock)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local raw = redis.call('SET', clock, struct.pack('<d', now), 'PX', '86400000', 'GET')
  if raw then
    local old = struct.unpack('<d', raw)
    if old > now then
      redis.call('SET', clock, raw, 'PX', '86400000')
      now = old
    end
  end
  return now
end
redis.register_function{function_name='floor_fixed', flags={'allow-cross-slot-keys'},
callback=function(keys, argv)
  local out = {at(keys[1])}
  local rate, ttl = tonumber(argv[1]), argv[2]
  for i = 2, #keys do
    local c = redis.call('INCR', keys[i])
    if c == 1 then redis.call('PEXPIRE', keys[i], ttl) end
    if c > rate then
      redis.call('DECR', keys[i])
      out[i] = c * 2 - 2
    else
      out[i] = c * 2 + 1
    end
  end
  return out
end}
redis.register_function{function_name='floor_bucket', flags={'allow-cross-slot-keys'},
callback=function(keys, argv)
  local now = at(keys[1])
  local out = {now}
  local span, pt, ttl = tonumber(argv[1]), tonumber(argv[2]), argv[3]
  local idle = struct.pack('dd', now, pt)
  for i = 2, #keys do
    local raw = redis.call('SET', keys[i], idle, 'PX', ttl, 'GET')
    local v = pt * 2 + 1
    if raw then
      local t0, D0 = struct.unpack('dd', raw)
      local t = now
      if t < t0 then t = t0 end
      local D = D0 - (t - t0)
      if D < 0 then D = 0 end
      local after = D
      v = D * 2
      if D + pt <= span then
        after = D + pt
        v = after * 2 + 1
      end
      if t ~= now or after ~= pt then
        redis.call('SET', keys[i], struct.pack('dd', t, after), 'PX', ttl)
      end
    end
    out[i] = v
  end
  return out
end}
redis.register_function{function_name='floor_log', flags={'allow-cross-slot-keys'},
callback=function(keys, argv)
  local now = at(keys[1])
  local out = {now}
  local rate, p, ttl = tonumber(argv[1]), tonumber(argv[2]), argv[3]
  local entry = struct.pack('<d', now)
  for i = 2, #keys do
    local key = keys[i]
    local drop, k, oldest = 0, 2, false
    while true do
      local batch = redis.call('LRANGE', key, drop, drop + k - 1)
      for j = 1, #batch do
        local t = struct.unpack('<d', batch[j])
        if now - t < p then
          oldest = t
          break
        end
        drop = drop + 1
      end
      if oldest or #batch < k then break end
      k = 32
    end
    if drop > 0 then redis.call('LTRIM', key, drop, -1) end
    local n = redis.call('RPUSH', key, entry)
    if n > rate then
      redis.call('RPOP', key)
      out[i] = (oldest + p - now) * 2
    else
      redis.call('PEXPIRE', key, ttl)
      out[i] = n * 2 + 1
    end
  end
  return out
end}
`

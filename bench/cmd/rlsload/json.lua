-- wrk: POST /json, each request as one of 1000 users, in turn: a
-- RateLimitRequest of one descriptor in proto3 JSON.
local i = 0
request = function()
  i = i + 1
  local body = '{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"k' .. (i % 1000) .. '"}]}]}'
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body)
end

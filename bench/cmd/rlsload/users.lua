-- wrk: each request as one of 1000 users, in turn, in X-User, from one
-- client address, as nginx reports it in X-Real-IP (bench.yaml's
-- forward_auth is for nginx).
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", nil, { ["X-User"] = "k" .. (i % 1000), ["X-Real-IP"] = "198.51.100.7" })
end

-- wrk: each request as one of 10000 users, in turn, in X-User.
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", nil, { ["X-User"] = "k" .. (i % 10000) })
end

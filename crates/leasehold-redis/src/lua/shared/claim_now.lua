
-- The server's clock in ms (the claim scripts have no prelude).
local function claim_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

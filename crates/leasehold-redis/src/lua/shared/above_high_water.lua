
-- Whether the fence key `f` holds a value above the high-water `w`: a counter a 0.3 client drew
-- since (it keeps its own expiry then, since nothing else holds that value).
local function above_high_water(f, w)
  return tonumber(redis.call('GET', f) or '0') > tonumber(redis.call('GET', w) or '0')
end

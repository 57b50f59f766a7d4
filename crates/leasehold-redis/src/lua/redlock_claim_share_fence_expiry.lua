if tonumber(redis.call('ZSCORE', r, token) or '0') <= now then
  return 0
end

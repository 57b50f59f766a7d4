if tonumber(redis.call('ZSCORE', E, token) or '0') <= now then
  return 0
end

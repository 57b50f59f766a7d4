  if redis.call('ZCARD', r) == 0 then
    redis.call('DEL', l, r, rf)
    holder = nil
  end
end

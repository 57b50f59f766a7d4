
local l, f, q, h, r = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local granule, retention = 1, ARGV[3]

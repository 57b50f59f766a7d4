
local l, f, r, rf = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local granule, retention = tonumber(ARGV[3]), ARGV[4]

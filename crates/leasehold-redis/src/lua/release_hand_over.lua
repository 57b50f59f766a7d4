
local us, now = clock()
hand_over(KEYS[1], KEYS[4], KEYS[5], KEYS[2], KEYS[3], us, now, false, ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1

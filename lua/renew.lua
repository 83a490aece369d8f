-- ARGV: id token lease_ms
if redis.call('HGET', KEYS[8], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZADD', KEYS[6], string.format('%d', vtrr_now_ms() + tonumber(ARGV[3])), ARGV[1])
return 1

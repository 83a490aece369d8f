-- ARGV: id token [id token ...]
local acked = 0
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[8], id) == ARGV[i + 1] then
    redis.call('ZREM', KEYS[6], id)
    redis.call('HDEL', KEYS[7], id)
    redis.call('HDEL', KEYS[8], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('HDEL', KEYS[9], id)
    acked = acked + 1
  end
end
return acked

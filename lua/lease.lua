-- ARGV: lease_ms count reclaim_limit token1 [token2 ...] (one token per item)
local cvt = vtrr_current_virtual_time()
local now = vtrr_now_ms()
vtrr_reclaim(cvt, now, tonumber(ARGV[3]))
local expiry = now + tonumber(ARGV[1])
local leased = {}
local last_score
for i = 1, tonumber(ARGV[2]) do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then break end
  local id = popped[1]
  local payload = redis.call('HGET', KEYS[4], id) or ''
  redis.call('HDEL', KEYS[4], id)
  redis.call('HSET', KEYS[7], id, payload)
  redis.call('ZADD', KEYS[6], string.format('%d', expiry), id)
  redis.call('HSET', KEYS[8], id, ARGV[3 + i])
  local timeouts = tonumber(redis.call('HGET', KEYS[9], id) or '0')
  leased[#leased + 1] = {id, payload, ARGV[3 + i], timeouts}
  last_score = popped[2]
end
if last_score then
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('SET', KEYS[2], '0')
    redis.call('DEL', KEYS[4], KEYS[3])
  else
    redis.call('SET', KEYS[2], string.format('%d', math.floor(tonumber(last_score))))
  end
end
return leased

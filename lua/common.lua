-- Reference implementation of vtrr's semantics as Lua scripts, the way
-- vtrr-queue drives its keys. Used by the differential tests and the
-- benchmark; this prelude is prepended to every script.
--
-- KEYS (every script): 1 queue, 2 current_virtual_time,
-- 3 partition_virtual_time, 4 task, 5 meta, 6 inflight, 7 inflight_task,
-- 8 lease, 9 timeouts.

local function vtrr_current_virtual_time()
  local value = redis.call('GET', KEYS[2])
  if not value then return 0 end
  return math.floor(tonumber(value))
end

-- The scoring rule, shared by enqueue and reclaim.
local function vtrr_place(cvt, partition, id, weight, payload)
  local pvt = math.floor(tonumber(redis.call('HGET', KEYS[3], partition) or '0') or 0)
  local start = math.max(pvt, cvt + 1)
  redis.call('ZADD', KEYS[1], string.format('%d', start), id)
  redis.call('HSET', KEYS[3], partition, string.format('%d', start + weight))
  redis.call('HSET', KEYS[4], id, payload)
  redis.call('HSET', KEYS[5], id, string.format('%d', weight) .. ':' .. partition)
end

local function vtrr_now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function vtrr_reclaim(cvt, now, limit)
  local due
  if limit then
    due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, limit)
  else
    due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)
  end
  for _, id in ipairs(due) do
    redis.call('ZREM', KEYS[6], id)
    local payload = redis.call('HGET', KEYS[7], id) or ''
    redis.call('HDEL', KEYS[7], id)
    redis.call('HDEL', KEYS[8], id)
    redis.call('HINCRBY', KEYS[9], id, 1)
    local weight, partition = 1, ''
    local meta = redis.call('HGET', KEYS[5], id)
    if meta then
      local w, p = string.match(meta, '^(%d+):(.*)$')
      if w and tonumber(w) > 0 then weight, partition = tonumber(w), p end
    end
    vtrr_place(cvt, partition, id, weight, payload)
  end
  return #due
end

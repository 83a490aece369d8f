-- ARGV: partition id weight payload [partition id weight payload ...]
local cvt = vtrr_current_virtual_time()
local added = 0
for i = 1, #ARGV, 4 do
  local id = ARGV[i + 1]
  if not redis.call('ZSCORE', KEYS[1], id) and not redis.call('ZSCORE', KEYS[6], id) then
    vtrr_place(cvt, ARGV[i], id, tonumber(ARGV[i + 2]), ARGV[i + 3])
    added = added + 1
  end
end
return added

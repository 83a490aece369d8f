-- ARGV: [limit]
return vtrr_reclaim(vtrr_current_virtual_time(), vtrr_now_ms(), tonumber(ARGV[1]))

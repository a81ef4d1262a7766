--! idempotent
-- XPENDING's detailed form, raw (redis-py's reply parser expects the summary form).
return redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', ARGV[2], ARGV[3])
--! idempotent
-- requeued: KEYS dead-letter stream, its requeued set (sorted set: `<entry id> <stream>`
-- of a requeued dead letter's job -> until when, ms); ARGV the dead letter's id, its
-- source (`<entry id> <stream>`, '' when it names none), hold_ms. Delete the dead
-- letter (its job was queued anew) and remember its source for hold_ms: a publish of
-- its parked copy already under way (read before the requeue deleted it) then adds no
-- dead letter after it (`queue_bury`), though the sources set forgets the source. The
-- set forgets what is past its time, and the key expires hold_ms after the last
-- requeue. Returns how many entries were deleted (0: none had that id).
--! include now
local n = redis.call('XDEL', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then
  local hold = tonumber(ARGV[3])
  redis.call('ZADD', KEYS[2], now + hold, ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('PEXPIRE', KEYS[2], hold)
end
return n

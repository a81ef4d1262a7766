--! idempotent
-- dead: KEYS stream, marker hash, dying hash; ARGV consumer group, id, group, holder
-- ('' for any), the dead letter's fields...
-- The decisive step of a dead letter, in one call on the partition's slot: while the
-- entry is pending (and, given a holder, held by that consumer), ack it, delete it,
-- end its marker as an ack does (a follow-up job for enqueues marked on it) and park
-- the dead letter in the dying hash (entry id -> `<now ms> <its fields, a JSON list>`),
-- from which `publish` copies it to the dead-letter stream (another slot) and deletes
-- it. A worker that dies after this call leaves a dead letter that claims publish once
-- it is parked past min_idle, never a job both dead-lettered and pending. Returns {0} when the job is not the caller's (nothing changes), else
-- {1, the follow-up job's id or false}. Run again (its reply lost, resent) while the
-- dead letter is still parked, it changes nothing and returns {1, false}.
--! include now
--! include queue_follow_up
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then return {1, false} end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or (ARGV[4] ~= '' and p[1][2] ~= ARGV[4]) then return {0} end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[3], ARGV[2], now .. ' ' .. cjson.encode(fields))
return {1, follow_up(KEYS[1], KEYS[2], ARGV[3], ARGV[2])}

--! idempotent
-- bury: KEYS dead-letter stream, its sources (sorted set: `<entry id> <stream>` of the
-- job -> the dead letter's ms); ARGV max_len, source, fields (a JSON list, name and
-- value alternating, as the dying hash keeps them). Add the dead letter
-- unless its source already has one (a publish that stopped between this call and
-- deleting the dying entry, or two publishing at once: one dead letter per job), then
-- trim the stream (`MAXLEN ~`) and forget the sources of dead letters no longer
-- there: older than the oldest kept, and past twice max_len. Returns 1 when added.
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then return 0 end
local fields = cjson.decode(ARGV[3])
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
redis.call('ZADD', KEYS[2], tonumber(string.match(id, '^(%d+)')), ARGV[2])
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
if first then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.match(first[1], '^(%d+)'))
end
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(2 * tonumber(ARGV[1]) + 1))
return 1

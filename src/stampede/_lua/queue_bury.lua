--! idempotent
-- bury: KEYS dead-letter stream, its sources (sorted set: `<entry id> <stream>` of the
-- job -> the dead letter's ms), its requeued set (`queue_requeued`); ARGV max_len,
-- source, fields (a JSON list, name and
-- value alternating, after the parking time as the dying hash keeps them). Add the dead letter unless its
-- source already has one (a publish that stopped between this call and deleting the
-- dying entry, or two publishing at once: one dead letter per job), then trim the
-- stream (`MAXLEN ~`) and the sources (`trim_sources`). Nor is it added when its dead
-- letter was requeued lately: a publish read its parked copy before the requeue
-- deleted it, and would add a dead letter of a job queued anew. Returns 1 when added.
--! include now
--! include queue_trim_sources
--! include queue_fields
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then return 0 end
local requeued = redis.call('ZSCORE', KEYS[3], ARGV[2])
if requeued and tonumber(requeued) > now then return 0 end
local fields = as_entry(string.match(ARGV[3], '^%d+ (.*)$') or ARGV[3])
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
redis.call('ZADD', KEYS[2], tonumber(string.match(id, '^(%d+)')), ARGV[2])
trim_sources(KEYS[1], KEYS[2], tonumber(ARGV[1]))
return 1

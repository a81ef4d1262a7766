--! idempotent
-- retry: KEYS stream, marker hash, delayed set, retries hash, the call's receipt; ARGV consumer group, id,
-- group, holder ('' for any), delay_ms, entry fields... Ack and delete the entry; when delay_ms is
-- 0, add the new one (attempts + 1, last_error) at once, else park its fields, plus
-- retry_at (epoch seconds), in the delayed set until `now` + delay_ms. `now` is the
-- server's clock, as in `promote`: a worker whose clock is off neither shortens nor
-- stretches the delay. The marker is re-pointed in its plain form either way: the
-- retry is undelivered (or not yet claimable), so its worker reads afresh.
-- Enqueues marked on the marker while the job was pending are covered by the retry:
-- their keys join its own. An entry no longer pending was acked or retried by a
-- worker that took it over, and one held by another consumer than `holder` was taken
-- over: the job is not this caller's to retry, and nothing changes. Returns 0 then.
-- Run again (its reply lost, resent), it finds its receipt and returns what its first
-- run did, changing nothing (before receipts, it was never resent: the worker logged
-- `OutcomeUnknownError` for a retry that was queued).
--! include now
--! include queue_keys
--! include queue_receipt
--! include queue_fields
local first = receipt(KEYS[5])
if first ~= nil then return first end
if ARGV[4] ~= '' then
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
  if #p == 0 or p[1][2] ~= ARGV[4] then return 0 end
end
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
local cur = redis.call('HGET', KEYS[2], ARGV[3])
local marked = cur and string.sub(cur, 1, #ARGV[2] + 1) == ARGV[2] .. ':'
  and string.match(cur, '^[^:]+:%d+:%d+:(.*)$')
local mine = field_at(fields, 'keys')
if marked and mine then
  local prior = decoded(marked)
  local k = prior and field_at(prior, 'keys')
  if k then fields[mine] = keys_union(fields[mine], prior[k]) end
end
local delay = tonumber(ARGV[5])
if delay <= 0 then
  local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
  redis.call('HSET', KEYS[2], ARGV[3], id .. ':' .. now)
  return keep(KEYS[5], id)
end
local due = now + delay
fields[#fields + 1] = 'retry_at'
fields[#fields + 1] = string.format('%.3f', due / 1000)
redis.call('ZADD', KEYS[3], due, ARGV[3])
redis.call('HSET', KEYS[4], ARGV[3], cjson.encode(fields))
redis.call('HSET', KEYS[2], ARGV[3], '0-' .. string.format('%d', due) .. ':' .. now)
return keep(KEYS[5], false)

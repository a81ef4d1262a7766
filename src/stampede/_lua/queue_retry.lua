-- retry: KEYS stream, marker hash, delayed set, retries hash; ARGV consumer group, id,
-- group, now_ms, due_ms, entry fields... Ack and delete the entry; when due_ms is past,
-- add the new one (attempts + 1, last_error) at once, else park its fields in the
-- delayed set until due_ms. The marker is re-pointed in its plain form either way: the
-- retry is undelivered (or not yet claimable), so its worker reads afresh.
-- An entry no longer pending was acked or retried by a worker that took it over:
-- the job is not this caller's to retry, and nothing changes. Returns 0 then.
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
if tonumber(ARGV[5]) <= tonumber(ARGV[4]) then
  local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
  redis.call('HSET', KEYS[2], ARGV[3], id .. ':' .. ARGV[4])
  return id
end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[3])
redis.call('HSET', KEYS[4], ARGV[3], cjson.encode(fields))
redis.call('HSET', KEYS[2], ARGV[3], '0-' .. ARGV[5] .. ':' .. ARGV[4])
return false

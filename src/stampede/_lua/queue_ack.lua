-- ack: XACK + XDEL the entry. If the marker still names it: drop the marker, or, when
-- enqueues found the job already taken (marker `<id>:<ms>:<n>:<fields>`), add their
-- newest fields as the follow-up job and point the marker at it. Returns its id.
--! include now
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local cur = redis.call('HGET', KEYS[2], ARGV[3])
if not cur or string.sub(cur, 1, #ARGV[2] + 1) ~= ARGV[2] .. ':' then return false end
local job = string.match(cur, '^[^:]+:%d+:%d+:(.*)$')
if not job then
  redis.call('HDEL', KEYS[2], ARGV[3])
  return false
end
local id = redis.call('XADD', KEYS[1], '*', unpack(cjson.decode(job)))
redis.call('HSET', KEYS[2], ARGV[3], id .. ':' .. now)
return id

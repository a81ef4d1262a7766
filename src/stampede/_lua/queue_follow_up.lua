--! fragment
-- follow_up(stream, markers, group, id): after job `id` of `group` is acked, if the
-- marker still names it: drop the marker, or, when enqueues found the job already
-- taken (marker `<id>:<ms>:<n>:<fields>`), add their newest fields as the follow-up
-- job and point the marker at it. Returns its id, or false. (Needs `now`.)
--! include queue_fields
local function follow_up(stream, markers, group, id)
  local cur = redis.call('HGET', markers, group)
  if not cur or string.sub(cur, 1, #id + 1) ~= id .. ':' then return false end
  local job = string.match(cur, '^[^:]+:%d+:%d+:(.*)$')
  if not job then
    redis.call('HDEL', markers, group)
    return false
  end
  local added = redis.call('XADD', stream, '*', unpack(as_entry(job, group)))
  redis.call('HSET', markers, group, added .. ':' .. now)
  return added
end

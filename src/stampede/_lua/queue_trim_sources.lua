--! fragment
-- trim_sources(dead, sources, max_len): forget the sources of dead letters no longer
-- on the stream: those older than its oldest entry (trimmed, or requeued), all of them
-- once it is empty, and any past the newest 2 * max_len.
local function trim_sources(dead, sources, max_len)
  local first = redis.call('XRANGE', dead, '-', '+', 'COUNT', 1)[1]
  if not first then
    redis.call('DEL', sources)
    return
  end
  redis.call('ZREMRANGEBYSCORE', sources, '-inf', '(' .. string.match(first[1], '^(%d+)'))
  redis.call('ZREMRANGEBYRANK', sources, 0, -(2 * max_len + 1))
end

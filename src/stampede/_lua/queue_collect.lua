--! idempotent
-- collect: KEYS stream, marker hash, delayed set, retries hash; ARGV consumer group,
-- groups... Put on the stream the retries of the groups given (a page of the marker
-- hash or of the retries hash) that are no longer in the delayed set, then collect
-- their markers that
-- no longer stand for a job: a marker naming an entry that is neither in the stream
-- nor pending (deleted by hand, `XTRIM`, a stream deleted) or a waiting retry that is
-- not in the delayed set, or one that does not parse. Every queue call keeps a marker
-- and its job together, so only another program leaves one stray; it blocked the
-- group's enqueues until the marker TTL and stayed for ever. A stray marker is
-- deleted, or, when enqueues were marked on it (promised a repair after them) or its
-- retry's fields are left, replaced by a new job with those fields. A marker naming a
-- pending entry is left to its holder (its ack ends it) or to `reclaim` (which drops
-- an entry gone from the stream; the next collection ends its marker). Returns how
-- many markers and retries it collected. Run again, it finds them collected: it changes nothing.
--! include now
--! include queue_fields
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the repair stream holds another type of value')
end
local n = 0
for i = 2, #ARGV do
  local group = ARGV[i]
  local cur = redis.call('HGET', KEYS[2], group)
  local scheduled = redis.call('ZSCORE', KEYS[3], group) ~= false
  local kept = not scheduled and redis.call('HGET', KEYS[4], group)
  if kept then
    -- a retry no longer scheduled: it goes on the stream now, the marker pointing at
    -- it unless the marker names a job of its own
    redis.call('HDEL', KEYS[4], group)
    local added = redis.call('XADD', KEYS[1], '*', unpack(as_entry(kept, group)))
    if not cur or string.sub(cur, 1, 2) == '0-' then
      cur = added .. ':' .. now
      redis.call('HSET', KEYS[2], group, cur)
    end
    n = n + 1
  end
  local id, rest = string.match(cur or '', '^([^:]+):%d+(.*)$')
  local live, job = false, nil
  if not cur then
    live = true
  elseif id and string.sub(id, 1, 2) == '0-' then
    live = scheduled
  elseif id then
    local ok, found = pcall(function()
      return #redis.call('XRANGE', KEYS[1], id, id) > 0
        or #redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1) > 0
    end)
    live = ok and found
    job = not live and string.match(rest, '^:%d+:(.*)$') or nil
  end
  if not live then
    if job then
      local added = redis.call('XADD', KEYS[1], '*', unpack(as_entry(job, group)))
      redis.call('HSET', KEYS[2], group, added .. ':' .. now)
    else
      redis.call('HDEL', KEYS[2], group)
    end
    n = n + 1
  end
end
return n

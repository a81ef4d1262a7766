--! idempotent
-- enqueue: KEYS stream, marker hash, delayed set, retries hash; ARGV group, (unused),
-- marker_ttl_ms, consumer group, entry fields... Times are the server's (`now`), never
-- a client's: a client whose clock is off would misjudge the age of another's marker.
-- Returns the new entry's id, or false when the group's pending job covers this call:
-- a retry waiting (its keys joined with these), an entry no worker has taken yet that
-- reads every key of this call, or else, marked on the marker, the follow-up job the
-- pending job's ack adds (this call's fields, its keys joined with earlier marks').
--! include now
--! include queue_keys
--! include queue_fields
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local mine = field_at(fields, 'keys')
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then
  local id, at, rest = string.match(cur, '^([^:]+):(%d+)(.*)$')
  -- a marker whose id is not an entry id (another program wrote it) stands for no job
  if id and not string.match(id, '^%d+%-%d+$') then id = nil end
  at = tonumber(at)
  local young = id and at and (now - at) < tonumber(ARGV[3])
  if id and at and string.sub(id, 1, 2) == '0-' then
    -- a retry waiting in the delayed set reads the group later: it covers this call,
    -- once it reads this call's keys too
    if young and redis.call('ZSCORE', KEYS[3], ARGV[1]) then
      local raw = redis.call('HGET', KEYS[4], ARGV[1])
      local retry = raw and decoded(raw)
      local k = retry and field_at(retry, 'keys')
      if k and mine and not keys_cover(retry[k], fields[mine]) then
        retry[k] = keys_union(retry[k], fields[mine])
        redis.call('HSET', KEYS[4], ARGV[1], cjson.encode(retry))
      end
      return false
    end
    id = nil
  end
  if id and at then
    -- a job held past the marker TTL (a stuck worker) is not trusted to cover this
    -- call; one no worker has taken yet reads the group later, however long it waits
    local taken = #redis.call('XPENDING', KEYS[1], ARGV[4], id, id, 1) > 0
    local entry = not taken and redis.call('XRANGE', KEYS[1], id, id)[1]
    if (taken and young) or entry then
      local n, marked = string.match(rest, '^:(%d+):(.*)$')
      if not taken and not marked then
        local k = field_at(entry[2], 'keys')
        if not (k and mine) or keys_cover(entry[2][k], fields[mine]) then return false end
      end
      if marked and mine then
        local prior = decoded(marked)
        local k = prior and field_at(prior, 'keys')
        if k then fields[mine] = keys_union(prior[k], fields[mine]) end
      end
      redis.call('HSET', KEYS[2], ARGV[1],
        id .. ':' .. at .. ':' .. ((tonumber(n) or 0) + 1) .. ':' .. cjson.encode(fields))
      return false
    end
    -- the marker no longer stands for a job (its entry deleted by hand or trimmed, or
    -- held by a stuck worker): the new job replaces it, and covers the enqueues marked
    -- on it too, which were promised a repair after them
    local marked = string.match(rest, '^:%d+:(.*)$')
    local prior = marked and mine and decoded(marked)
    local k = prior and field_at(prior, 'keys')
    if k then fields[mine] = keys_union(fields[mine], prior[k]) end
  end
end
local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
redis.call('HSET', KEYS[2], ARGV[1], id .. ':' .. now)
return id

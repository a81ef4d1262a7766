-- enqueue: KEYS stream, marker hash, delayed set; ARGV group, (unused), marker_ttl_ms,
-- consumer group, entry fields... Times are the server's (`now`), never a client's:
-- a client whose clock is off would misjudge the age of another's marker.
-- Returns the new entry's id, or false when the group's pending job covers this call.
--! include now
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then
  local id, at, rest = string.match(cur, '^([^:]+):(%d+)(.*)$')
  at = tonumber(at)
  if id and at and (now - at) < tonumber(ARGV[3]) then
    if string.sub(id, 1, 2) == '0-' then
      -- a retry waiting in the delayed set reads the group later: it covers this call
      if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return false end
      id = nil
    end
  end
  if id and at and (now - at) < tonumber(ARGV[3]) then
    local fields = {}
    for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
    if #redis.call('XPENDING', KEYS[1], ARGV[4], id, id, 1) > 0 then
      local n = (tonumber(string.match(rest, '^:(%d+):')) or 0) + 1
      redis.call('HSET', KEYS[2], ARGV[1],
        id .. ':' .. at .. ':' .. n .. ':' .. cjson.encode(fields))
      return false
    end
    if #redis.call('XRANGE', KEYS[1], id, id) > 0 then return false end
  end
end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
redis.call('HSET', KEYS[2], ARGV[1], id .. ':' .. now)
return id

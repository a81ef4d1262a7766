--! idempotent
-- RAISE_FLOOR  KEYS[1] a data key's version hash; ARGV: version, token. A write that
-- is no transaction's made that stamp current at the key, and its own call could not
-- reach the key's version hash (topology/_floor.py): the hash's floor rises to it, if
-- the hash exists. Replies 1 (raised, or already at or above it) or 0 (no hash); an
-- error when it holds another type (the write is then reported failed at that key).
--! include older
--! include version_hash
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if not floor_at(KEYS[1], ARGV[1], ARGV[2]) then
  return redis.error_reply('WRONGTYPE the version hash ' .. KEYS[1] .. ' holds another type')
end
return 1

--! idempotent
-- held: KEYS stream; ARGV consumer group, id, holder ('' for any). 1 while the entry is
-- in the group's pending list (a worker holds it) and, given a holder, held by that
-- consumer; else 0 (another worker took it over, acked or retried it).
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or ((ARGV[3] or '') ~= '' and p[1][2] ~= ARGV[3]) then return 0 end
return 1

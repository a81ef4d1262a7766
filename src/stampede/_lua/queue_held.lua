--! idempotent
-- held: KEYS stream; ARGV consumer group, id. 1 while the entry is in the group's
-- pending list (a worker holds it), else 0 (another worker acked or retried it).
return #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)

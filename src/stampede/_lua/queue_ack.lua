--! idempotent
-- ack: XACK + XDEL the entry. If the marker still names it: drop the marker, or, when
-- enqueues found the job already taken (marker `<id>:<ms>:<n>:<fields>`), add their
-- newest fields as the follow-up job and point the marker at it. Returns its id.
-- Run again (its reply lost, resent), it changes nothing: the entry is gone and the
-- marker names another entry or none, so no second follow-up job; it returns false.
--! include now
--! include queue_follow_up
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return follow_up(KEYS[1], KEYS[2], ARGV[3], ARGV[2])

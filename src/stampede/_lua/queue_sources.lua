--! idempotent
-- sources: KEYS dead-letter stream, its sources; ARGV max_len. `trim_sources` after
-- dead letters were deleted (requeued): the sources set goes with them.
--! include queue_trim_sources
trim_sources(KEYS[1], KEYS[2], tonumber(ARGV[1]))
return 1

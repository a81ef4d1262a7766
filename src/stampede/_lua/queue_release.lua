--! idempotent
-- release: KEYS stream, the call's receipt; ARGV consumer group, id, idle_ms, holder ('' for any), the
-- hand-back consumer (`HANDED_BACK`, a name no worker may take).
-- Hand a job back: idle past min_idle, so that any worker takes it at once, and with
-- the delivery its claim counted taken back: a stop is neither a failure nor a
-- worker's death, so handing a job back never brings it nearer its dead letter.
-- A job that `holder` no longer holds (another worker took it over, or it was acked)
-- is not the caller's to hand back: nothing changes, and it returns 0. Run again (its
-- reply lost, resent), it finds its receipt and returns 1 again, the delivery count
-- taken back once (before receipts, it was never resent: `OutcomeUnknownError`).
--! include queue_receipt
local first = receipt(KEYS[2])
if first then return first end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or (ARGV[4] ~= '' and p[1][2] ~= ARGV[4]) then return 0 end
local n = math.max(tonumber(p[1][4]) - 1, 0)
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[5], 0, ARGV[2], 'IDLE', ARGV[3],
  'RETRYCOUNT', n, 'JUSTID')
return keep(KEYS[2], 1)

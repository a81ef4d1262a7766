--! fragment
-- Inside `for i = 1, #KEYS / 2`: the i-th (data key, version hash) pair, `b` where
-- its six ARGV start (after ARGV[1]), and its envelope and metadata (ARGV b+5, b+6).
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local b = 1 + (i - 1) * 6
  local env, meta = ARGV[b + 5], ARGV[b + 6]

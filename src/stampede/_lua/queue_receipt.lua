--! fragment
-- A call's receipt: a key of the call's own (`<stream's tag>:receipt:<token>`, the token
-- drawn once per call, the same on a resend), written by the call's first run with
-- what it returned, expiring after ten minutes (a resend comes within seconds). A
-- resend after a lost reply finds it and returns that again, changing nothing: the
-- call is safe to resend though its first run moved the job on.
local function receipt(key)
  local kept = redis.call('GET', key)
  if not kept then return nil end
  local kind, value = string.sub(kept, 1, 1), string.sub(kept, 3)
  if kind == 'f' then return false end
  if kind == 'n' then return tonumber(value) end
  return value
end
-- Write the receipt of this run (`value`: false, a number or a string) and return it.
local function keep(key, value)
  local kept
  if value == false then kept = 'f:'
  elseif type(value) == 'number' then kept = 'n:' .. value
  else kept = 's:' .. value end
  redis.call('SET', key, kept, 'PX', 600000)
  return value
end

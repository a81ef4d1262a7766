--! fragment
-- `now`: the server's clock in unix milliseconds.
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)

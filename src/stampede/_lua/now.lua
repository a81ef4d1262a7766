--! fragment
-- `now`: the server's clock in unix milliseconds. (TIME's two numbers as text are
-- read by the arithmetic itself: two `tonumber` calls cost twice as much.)
local tm = redis.call('TIME')
local now = tm[1] * 1000 + math.floor(tm[2] / 1000)

-- The writes of one call, shared by the three scripts (placed before each).
-- Decisions read a key's state from `cur` (the call's MGET, then what an
-- earlier decision of the call left); `stage` records an admitted
-- decision's new state and expiry for one key; `flush`, after the last
-- decision, SETs each staged key once with its last state, in the order
-- the keys were first staged.
local cur, px, order = {}, {}, {}
local function stage(k, state, ms)
  if not px[k] then order[#order + 1] = k end
  cur[k] = state
  px[k] = ms
end
local function flush()
  for i = 1, #order do
    local k = order[i]
    redis.call('SET', k, cur[k], 'PX', px[k])
  end
end

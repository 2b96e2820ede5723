-- drl: one decision, all quotas of one limit, all-or-nothing, atomically.
--
-- KEYS[i]: the state of quota i (all in one hash slot).
-- ARGV[1]: now in ns (decimal), or "t" to read the Redis server clock (TIME)
-- ARGV[2]: algorithm name;  ARGV[3]: cost (decimal);  ARGV[4]: expiry grace (ms)
-- ARGV[5 + 5(i-1) ..]: quota i: limit, window, cap, need ("x": cost too
--   large for this quota), lw (limit * window).
-- Returns {admitted (1/0), now (decimal), state_1, ..., state_n} where
-- state_i is the stored state BEFORE this decision ("" when fresh).
local now
if ARGV[1] == 't' then
  local t = redis.call('TIME')
  now = N(t[1] .. string.format('%06d', tonumber(t[2])) .. '000')
else
  now = N(ARGV[1])
end
local alg = ALG[ARGV[2]]
if not alg then return redis.error_reply('drl: unknown algorithm ' .. tostring(ARGV[2])) end
local cost = N(ARGV[3])
local grace = tonumber(ARGV[4])
local out = {0, S(now)}
local admit = true
local writes = {}
for i = 1, #KEYS do
  local b = 4 + (i - 1) * 5
  local raw = redis.call('GET', KEYS[i])
  if raw then out[i + 2] = raw else out[i + 2] = '' end
  if admit then
    local need = ARGV[b + 4]
    if need == 'x' then need = false end
    local q = {limit = ARGV[b + 1], window = ARGV[b + 2], cap = ARGV[b + 3], need = need, lw = ARGV[b + 5]}
    local ok, state, fresh_in = alg(q, raw, now, cost)
    if ok then writes[i] = {state, fresh_in} else admit = false end
  end
end
if admit then
  out[1] = 1
  if not is_zero(cost) then
    for i = 1, #KEYS do
      local w = writes[i]
      -- Expire once the state is fresh again: ceil(fresh_in / 1 ms) + grace.
      local ms, rest = divmod_small(w[2], 1000000)
      local px = to_double(ms) + grace
      if rest > 0 then px = px + 1 end
      if px < 1 then px = 1 end
      redis.call('SET', KEYS[i], w[1], 'PX', string.format('%.0f', px))
    end
  end
end
return out

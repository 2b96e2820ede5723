-- drl: a batch of decisions in order, each deciding all quotas of one
-- limit, all-or-nothing; the whole call is atomic.
--
-- KEYS: every decision's keys in order (decision d has nq_d keys, the state
-- of its quota i; one decision's keys share one hash slot, and on a cluster
-- the client puts only keys of one slot in a call).
-- ARGV[1]: expiry grace (ms). Then per decision, in order:
--   now in ns (decimal), or "t" to read the Redis server clock (TIME; read
--   once per call, so every "t" decision of a call has the same now),
--   algorithm name (preceded by '+' for a charge: consume cost in every
--   quota whatever it holds, into debt if need be; by '-' for a refund:
--   give back up to cost units of a reservation in every quota, each on
--   its own; the verdict of both is 1),
--   cost (decimal), nq,
--   then per quota: limit, window, cap, need ("x": cost too large for this
--   quota; for a charge or a refund always cost * T in full), lw (limit *
--   window; for a refund, the quota's mark instead).
-- Returns, per decision in order: admitted (1/0), now (decimal), state_1,
-- ..., state_nq, where state_i is the quota's state BEFORE this decision
-- ("" when fresh). A key decided twice in one call sees the state the first
-- decision left (decisions are sequential); all keys are read with one MGET
-- and each written key is SET once at the end with its last state.
local grace = tonumber(ARGV[1])
local vals
if #KEYS == 1 then vals = {redis.call('GET', KEYS[1])} else vals = redis.call('MGET', unpack(KEYS)) end
for i = 1, #KEYS do
  local k = KEYS[i]
  if cur[k] == nil then cur[k] = vals[i] end
end
local tnow -- Redis TIME, read on first use
local out, o = {}, 0
local a, ki = 2, 0 -- next ARGV index, last KEYS index used
while a <= #ARGV do
  local now
  if ARGV[a] == 't' then
    if not tnow then
      local t = redis.call('TIME')
      tnow = N(t[1] .. string.format('%06d', tonumber(t[2])) .. '000')
    end
    now = tnow
  else
    now = N(ARGV[a])
  end
  local name = ARGV[a + 1]
  local first = string.byte(name, 1)
  local charging = first == 43 -- '+'
  local refunding = first == 45 -- '-'
  local alg
  if charging then
    alg = CHARGE[string.sub(name, 2)]
  elseif refunding then
    alg = REFUND[string.sub(name, 2)]
  else
    alg = ALG[name]
  end
  if not alg then return redis.error_reply('drl: unknown algorithm ' .. tostring(name)) end
  local cost = N(ARGV[a + 2])
  local write = not is_zero(cost)
  local nq = tonumber(ARGV[a + 3])
  local base = o
  out[o + 2] = S(now)
  local admit = true
  local writes = {}
  for i = 1, nq do
    local b = a + 3 + (i - 1) * 5
    local raw = cur[KEYS[ki + i]]
    if raw then out[o + 2 + i] = raw else out[o + 2 + i] = '' end
    if charging or refunding then
      if write then
        local q = {limit = ARGV[b + 1], window = ARGV[b + 2], cap = ARGV[b + 3], need = ARGV[b + 4], mark = ARGV[b + 5]}
        local state, fresh_in = alg(q, raw, now, cost)
        -- A refund that changes nothing (gives nothing back, or leaves the
        -- very state it found) writes nothing, as the module.
        if state and state ~= raw then writes[i] = {state, fresh_in} end
      end
    elseif admit then
      local need = ARGV[b + 4]
      if need == 'x' then need = false end
      local q = {limit = ARGV[b + 1], window = ARGV[b + 2], cap = ARGV[b + 3], need = need, lw = ARGV[b + 5]}
      local ok, state, fresh_in = alg(q, raw, now, cost)
      if ok then writes[i] = {state, fresh_in} else admit = false end
    end
  end
  if admit then
    out[base + 1] = 1
    if write then
      for i = 1, nq do
        local w = writes[i]
        if w then
          local k = KEYS[ki + i]
          -- Expire once the state is fresh again: ceil(fresh_in / 1 ms) +
          -- grace, fresh_in saturated at 2^64 - 1 ns as drl-core's
          -- reset_after (the module's expiry) is.
          local ms, rest = divmod_small(satu(w[2]), 1000000)
          local p = to_double(ms) + grace
          if rest > 0 then p = p + 1 end
          if p < 1 then p = 1 end
          stage(k, w[1], string.format('%.0f', p))
        end
      end
    end
  else
    out[base + 1] = 0
  end
  o = o + 2 + nq
  ki = ki + nq
  a = a + 4 + 5 * nq
end
flush()
return out

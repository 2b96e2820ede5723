-- drl: the seven algorithms of docs/semantics.md, admission rule and state update
-- only (the derived fields of the decision are computed by the client from
-- the pre-decision state this script returns, with drl-core's own code).
--
-- Each function takes the quota q (decimal strings: limit, window, cap =
-- burst*T, need = cost*T or false when cost exceeds the capacity, lw =
-- limit*window), the stored state string (or false when the key is
-- missing, i.e. fresh), now (limbs) and cost (limbs). It returns
-- admit, new state string, and the wait (ns, limbs) until the new state is
-- fresh again (the key's expiry). Stored states are space-separated decimal
-- fields, the first always `last` (the clock clamp of docs/semantics.md).
local ALG = {}

-- Token bucket: "last credit" (credit = tokens * T). A stored credit above
-- cap is a debt: it encodes credit - 2^64 (docs/semantics.md, "Debt"). So
-- the bucket is decided as the meter it equals, on level = cap - credit
-- modulo 2^64 (0 <= level <= 2^64 - 1), and stored back the same way.
local TWO64 = N('18446744073709551616')
local MAXU = N('18446744073709551615')

local function tb_level(cap, credit)
  if cmp(credit, cap) <= 0 then return sub(cap, credit) end
  return sub(add(cap, TWO64), credit)
end

local function tb_credit(cap, level)
  if cmp(level, cap) <= 0 then return sub(cap, level) end
  return sub(add(cap, TWO64), level)
end

-- min(x, 2^64 - 1): the depth bound of every debt.
local function satu(x)
  if cmp(x, MAXU) > 0 then return MAXU end
  return x
end

-- (last, level) of a stored token bucket.
local function tb_state(cap, raw)
  if not raw then return ZERO, ZERO end
  local f = fields(raw)
  return f[1], tb_level(cap, f[2])
end

ALG['token-bucket'] = function(q, raw, now, cost)
  if not q.need then return false end
  local cap = N(q.cap)
  local last, level = tb_state(cap, raw)
  now = max(now, last)
  local after = add(subsat(level, sub(now, last)), N(q.need))
  if cmp(after, cap) > 0 then return false end
  return true, S(now) .. ' ' .. S(sub(cap, after)), after
end

-- Leaky bucket (meter): "last level" (level * T), drains one unit per ns.
ALG['leaky-bucket'] = function(q, raw, now, cost)
  if not q.need then return false end
  local last, level = ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, level = f[1], f[2]
  end
  now = max(now, last)
  local after = add(subsat(level, sub(now, last)), N(q.need))
  if cmp(after, N(q.cap)) > 0 then return false end
  return true, S(now) .. ' ' .. S(after), after
end

-- GCRA and the shaper: "last ahead" with tat = last + ahead.
local function gcra(q, raw, now, cost)
  if not q.need then return false end
  local last, ahead = ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, ahead = f[1], f[2]
  end
  now = max(now, last)
  local queued = subsat(add(last, ahead), now)
  local new_ahead = add(queued, N(q.need))
  if cmp(new_ahead, N(q.cap)) > 0 then return false end
  return true, S(now) .. ' ' .. S(new_ahead), new_ahead
end
ALG['gcra'] = gcra
ALG['leaky-queue'] = gcra

-- Fixed window: "last index count".
ALG['fixed-window'] = function(q, raw, now, cost)
  if not q.need then return false end
  local last, index, count = ZERO, ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, index, count = f[1], f[2], f[3]
  end
  now = max(now, last)
  local w = N(q.window)
  local idx, elapsed = divmod(now, w)
  if cmp(idx, index) ~= 0 then count = ZERO end
  local after = add(count, cost)
  if cmp(after, N(q.limit)) > 0 then return false end
  return true, S(now) .. ' ' .. S(idx) .. ' ' .. S(after), sub(w, elapsed)
end

-- Sliding log: "last ts1 cost1 ts2 cost2 ..." (oldest first). An entry
-- counts while now - ts < window.
ALG['sliding-log'] = function(q, raw, now, cost)
  if not q.need then return false end
  local f = {ZERO}
  if raw then f = fields(raw) end
  now = max(now, f[1])
  local w = N(q.window)
  local used = ZERO
  local live = {}
  for i = 2, #f - 1, 2 do
    if cmp(add(f[i], w), now) > 0 then
      used = add(used, f[i + 1])
      live[#live + 1] = f[i]
      live[#live + 1] = f[i + 1]
    end
  end
  if cmp(add(used, cost), N(q.limit)) > 0 then return false end
  local n = #live
  if n > 0 and cmp(live[n - 1], now) == 0 then
    live[n] = add(live[n], cost)
  else
    live[n + 1] = now
    live[n + 2] = cost
  end
  local parts = {S(now)}
  for i = 1, #live do parts[i + 1] = S(live[i]) end
  return true, table.concat(parts, ' '), w
end

-- Sliding window counter (strict): "last index prev curr".
ALG['sliding-window'] = function(q, raw, now, cost)
  if not q.need then return false end
  local last, index, prev, curr = ZERO, ZERO, ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, index, prev, curr = f[1], f[2], f[3], f[4]
  end
  now = max(now, last)
  local w = N(q.window)
  local idx, elapsed = divmod(now, w)
  local c = cmp(idx, index)
  if c ~= 0 then
    if cmp(idx, add(index, ONE)) == 0 then
      prev, curr = curr, ZERO
    else
      prev, curr = ZERO, ZERO
    end
  end
  local to_end = sub(w, elapsed)
  local after = add(curr, cost)
  if cmp(add(mul(prev, to_end), mul(after, w)), N(q.lw)) > 0 then return false end
  return true,
    S(now) .. ' ' .. S(idx) .. ' ' .. S(prev) .. ' ' .. S(after),
    add(to_end, w)
end

-- Charges (docs/semantics.md, "Costs known afterwards"): consume cost at
-- now whatever the state holds, into debt if need be, each field up to
-- 2^64 - 1 at most. Same arguments as above, q.need = cost * T in full
-- (never "x"); cost > 0. Returns the new state string and the wait (ns,
-- limbs) until it is fresh.
local CHARGE = {}

CHARGE['token-bucket'] = function(q, raw, now, cost)
  local cap = N(q.cap)
  local last, level = tb_state(cap, raw)
  now = max(now, last)
  local after = satu(add(subsat(level, sub(now, last)), N(q.need)))
  return S(now) .. ' ' .. S(tb_credit(cap, after)), after
end

CHARGE['leaky-bucket'] = function(q, raw, now, cost)
  local last, level = ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, level = f[1], f[2]
  end
  now = max(now, last)
  local after = satu(add(subsat(level, sub(now, last)), N(q.need)))
  return S(now) .. ' ' .. S(after), after
end

local function gcra_charge(q, raw, now, cost)
  local last, ahead = ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, ahead = f[1], f[2]
  end
  now = max(now, last)
  local after = satu(add(subsat(add(last, ahead), now), N(q.need)))
  return S(now) .. ' ' .. S(after), after
end
CHARGE['gcra'] = gcra_charge
CHARGE['leaky-queue'] = gcra_charge

CHARGE['fixed-window'] = function(q, raw, now, cost)
  local last, index, count = ZERO, ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, index, count = f[1], f[2], f[3]
  end
  now = max(now, last)
  local w = N(q.window)
  local idx, elapsed = divmod(now, w)
  if cmp(idx, index) ~= 0 then count = ZERO end
  local after = satu(add(count, cost))
  return S(now) .. ' ' .. S(idx) .. ' ' .. S(after), sub(w, elapsed)
end

-- The log keeps at most limit entries: past that, the oldest entry's cost
-- moves into the next one (drl-core's sliding_log::charge).
CHARGE['sliding-log'] = function(q, raw, now, cost)
  local f = {ZERO}
  if raw then f = fields(raw) end
  now = max(now, f[1])
  local w = N(q.window)
  local live = {}
  for i = 2, #f - 1, 2 do
    if cmp(add(f[i], w), now) > 0 then
      live[#live + 1] = f[i]
      live[#live + 1] = f[i + 1]
    end
  end
  local n = #live
  if n > 0 and cmp(live[n - 1], now) == 0 then
    live[n] = satu(add(live[n], cost))
  else
    live[n + 1] = now
    live[n + 2] = cost
  end
  local limit = N(q.limit)
  local first = 1
  while cmp(from_double((#live - first + 1) / 2), limit) > 0 do
    live[first + 3] = satu(add(live[first + 1], live[first + 3]))
    first = first + 2
  end
  local parts = {S(now)}
  for i = first, #live do parts[#parts + 1] = S(live[i]) end
  return table.concat(parts, ' '), w
end

CHARGE['sliding-window'] = function(q, raw, now, cost)
  local last, index, prev, curr = ZERO, ZERO, ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, index, prev, curr = f[1], f[2], f[3], f[4]
  end
  now = max(now, last)
  local w = N(q.window)
  local idx, elapsed = divmod(now, w)
  if cmp(idx, index) ~= 0 then
    if cmp(idx, add(index, ONE)) == 0 then
      prev, curr = curr, ZERO
    else
      prev, curr = ZERO, ZERO
    end
  end
  local after = satu(add(curr, cost))
  return S(now) .. ' ' .. S(idx) .. ' ' .. S(prev) .. ' ' .. S(after),
    add(sub(w, elapsed), w)
end

-- Refunds (docs/semantics.md, "Costs known afterwards"): give back up to
-- cost units of a reservation admitted with q.mark (the quota's
-- drl_core::Mark, a decimal string), only what of it still holds the state
-- back, exactly as drl-core's `refund` of each algorithm. q.need = cost * T
-- in full. Returns the new state string and the wait (ns, limbs) until it
-- is fresh (drl-core's `reset_after` right after, as the module uses), or
-- nothing when the refund gives nothing back (no write).

-- The bucket family gives back min(cost * T, mark - now) ns, 0 once now
-- has passed the mark.
local function refund_ns(q, now)
  return min(N(q.need), subsat(N(q.mark), now))
end

local REFUND = {}

REFUND['token-bucket'] = function(q, raw, now, cost)
  local cap = N(q.cap)
  local last, level = tb_state(cap, raw)
  now = max(now, last)
  local back = refund_ns(q, now)
  if is_zero(back) then return end
  local after = subsat(subsat(level, sub(now, last)), back)
  return S(now) .. ' ' .. S(tb_credit(cap, after)), after
end

REFUND['leaky-bucket'] = function(q, raw, now, cost)
  local last, level = ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, level = f[1], f[2]
  end
  now = max(now, last)
  local back = refund_ns(q, now)
  if is_zero(back) then return end
  local after = subsat(subsat(level, sub(now, last)), back)
  return S(now) .. ' ' .. S(after), after
end

local function gcra_refund(q, raw, now, cost)
  local last, ahead = ZERO, ZERO
  if raw then
    local f = fields(raw)
    last, ahead = f[1], f[2]
  end
  now = max(now, last)
  local back = refund_ns(q, now)
  if is_zero(back) then return end
  local after = subsat(subsat(add(last, ahead), now), back)
  return S(now) .. ' ' .. S(after), after
end
REFUND['gcra'] = gcra_refund
REFUND['leaky-queue'] = gcra_refund

-- Only while the mark's window lasts (its count is gone after it).
REFUND['fixed-window'] = function(q, raw, now, cost)
  if not raw then return end
  local f = fields(raw)
  local last, index, count = f[1], f[2], f[3]
  now = max(now, last)
  local w = N(q.window)
  local idx, elapsed = divmod(now, w)
  local mark = N(q.mark)
  if cmp(idx, mark) ~= 0 or cmp(index, mark) ~= 0 or is_zero(cost) or is_zero(count) then return end
  local after = subsat(count, cost)
  local fresh_in = ZERO
  if not is_zero(after) then fresh_in = sub(w, elapsed) end
  return S(now) .. ' ' .. S(index) .. ' ' .. S(after), fresh_in
end

-- From the entry logged at the mark, while it counts; an entry brought to
-- 0 is dropped. The other entries stay as they are.
REFUND['sliding-log'] = function(q, raw, now, cost)
  if not raw or is_zero(cost) then return end
  local f = fields(raw)
  now = max(now, f[1])
  local w = N(q.window)
  local mark = N(q.mark)
  if cmp(subsat(now, mark), w) >= 0 then return end
  local parts, found, newest = {S(now)}, false, nil
  for i = 2, #f - 1, 2 do
    local c = f[i + 1]
    if not found and cmp(f[i], mark) == 0 then
      found = true
      c = subsat(c, cost)
    end
    if not is_zero(c) then
      parts[#parts + 1] = S(f[i])
      parts[#parts + 1] = S(c)
      newest = f[i]
    end
  end
  if not found then return end
  -- Fresh once the newest entry left stops counting.
  local fresh_in = ZERO
  -- Fresh once the newest entry left stops counting.
  local fresh_in = ZERO
  if newest then fresh_in = subsat(add(newest, w), now) end
  return table.concat(parts, ' '), fresh_in
end

-- From curr while the mark's window lasts, from prev during the next one.
REFUND['sliding-window'] = function(q, raw, now, cost)
  if not raw then return end
  local f = fields(raw)
  local last, index, prev, curr = f[1], f[2], f[3], f[4]
  now = max(now, last)
  local w = N(q.window)
  local idx, elapsed = divmod(now, w)
  if cmp(idx, index) ~= 0 then
    if cmp(idx, add(index, ONE)) == 0 then
      prev, curr = curr, ZERO
    else
      prev, curr = ZERO, ZERO
    end
  end
  local mark = N(q.mark)
  if is_zero(cost) then return end
  if cmp(idx, mark) == 0 then
    if is_zero(curr) then return end
    curr = subsat(curr, cost)
  elseif cmp(idx, add(mark, ONE)) == 0 then
    if is_zero(prev) then return end
    prev = subsat(prev, cost)
  else
    return
  end
  local fresh_in = ZERO
  if not is_zero(curr) then
    fresh_in = add(sub(w, elapsed), w)
  elseif not is_zero(prev) then
    fresh_in = sub(w, elapsed)
  end
  return S(now) .. ' ' .. S(idx) .. ' ' .. S(prev) .. ' ' .. S(curr), fresh_in
end

-- drl: fast path for token-bucket, leaky-bucket, gcra and leaky-queue when
-- every quota's capacity burst*T is below 2^53 ns (~104 days), the case of
-- virtually every real limit. Same keys, stored states, call layout and
-- reply as main.lua (see there), so either script can serve a key.
--
-- One call decides a batch of requests in order (see main.lua for the
-- layout). ARGV: grace (ms), then per decision: now ("t": Redis TIME, read
-- once per call), algorithm, cost, nq, then per quota: cap (burst*T), need
-- (cost*T, or "x" when cost > burst). KEYS: every decision's nq keys in
-- order. The verdict is 1 (admitted), 0 (denied) or 2 (undecided: some
-- quota's stored state holds more than its capacity, a debt left by a
-- charge, which this script does not decide, whatever the cost or the
-- other quotas; or a key an earlier decision of the call left undecided).
-- It writes nothing for an undecided decision, and the client decides it
-- again with main.lua, in order: every later decision on its keys is
-- undecided too, so none is answered ahead of it. All keys are read with
-- one MGET (GET for one); a key decided twice in one call sees the first
-- decision's state (a table of current values); each written key is SET
-- once at the end, with its last state.
--
-- Exactness: the only quantities that can exceed 2^53 are absolute times,
-- held as (seconds, nanoseconds) pairs, both far below 2^53. A time
-- difference is computed exactly when below 2^53 and otherwise saturated at
-- 2^53, which is larger than any capacity, so every min/compare against a
-- capacity gives the exact result. Credits, levels and `ahead` this script
-- decides on never exceed the capacity (larger ones are debts, left
-- undecided), so they are exact doubles. Written for speed: few tables,
-- few string operations.
local sub, fmt, tonum, find, fmod = string.sub, string.format, tonumber, string.find, math.fmod
local grace = tonum(ARGV[1])
local vals
if #KEYS == 1 then vals = {redis.call('GET', KEYS[1])} else vals = redis.call('MGET', unpack(KEYS)) end
for i = 1, #KEYS do
  local k = KEYS[i]
  if cur[k] == nil then cur[k] = vals[i] end
end
-- tonumber of ARGV strings, memoized: a batch repeats the same few.
-- (A lone decision parses each argument once: plain tonumber.)
local num = tonum
if #KEYS > 1 then
  local nums = {}
  num = function(x)
    local v = nums[x]
    if not v then
      v = tonum(x)
      nums[x] = v
    end
    return v
  end
end
-- An integral double as decimal: concatenation (Lua's "%.14g") is exact
-- and cheaper than string.format below 10^14.
local function dec(x)
  if x < 1e14 then return '' .. x end
  return fmt('%d', x)
end
-- Expiry strings, memoized by value: formatting a number is the most
-- expensive thing a script does here, and a batch repeats the same few.
local pxs = {}
local t_s, t_ns, t_dec -- Redis TIME, read on first use
local p_dec, p_s, p_ns -- the previous caller time, parsed
local out, o = {}, 0
local a, ki = 2, 0 -- next ARGV index, last KEYS index used
local nargv = #ARGV
local ws, wp = {}, {} -- one decision's new states and expiries (scratch)
local tainted -- keys of this call's undecided decisions (nil: none yet)
while a <= nargv do
  local a1 = ARGV[a]
  local now_s, now_ns, now_dec
  if a1 == 't' then
    if not t_dec then
      local t = redis.call('TIME')
      t_s, t_ns = tonum(t[1]), tonum(t[2]) * 1000
      t_dec = t[1] .. fmt('%06d', t[2]) .. '000'
    end
    now_s, now_ns, now_dec = t_s, t_ns, t_dec
  else
    if a1 ~= p_dec then
      local n = #a1
      if n <= 9 then
        p_s, p_ns = 0, tonum(a1)
      else
        p_s, p_ns = tonum(sub(a1, 1, n - 9)), tonum(sub(a1, n - 8))
      end
      p_dec = a1
    end
    now_s, now_ns, now_dec = p_s, p_ns, a1
  end
  local alg = ARGV[a + 1]
  local kind = 0 -- gcra, leaky-queue
  if alg == 'token-bucket' then kind = 1 elseif alg == 'leaky-bucket' then kind = 2 end
  local write = ARGV[a + 2] ~= '0'
  local nq = num(ARGV[a + 3])
  local base = o
  out[o + 2] = now_dec
  local admit = true
  local undecided = false
  for i = 1, nq do
    local k = KEYS[ki + i]
    local raw = cur[k]
    out[o + 2 + i] = raw or ''
    local cap = num(ARGV[a + 2 + 2 * i])
    local sp, x
    if raw and not undecided then
      sp = find(raw, ' ', 1, true)
      x = tonum(sub(raw, sp + 1))
      -- A stored field above the capacity (only a charge writes one: a
      -- debt) is beyond this script's exact range: undecided, whatever
      -- the other quotas or the cost say, so that every decision on a key
      -- in debt waits for the general script, in order. (tonumber rounds
      -- monotonically and cap < 2^53, so the test is exact.)
      if x > cap then undecided = true end
    end
    -- A key an earlier decision of this call left undecided: deciding now
    -- would answer ahead of that decision.
    if tainted and tainted[k] then undecided = true end
    if undecided then admit = false end
    if admit then
      local need_dec = ARGV[a + 3 + 2 * i]
      if need_dec == 'x' then
        admit = false
      else
        local need = num(need_dec)
        local s, ns = now_s, now_ns
        local last = now_dec -- decimal of max(now, stored last)
        if not raw then
          x = 0
          if kind == 1 then x = cap end
        end
        local d = 9007199254740992 -- 2^53: "long ago" for a missing state
        if raw then
          local n = sp - 1
          local ls, lns
          if n <= 9 then
            ls, lns = 0, tonum(sub(raw, 1, n))
          else
            ls, lns = tonum(sub(raw, 1, n - 9)), tonum(sub(raw, n - 8, n))
          end
          -- Clock clamp: now = max(now, last).
          if s < ls or (s == ls and ns < lns) then
            s, ns = ls, lns
            last = sub(raw, 1, n)
          end
          local ds = s - ls
          if ds < 9000000 then d = ds * 1000000000 + (ns - lns) end
        end
        local after, fresh
        if kind == 1 then
          local c = x + d
          if c > cap then c = cap end
          if c < need then admit = false end
          after = c - need
          fresh = cap - after
        else
          local level = x - d
          if level < 0 then level = 0 end
          after = level + need
          if after > cap then admit = false end
          fresh = after
        end
        if admit and write then
          -- A drained meter or queue (the common case) holds just `need`.
          if after == need then
            ws[i] = last .. ' ' .. need_dec
          else
            ws[i] = last .. ' ' .. dec(after)
          end
          local rest = fmod(fresh, 1000000)
          local p = (fresh - rest) / 1000000 + grace
          if rest > 0 then p = p + 1 end
          if p < 1 then p = 1 end
          local ps = pxs[p]
          if not ps then
            ps = dec(p)
            pxs[p] = ps
          end
          wp[i] = ps
        end
      end
    end
  end
  if admit then
    out[base + 1] = 1
    if write then
      for i = 1, nq do stage(KEYS[ki + i], ws[i], wp[i]) end
    end
  elseif undecided then
    out[base + 1] = 2
    if not tainted then tainted = {} end
    for i = 1, nq do tainted[KEYS[ki + i]] = true end
  else
    out[base + 1] = 0
  end
  o = o + 2 + nq
  ki = ki + nq
  a = a + 4 + 2 * nq
end
flush()
return out

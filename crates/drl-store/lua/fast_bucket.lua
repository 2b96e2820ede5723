-- drl: fast path for token-bucket, leaky-bucket, gcra and leaky-queue when
-- every quota's capacity burst*T is below 2^53 ns (~104 days), the case of
-- virtually every real limit. Same keys, stored states and reply as
-- main.lua (see there), so either script can serve a key; shorter ARGV:
-- now ("t": Redis TIME), algorithm, cost, grace (ms), then per quota: cap
-- (burst*T), need (cost*T, or "x" when cost > burst).
--
-- Exactness: the only quantities that can exceed 2^53 are absolute times,
-- held as (seconds, nanoseconds) pairs, both far below 2^53. A time
-- difference is computed exactly when below 2^53 and otherwise saturated at
-- 2^53, which is larger than any capacity, so every min/compare against a
-- capacity gives the exact result. Credits, levels and `ahead` never exceed
-- the capacity, so they are exact doubles.
local E9 = 1000000000
local BIG = 9007199254740992 -- 2^53

local function split(dec)
  local n = #dec
  if n <= 9 then return 0, tonumber(dec) end
  return tonumber(string.sub(dec, 1, n - 9)), tonumber(string.sub(dec, n - 8))
end

local function join(s, ns)
  if s == 0 then return string.format('%d', ns) end
  return s .. string.format('%09d', ns)
end

local now_s, now_ns
if ARGV[1] == 't' then
  local t = redis.call('TIME')
  now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
else
  now_s, now_ns = split(ARGV[1])
end
local alg = ARGV[2]
local tb = alg == 'token-bucket'
local lb = alg == 'leaky-bucket'
local grace = tonumber(ARGV[4])
local nq = #KEYS
local out = {0, join(now_s, now_ns)}
local admit = true
local new_x = {}
local new_s, new_ns = {}, {}
local fresh = {}
for i = 1, nq do
  local b = 2 + i * 2
  local raw = redis.call('GET', KEYS[i])
  if raw then out[i + 2] = raw else out[i + 2] = '' end
  if admit then
    local cap = tonumber(ARGV[b + 1])
    local need = ARGV[b + 2]
    if need == 'x' then
      admit = false
    else
      need = tonumber(need)
      local ls, lns, x = 0, 0, 0
      if tb then x = cap end
      if raw then
        local a, v = string.match(raw, '^(%d+) (%d+)$')
        ls, lns = split(a)
        x = tonumber(v)
      end
      -- Clock clamp: now = max(now, last).
      local s, ns = now_s, now_ns
      if s < ls or (s == ls and ns < lns) then s, ns = ls, lns end
      local ds = s - ls
      local d
      if ds >= 9000000 then d = BIG else d = ds * E9 + (ns - lns) end
      local after, ok
      if tb then
        local c = x + d
        if c > cap then c = cap end
        ok = c >= need
        after = c - need
        fresh[i] = cap - after
      elseif lb then
        local level = x - d
        if level < 0 then level = 0 end
        after = level + need
        ok = after <= cap
        fresh[i] = after
      else
        local queued = x - d
        if queued < 0 then queued = 0 end
        after = queued + need
        ok = after <= cap
        fresh[i] = after
      end
      if ok then
        new_x[i], new_s[i], new_ns[i] = after, s, ns
      else
        admit = false
      end
    end
  end
end
if admit then
  out[1] = 1
  if ARGV[3] ~= '0' then
    for i = 1, nq do
      local f = fresh[i]
      local rest = math.fmod(f, 1000000)
      local px = (f - rest) / 1000000 + grace
      if rest > 0 then px = px + 1 end
      if px < 1 then px = 1 end
      redis.call('SET', KEYS[i], join(new_s[i], new_ns[i]) .. ' ' .. string.format('%d', new_x[i]),
        'PX', string.format('%d', px))
    end
  end
end
return out

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
-- the capacity, so they are exact doubles. Written for speed: few tables,
-- few string operations.
local sub, fmt, tonum = string.sub, string.format, tonumber
local now_s, now_ns, now_dec
local a1 = ARGV[1]
if a1 == 't' then
  local t = redis.call('TIME')
  now_s, now_ns = tonum(t[1]), tonum(t[2]) * 1000
  now_dec = t[1] .. fmt('%06d', t[2]) .. '000'
else
  local n = #a1
  if n <= 9 then
    now_s, now_ns = 0, tonum(a1)
  else
    now_s, now_ns = tonum(sub(a1, 1, n - 9)), tonum(sub(a1, n - 8))
  end
  now_dec = a1
end
local alg = ARGV[2]
local kind = 0 -- gcra, leaky-queue
if alg == 'token-bucket' then kind = 1 elseif alg == 'leaky-bucket' then kind = 2 end
local grace = tonum(ARGV[4])
local out = {0, now_dec}
local writes = {}
local admit = true
for i = 1, #KEYS do
  local raw = redis.call('GET', KEYS[i])
  out[i + 2] = raw or ''
  if admit then
    local need = ARGV[4 + 2 * i]
    if need == 'x' then
      admit = false
    else
      need = tonum(need)
      local cap = tonum(ARGV[3 + 2 * i])
      local s, ns, x = now_s, now_ns, 0
      if kind == 1 then x = cap end
      local d = 9007199254740992 -- 2^53: "long ago" for a missing state
      if raw then
        local sp = string.find(raw, ' ', 1, true)
        local n = sp - 1
        local ls, lns
        if n <= 9 then
          ls, lns = 0, tonum(sub(raw, 1, n))
        else
          ls, lns = tonum(sub(raw, 1, n - 9)), tonum(sub(raw, n - 8, n))
        end
        x = tonum(sub(raw, sp + 1))
        -- Clock clamp: now = max(now, last).
        if s < ls or (s == ls and ns < lns) then s, ns = ls, lns end
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
      if admit then
        local state
        if s == 0 then state = fmt('%d %d', ns, after) else state = fmt('%d%09d %d', s, ns, after) end
        local rest = math.fmod(fresh, 1000000)
        local px = (fresh - rest) / 1000000 + grace
        if rest > 0 then px = px + 1 end
        if px < 1 then px = 1 end
        writes[i] = state
        writes[-i] = fmt('%d', px)
      end
    end
  end
end
if admit then
  out[1] = 1
  if ARGV[3] ~= '0' then
    for i = 1, #KEYS do
      redis.call('SET', KEYS[i], writes[i], 'PX', writes[-i])
    end
  end
end
return out

-- drl: fast path for fixed-window, sliding-window and sliding-log with
-- doubles. Same keys, stored states and reply as main.lua (see there), so
-- either script can serve a key. Used only when (checked by the client):
--   every window < 2^53 ns and every limit < 2^53;
--   fixed-window, sliding-window: every window a whole number of seconds;
--   sliding-window: 3 * limit * window < 2^53.
-- ARGV: now ("t": Redis TIME), algorithm, cost, grace (ms), then per quota:
-- limit, window (ns), need ("x" when cost > limit, else "1").
--
-- Exactness: absolute times are (seconds, nanoseconds) pairs; with a window
-- of W whole seconds the window index is floor(s / W) (fmod is exact) and
-- the elapsed part (s mod W) * 10^9 + ns < window < 2^53. Differences of
-- times are exact below 2^53 and saturated above (larger than any window).
-- Counts and costs are at most the limit (< 2^53) when they matter, and the
-- sliding-window products are bounded by 3 * limit * window < 2^53.
local sub, fmt, tonum, fmod = string.sub, string.format, tonumber, math.fmod
local E9 = 1000000000

local function split(d)
  local n = #d
  if n <= 9 then return 0, tonum(d) end
  return tonum(sub(d, 1, n - 9)), tonum(sub(d, n - 8))
end

local function join(s, ns)
  if s == 0 then return fmt('%d', ns) end
  return fmt('%d%09d', s, ns)
end

local now_s, now_ns, now_dec
local a1 = ARGV[1]
if a1 == 't' then
  local t = redis.call('TIME')
  now_s, now_ns = tonum(t[1]), tonum(t[2]) * 1000
  now_dec = t[1] .. fmt('%06d', t[2]) .. '000'
else
  now_s, now_ns = split(a1)
  now_dec = a1
end
local alg = ARGV[2]
local cost = tonum(ARGV[3]) -- exact whenever used: cost <= limit < 2^53
local grace = tonum(ARGV[4])
local out = {0, now_dec}
local writes = {}
local admit = true
for i = 1, #KEYS do
  local raw = redis.call('GET', KEYS[i])
  out[i + 2] = raw or ''
  local b = 1 + 3 * i
  if admit and ARGV[b + 3] == 'x' then admit = false end
  if admit then
    local limit, w = tonum(ARGV[b + 1]), tonum(ARGV[b + 2])
    local s, ns = now_s, now_ns
    local state, fresh
    if alg == 'sliding-log' then
      local f = {}
      if raw then
        for x in string.gmatch(raw, '%S+') do f[#f + 1] = x end
        local ls, lns = split(f[1])
        if s < ls or (s == ls and ns < lns) then s, ns = ls, lns end
      end
      local used, live = 0, {}
      for j = 2, #f - 1, 2 do
        local ts, tns = split(f[j])
        local ds = s - ts
        -- Live while now - ts < window (saturated difference if huge).
        if ds < 9000000 and ds * E9 + (ns - tns) < w then
          used = used + tonum(f[j + 1])
          live[#live + 1] = f[j]
          live[#live + 1] = f[j + 1]
        end
      end
      if used + cost > limit then
        admit = false
      else
        local nowstr = join(s, ns)
        local n = #live
        if n > 0 and live[n - 1] == nowstr then
          live[n] = fmt('%d', tonum(live[n]) + cost)
        else
          live[n + 1] = nowstr
          live[n + 2] = fmt('%d', cost)
        end
        state = nowstr .. ' ' .. table.concat(live, ' ')
        fresh = w
      end
    else
      local index, c1, c2 = -2, 0, 0
      if raw then
        local f1, f2, f3, f4 = string.match(raw, '^(%d+) (%d+) (%d+) ?(%d*)$')
        local ls, lns = split(f1)
        if s < ls or (s == ls and ns < lns) then s, ns = ls, lns end
        index, c1, c2 = tonum(f2), tonum(f3), tonum(f4)
      end
      local W = w / E9
      local r = fmod(s, W)
      local idx = (s - r) / W
      local elapsed = r * E9 + ns
      if alg == 'fixed-window' then
        -- state: last index count
        if idx ~= index then c1 = 0 end
        local after = c1 + cost
        if after > limit then
          admit = false
        else
          state = join(s, ns) .. fmt(' %d %d', idx, after)
          fresh = w - elapsed
        end
      else
        -- sliding-window, state: last index prev curr
        local prev, curr = c1, c2
        if idx ~= index then
          if idx == index + 1 then prev, curr = curr, 0 else prev, curr = 0, 0 end
        end
        local to_end = w - elapsed
        local after = curr + cost
        if prev * to_end + after * w > limit * w then
          admit = false
        else
          state = join(s, ns) .. fmt(' %d %d %d', idx, prev, after)
          fresh = to_end + w
        end
      end
    end
    if admit then
      local rest = fmod(fresh, 1000000)
      local px = (fresh - rest) / 1000000 + grace
      if rest > 0 then px = px + 1 end
      if px < 1 then px = 1 end
      writes[i] = state
      writes[-i] = fmt('%d', px)
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

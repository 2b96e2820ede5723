-- drl: fast path for fixed-window, sliding-window and sliding-log with
-- doubles. Same keys, stored states and reply as main.lua (see there), so
-- either script can serve a key. Used only when (checked by the client):
--   every window < 2^53 ns and every limit < 2^53;
--   fixed-window, sliding-window: every window a whole number of seconds;
--   sliding-window: 3 * limit * window < 2^53.
-- One call decides a batch of requests in order, like main.lua (see there
-- for the layout and the reply). ARGV: grace (ms), then per decision: now
-- ("t": Redis TIME, read once per call), algorithm, cost, nq, then per
-- quota: limit, window (ns), need ("x" when cost > limit, else "1").
-- KEYS: every decision's nq keys in order. One MGET reads them all; a key
-- decided twice in one call sees the first decision's state; each written
-- key is SET once at the end, with its last state.
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

-- Decimal strings of integral doubles, memoized: formatting a number is the
-- most expensive thing a script does here, and a batch repeats the same
-- few (window indexes, counts, expiries).
local decs = {}
local function dec(x)
  local d = decs[x]
  if not d then
    d = fmt('%d', x)
    decs[x] = d
  end
  return d
end

local grace = tonum(ARGV[1])
local vals
if #KEYS == 1 then vals = {redis.call('GET', KEYS[1])} else vals = redis.call('MGET', unpack(KEYS)) end
for i = 1, #KEYS do
  local k = KEYS[i]
  if cur[k] == nil then cur[k] = vals[i] end
end
local t_s, t_ns, t_dec -- Redis TIME, read on first use
local out, o = {}, 0
local a, ki = 2, 0 -- next ARGV index, last KEYS index used
while a <= #ARGV do
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
    now_s, now_ns = split(a1)
    now_dec = a1
  end
  local alg = ARGV[a + 1]
  local cost = tonum(ARGV[a + 2]) -- exact whenever used: cost <= limit < 2^53
  local write = ARGV[a + 2] ~= '0'
  local nq = tonum(ARGV[a + 3])
  local base = o
  out[o + 2] = now_dec
  local admit = true
  local ws, wp = {}, {} -- this decision's new states and expiries
  for i = 1, nq do
    local raw = cur[KEYS[ki + i]]
    out[o + 2 + i] = raw or ''
    local b = a + 1 + 3 * i
    if admit and ARGV[b + 2] == 'x' then admit = false end
    if admit then
      local limit, w = tonum(ARGV[b]), tonum(ARGV[b + 1])
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
        local last = now_dec -- decimal of max(now, stored last)
        if raw then
          local f1, f2, f3, f4 = string.match(raw, '^(%d+) (%d+) (%d+) ?(%d*)$')
          local ls, lns = split(f1)
          if s < ls or (s == ls and ns < lns) then
            s, ns = ls, lns
            last = f1
          end
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
            state = last .. ' ' .. dec(idx) .. ' ' .. dec(after)
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
            state = last .. ' ' .. dec(idx) .. ' ' .. dec(prev) .. ' ' .. dec(after)
            fresh = to_end + w
          end
        end
      end
      if admit and write then
        local rest = fmod(fresh, 1000000)
        local p = (fresh - rest) / 1000000 + grace
        if rest > 0 then p = p + 1 end
        if p < 1 then p = 1 end
        ws[i] = state
        wp[i] = dec(p)
      end
    end
  end
  if admit then
    out[base + 1] = 1
    if write then
      for i = 1, nq do stage(KEYS[ki + i], ws[i], wp[i]) end
    end
  else
    out[base + 1] = 0
  end
  o = o + 2 + nq
  ki = ki + nq
  a = a + 4 + 3 * nq
end
flush()
return out

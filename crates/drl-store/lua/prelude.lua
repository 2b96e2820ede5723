-- drl: exact unsigned integer arithmetic for Redis Lua.
--
-- Lua numbers are IEEE doubles, exact only up to 2^53, while drl's times are
-- u64 nanoseconds (~1.8e18 today) and some products are u128. So every
-- quantity is held as an array of base-10^7 limbs, least significant first
-- ({3, 2} is 2*10^7 + 3). A limb product is below 10^14 and a column sum of
-- a few of them stays far below 2^53, so every step below is exact. Decimal
-- strings (the wire and storage format) convert by cutting 7-digit chunks.
local B = 10000000
local ZERO = {0}

-- Decimal string -> limbs.
local function N(s)
  local r, i, n = {}, 1, #s
  while n > 0 do
    local lo = n - 6
    if lo < 1 then lo = 1 end
    r[i] = tonumber(string.sub(s, lo, n))
    i = i + 1
    n = lo - 1
  end
  if i == 1 then r[1] = 0 end
  return r
end

-- Number of significant limbs (at least 1).
local function len(a)
  local n = #a
  while n > 1 and a[n] == 0 do n = n - 1 end
  return n
end

-- Limbs -> decimal string.
local function S(a)
  local n = len(a)
  local parts = {string.format('%d', a[n])}
  for i = n - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

local function cmp(a, b)
  local n = #a
  if #b > n then n = #b end
  for i = n, 1, -1 do
    local x, y = a[i] or 0, b[i] or 0
    if x ~= y then
      if x < y then return -1 end
      return 1
    end
  end
  return 0
end

local function is_zero(a)
  return len(a) == 1 and a[1] == 0
end

local function add(a, b)
  local r, c = {}, 0
  local n = #a
  if #b > n then n = #b end
  for i = 1, n do
    local s = (a[i] or 0) + (b[i] or 0) + c
    if s >= B then r[i] = s - B; c = 1 else r[i] = s; c = 0 end
  end
  if c > 0 then r[n + 1] = c end
  return r
end

-- a - b; requires a >= b.
local function sub(a, b)
  local r, c = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - c
    if s < 0 then r[i] = s + B; c = 1 else r[i] = s; c = 0 end
  end
  return r
end

-- max(a - b, 0)
local function subsat(a, b)
  if cmp(a, b) <= 0 then return ZERO end
  return sub(a, b)
end

local function mul(a, b)
  local na, nb = len(a), len(b)
  local r = {}
  for i = 1, na + nb do r[i] = 0 end
  for i = 1, na do
    local ai, c = a[i], 0
    if ai ~= 0 then
      for j = 1, nb do
        local t = r[i + j - 1] + ai * b[j] + c
        c = math.floor(t / B)
        r[i + j - 1] = t - c * B
      end
      local k = i + nb
      while c > 0 do
        local t = r[k] + c
        c = math.floor(t / B)
        r[k] = t - c * B
        k = k + 1
      end
    end
  end
  return r
end

-- (a div d, a mod d) for a plain number 0 < d < B.
local function divmod_small(a, d)
  local q, r = {}, 0
  for i = len(a), 1, -1 do
    local t = r * B + a[i]
    local qi = math.floor(t / d)
    q[i] = qi
    r = t - qi * d
  end
  return q, r
end

local function to_double(a)
  local x = 0
  for i = len(a), 1, -1 do x = x * B + a[i] end
  return x
end

-- A non-negative integral double below 2^53 -> limbs.
local function from_double(x)
  local r, i = {}, 1
  repeat
    local m = math.fmod(x, B)
    r[i] = m
    x = (x - m) / B
    i = i + 1
  until x == 0
  return r
end

local ONE = {1}

-- (a div d, a mod d), d > 0. For a multi-limb d the quotient of u64
-- operands is below 2^64 / 10^7 < 2^41, so the double estimate is within
-- one of the truth; the loops correct it exactly.
local function divmod(a, d)
  if len(d) == 1 then
    local q, r = divmod_small(a, d[1])
    return q, {r}
  end
  local q = from_double(math.floor(to_double(a) / to_double(d)))
  local p = mul(q, d)
  while cmp(p, a) > 0 do
    q = sub(q, ONE)
    p = sub(p, d)
  end
  local r = sub(a, p)
  while cmp(r, d) >= 0 do
    q = add(q, ONE)
    r = sub(r, d)
  end
  return q, r
end

local function min(a, b)
  if cmp(a, b) <= 0 then return a end
  return b
end

local function max(a, b)
  if cmp(a, b) >= 0 then return a end
  return b
end

-- Splits a stored state "f1 f2 ..." into limbs.
local function fields(raw)
  local out = {}
  for w in string.gmatch(raw, '%S+') do out[#out + 1] = N(w) end
  return out
end

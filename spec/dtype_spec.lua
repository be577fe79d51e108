-- Bit-exact dtype conversions (DESIGN.md: round to nearest even, inf/NaN handled, fp8
-- saturating like PTX cvt .satfinite). Every bit pattern of fp16, bf16, fp8e4m3 and fp8e5m2
-- is decoded by an independent pure-Lua decoder (sign/exponent/mantissa arithmetic) and
-- checked against normlab's conversions through buffers: the write path (from_table, write),
-- the copy path (astype, to: nl_convert) and reads. Every midpoint between adjacent finite
-- values of every type (and between max and max + ULP) is checked to round to the even
-- neighbour, and the midpoint moved by 1/16 ULP and by 2^-30 ULP to round to the nearer one
-- (a double rounding through fp32 loses the 2^-30 ULP offsets, so they catch an fp64 -> fp32
-- -> fp16/bf16 path). Also: overflow (inf, or +-max for fp8, infinities included), signed
-- zeros, NaN, every pair of dtypes, random values against an independent rounder, and the
-- CPU kernels' own load/store helpers against the buffer conversions.
--
-- Values travel through buffers (compared bit for bit: equal, and the same sign for zeros);
-- raw patterns through nl.encode and nl.decode (nl_convert on raw elements), which tie every
-- pattern to its value directly: a store can never produce fp8e5m2's inf patterns (inf
-- saturates), so their decoding is only reachable raw.
local nl = require("normlab")

local cpu = nl.device("cpu")
local NAN, INF = 0 / 0, math.huge

---- the formats, independent of normlab ----

-- e: exponent bits, m: mantissa bits, ieee: the all-ones exponent is inf/NaN (else e4m3fn:
-- only S.1111.111 is NaN), sat: stores saturate overflow and infinities to +-max.
local FMT = {
  fp16 = {e = 5, m = 10, ieee = true, sat = false},
  bf16 = {e = 8, m = 7, ieee = true, sat = false},
  fp8e4m3 = {e = 4, m = 3, ieee = false, sat = true},
  fp8e5m2 = {e = 5, m = 2, ieee = true, sat = true},
  fp32 = {e = 8, m = 23, ieee = true, sat = false},
}
local SMALL = {"fp16", "bf16", "fp8e4m3", "fp8e5m2"}

for name, f in pairs(FMT) do
  f.name = name
  f.bits = 1 + f.e + f.m
  f.bias = 2 ^ (f.e - 1) - 1
  f.emin = 1 - f.bias
  -- Largest positive finite pattern, and the largest finite value.
  f.maxp = f.ieee and (2 ^ f.e - 1) * 2 ^ f.m - 1 or 2 ^ (f.e + f.m) - 2
  local emax = math.floor(f.maxp / 2 ^ f.m) - f.bias
  local mant = f.maxp % 2 ^ f.m
  f.max = (1 + mant / 2 ^ f.m) * 2 ^ emax
  f.top_ulp = 2 ^ (emax - f.m)                   -- spacing just below max
end
assert(FMT.fp16.max == 65504 and FMT.bf16.max == (2 - 2 ^ -7) * 2 ^ 127)
assert(FMT.fp8e4m3.max == 448 and FMT.fp8e5m2.max == 57344)

-- The value of bit pattern p (0 <= p < 2^bits), from sign, exponent and mantissa fields.
local function decode(f, p)
  local signbit = 2 ^ (f.e + f.m)
  local neg = p >= signbit
  if neg then
    p = p - signbit
  end
  local ef = math.floor(p / 2 ^ f.m)
  local mf = p - ef * 2 ^ f.m
  local v
  if f.ieee and ef == 2 ^ f.e - 1 then
    v = mf == 0 and INF or NAN
  elseif not f.ieee and ef == 2 ^ f.e - 1 and mf == 2 ^ f.m - 1 then
    v = NAN
  elseif ef == 0 then
    v = mf * 2 ^ (f.emin - f.m)
  else
    v = (2 ^ f.m + mf) * 2 ^ (ef - f.bias - f.m)
  end
  return neg and -v or v
end

-- floor(log2(a)) for finite a > 0.
local LN2 = math.log(2)
local function exponent(a)
  local e = math.floor(math.log(a) / LN2)
  while 2 ^ e > a do
    e = e - 1
  end
  while 2 ^ (e + 1) <= a do
    e = e + 1
  end
  return e
end

-- x rounded to format f (nil: fp64, x itself) to nearest, ties to even, as a store does:
-- overflow to inf, or to +-max where f saturates; NaN stays NaN; the sign of zero is kept.
local function round_to(f, x)
  if f == nil or x ~= x or x == 0 then
    return x
  end
  local a, r = math.abs(x), INF
  if a ~= INF then
    local e = exponent(a)
    if e < f.emin then
      e = f.emin                                 -- subnormals: fixed quantum
    end
    local q = 2 ^ (e - f.m)
    local n = a / q                              -- exact: q is a power of two
    local k = math.floor(n)
    local d = n - k
    if d > 0.5 or (d == 0.5 and k % 2 == 1) then
      k = k + 1
    end
    r = k * q
  end
  if r > f.max then
    r = f.sat and f.max or (f.ieee and INF or NAN)
  end
  return x < 0 and -r or r + 0.0
end

---- comparing values bit for bit ----

local function same(a, b)
  if a ~= a then
    return b ~= b
  end
  return a == b and (a ~= 0 or 1 / a == 1 / b)
end

local function show(v)
  return v ~= v and "nan" or string.format("%a", v)
end

-- Asserts got[i] is the same value as want[i] for every i; the message names the first few
-- mismatches with label(i) and the values in hex float notation.
local function check_list(what, got, want, label)
  assert.are.equal(#want, #got, what .. ": element count")
  local bad, lines = 0, {}
  for i = 1, #want do
    if not same(got[i], want[i]) then
      bad = bad + 1
      if #lines < 8 then
        lines[#lines + 1] = string.format("  %s: got %s, want %s", label and label(i) or ("#" .. i),
          show(got[i]), show(want[i]))
      end
    end
  end
  assert(bad == 0, string.format("%s: %d of %d differ\n%s", what, bad, #want,
    table.concat(lines, "\n")))
end

---- normlab's conversions, a whole list at a time ----

-- values rounded to dtype by one path through normlab, read back as fp64:
--   write   from_table(values, dtype) (nl_buf_write_f64)
--   astype  from_table(values, "fp64"):astype(dtype) (nl_convert)
--   to      from_table(values, "fp64"):to(cpu, dtype)
--   fp32    through an fp32 buffer first (values must be fp32-exact; checked)
local function through(path, values, dtype)
  local src, out, mid
  if path == "write" then
    out = cpu:from_table(values, dtype)
  else
    src = cpu:from_table(values, "fp64")
    if path == "astype" then
      out = src:astype(dtype)
    elseif path == "to" then
      out = src:to(cpu, dtype)
    else
      mid = src:astype("fp32")
      check_list("inputs are fp32-exact", mid:read(0, #values), values)
      out = mid:astype(dtype)
    end
  end
  local got = out:read(0, #values)
  for _, b in ipairs({src, mid, out}) do
    b:free()
  end
  return got
end

-- Every pattern of f and its value: patterns as a list (index p + 1), values likewise.
local patterns, values = {}, {}
for _, name in ipairs(SMALL) do
  local f, ps, vs = FMT[name], {}, {}
  for p = 0, 2 ^ f.bits - 1 do
    ps[#ps + 1] = p
    vs[#vs + 1] = decode(f, p)
  end
  patterns[name], values[name] = ps, vs
end

local function hex(f, p)
  return string.format(f.bits == 16 and "0x%04x" or "0x%02x", p)
end

-- The rounding cases of f: for every pair of adjacent finite values (lo, hi), both signs, the
-- midpoint goes to the neighbour with the even pattern, and the midpoint -+ 1/16 ULP and
-- -+ 2^-30 ULP to lo and hi; plus the overflow pair (max, max + ULP): inf or, saturating, max.
local function rounding_cases(f)
  local vs = values[f.name]
  local inputs, want, why = {}, {}, {}
  local function add(x, y, note)
    inputs[#inputs + 1], want[#want + 1], why[#why + 1] = x, y, note
    inputs[#inputs + 1], want[#want + 1], why[#why + 1] = -x, -y, note
  end
  for p = 0, f.maxp - 1 do
    local lo, hi = vs[p + 1], vs[p + 2]
    local mid, u = (lo + hi) / 2, hi - lo
    local note = hex(f, p) .. "/" .. hex(f, p + 1)
    add(mid, p % 2 == 0 and lo or hi, note .. " midpoint")
    add(mid - u / 16, lo, note .. " midpoint - ulp/16")
    add(mid + u / 16, hi, note .. " midpoint + ulp/16")
    add(mid - u * 2 ^ -30, lo, note .. " midpoint - 2^-30 ulp")
    add(mid + u * 2 ^ -30, hi, note .. " midpoint + 2^-30 ulp")
  end
  local over = f.sat and f.max or INF
  local mid = f.max + f.top_ulp / 2
  add(mid, over, "max/max+ulp midpoint")
  add(mid - f.top_ulp * 2 ^ -30, f.max, "max/max+ulp midpoint - 2^-30 ulp")
  add(mid + f.top_ulp * 2 ^ -30, over, "max/max+ulp midpoint + 2^-30 ulp")
  add(f.max + f.top_ulp, over, "max + ulp")
  add(2 * f.max, over, "2 max")
  add(1e300, over, "1e300")
  add(INF, over, "inf")
  return inputs, want, why
end

describe("dtype conversions", function()
  for _, name in ipairs(SMALL) do
    local f = FMT[name]
    describe(name, function()
      it("decode every bit pattern exactly and encode each value back", function()
        local vs = values[name]
        -- What a store gives back: the value itself, except that fp8e5m2's infinities
        -- saturate to +-max (so no store can produce its inf patterns).
        local stored = {}
        for i = 1, #vs do
          stored[i] = round_to(f, vs[i])
        end
        local function label(i)
          return "pattern " .. hex(f, i - 1)
        end
        -- write: one rounding into the dtype; astype/to: nl_convert; fp32: via fp32
        -- (every value of these formats is an fp32 value).
        for _, path in ipairs({"write", "astype", "to", "fp32"}) do
          check_list(name .. " via " .. path, through(path, vs, name), stored, label)
        end
        -- And back out of the dtype into fp32 and fp64 buffers.
        local b = cpu:from_table(vs, name)
        for _, dst in ipairs({"fp32", "fp64"}) do
          local c = b:astype(dst)
          check_list(name .. " -> " .. dst, c:read(0, #vs), stored, label)
          c:free()
        end
        b:free()
      end)

      it("round every midpoint to the even neighbour and nearby values to the nearer", function()
        local inputs, want, why = rounding_cases(f)
        local function label(i)
          return string.format("%s (input %s)", why[i], show(inputs[i]))
        end
        for _, path in ipairs({"write", "astype"}) do
          check_list(name .. " rounding via " .. path, through(path, inputs, name), want, label)
        end
        -- From an fp32 source: the inputs that fp32 holds exactly (midpoints, +-ulp/16).
        local i32, w32 = {}, {}
        for i = 1, #inputs do
          if not why[i]:find("2^-30", 1, true) and inputs[i] ~= 1e300 and inputs[i] ~= -1e300
              and (math.abs(inputs[i]) <= FMT.fp32.max or math.abs(inputs[i]) == INF) then
            i32[#i32 + 1], w32[#w32 + 1] = inputs[i], want[i]
          end
        end
        check_list(name .. " rounding from fp32", through("fp32", i32, name), w32)
      end)

      it("overflow to " .. (f.sat and "+-max (infinities too)" or "+-inf"), function()
        local over = f.sat and f.max or INF
        local mid = f.max + f.top_ulp / 2
        local inputs = {f.max, mid - f.top_ulp / 4, mid, f.max * 4, 1.7976931348623157e308, INF}
        local want = {f.max, f.max, over, over, over, over}
        for i = 1, #want do
          inputs[#inputs + 1], want[#want + 1] = -inputs[i], -want[i]
        end
        for _, path in ipairs({"write", "astype"}) do
          check_list(name .. " overflow via " .. path, through(path, inputs, name), want)
        end
        -- fill stores through the same rounding
        local b = cpu:empty(3, name)
        for i = 1, #inputs do
          b:fill(inputs[i])
          assert(same(want[i], b:get(2)), string.format("fill(%s) gave %s, want %s",
            show(inputs[i]), show(b:get(2)), show(want[i])))
        end
        b:free()
      end)

      it("keep the sign of zero, flush tiny values to signed zero and keep NaN", function()
        local s = 2 ^ (f.emin - f.m)             -- smallest subnormal
        local inputs = {0.0, -0.0, s / 2, -s / 2, s / 4, -s / 4, 1e-300, -1e-300, 2 ^ -1074,
          -2 ^ -1074, NAN, -NAN}
        local want = {0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, NAN, NAN}
        for _, path in ipairs({"write", "astype", "to"}) do
          check_list(name .. " zeros and NaN via " .. path, through(path, inputs, name), want)
        end
        local b = cpu:empty(2, name)
        b:fill(-0.0)
        assert(same(-0.0, b:get(1)), "fill(-0.0)")
        b:fill(NAN)
        assert(same(NAN, b:get(2)), "fill(nan)")
        b:free()
      end)
    end)
  end

  it("convert between every pair of dtypes with one rounding", function()
    for _, src in ipairs(SMALL) do
      local vs = {}
      for i, v in ipairs(values[src]) do
        vs[i] = round_to(FMT[src], v)            -- what the source buffer holds
      end
      local b = cpu:from_table(vs, src)
      for _, dst in ipairs({"fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp32", "fp64"}) do
        local want = {}
        for i = 1, #vs do
          want[i] = round_to(FMT[dst], vs[i])
        end
        local c = b:astype(dst)
        check_list(src .. " -> " .. dst, c:read(0, #vs), want, function(i)
          return string.format("pattern %s (%s)", hex(FMT[src], i - 1), show(vs[i]))
        end)
        c:free()
      end
      b:free()
    end
  end)

  it("round random fp64 values across each exponent range like an independent rounder",
    function()
      -- Park-Miller: the same sequence under every interpreter.
      local state = 20240607
      local function rand()
        state = state * 16807 % 2147483647
        return state / 2147483647
      end
      for _, name in ipairs({"fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp32"}) do
        local f = FMT[name]
        local lo_e, hi_e = f.emin - f.m - 3, exponent(f.max) + 2
        local inputs, want = {}, {}
        for i = 1, 20000 do
          -- a 52-bit random significand in [1, 2), a random exponent, a random sign
          local m = 1 + math.floor(rand() * 2 ^ 26) * 2 ^ -26 + math.floor(rand() * 2 ^ 26) * 2 ^ -52
          local x = m * 2 ^ (lo_e + math.floor(rand() * (hi_e - lo_e + 1)))
          if rand() < 0.5 then
            x = -x
          end
          inputs[i], want[i] = x, round_to(f, x)
        end
        for _, path in ipairs({"write", "astype"}) do
          check_list(name .. " random via " .. path .. " (seed 20240607)",
            through(path, inputs, name), want, function(i) return "input " .. show(inputs[i]) end)
        end
      end
    end)
end)

-- The CPU kernels convert with their own row helpers (F16C, branch-free bf16, a fast fp64 ->
-- bf16), which must agree with the buffer conversions bit for bit. LayerNorm of a constant row
-- without weight is y = 0 * rstd + b = b, so its output is the bias converted by the kernel's
-- load (bias in the activation dtype) or rounded by its store (fp32 bias). -0 comes out +0
-- (0 + -0).
describe("the CPU kernels' conversions", function()
  local function layernorm_of_bias(v, dt, b)
    local x = cpu:full({1, #b}, 1, dt)
    local y, mean, rstd = nl.layernorm(x, nil, b, {variant = v})
    local got = y:read(0, #b)
    for _, buf in ipairs({x, y, mean, rstd}) do
      buf:free()
    end
    return got
  end

  -- want, except +0 where the bias itself is a zero
  local function plus_zero(want, bias)
    local out = {}
    for i, v in ipairs(want) do
      out[i] = bias[i] == 0 and 0.0 or v
    end
    return out
  end

  for _, dt in ipairs({"fp16", "bf16"}) do
    it(dt .. ": every value loaded and stored back by ref, row and persistent", function()
      local vs = values[dt]
      local b = cpu:from_table(vs, dt)
      for _, v in ipairs({"ref", "row", "persistent"}) do
        check_list(dt .. " layernorm." .. v .. " bias load/store", layernorm_of_bias(v, dt, b),
          plus_zero(vs, vs), function(i) return "pattern " .. hex(FMT[dt], i - 1) end)
      end
      b:free()
    end)

    it(dt .. ": fp32 values rounded to nearest even by the stores of ref, row and persistent",
      function()
        local inputs, want, why = rounding_cases(FMT[dt])
        local i32, w32, n32 = {}, {}, {}
        for i = 1, #inputs do
          local a = math.abs(inputs[i])
          if not why[i]:find("2^-30", 1, true) and (a <= FMT.fp32.max or a == INF) then
            i32[#i32 + 1], w32[#w32 + 1], n32[#n32 + 1] = inputs[i], want[i], why[i]
          end
        end
        local b = cpu:from_table(i32, "fp32")
        check_list(dt .. " fp32 bias exact", b:read(0, #i32), i32)
        for _, v in ipairs({"ref", "row", "persistent"}) do
          check_list(dt .. " layernorm." .. v .. " bias store", layernorm_of_bias(v, dt, b),
            plus_zero(w32, i32), function(i) return n32[i] end)
        end
        b:free()
      end)
  end
end)

---- raw bit patterns (nl.encode, nl.decode: nl_convert on raw elements) ----

describe("raw bit patterns", function()
  for _, name in ipairs(SMALL) do
    local f = FMT[name]
    it(name .. ": every pattern decodes to its value and encodes back", function()
      local n = 2 ^ f.bits
      local bits = {}
      for p = 0, n - 1 do
        bits[p + 1] = p
      end
      check_list(name .. " decode", nl.decode(name, bits), values[name],
        function(i) return hex(f, i - 1) end)
      -- encode: every value gives its own pattern back (fp8e5m2's infinities: max), NaNs
      -- some NaN pattern
      local back = nl.encode(name, values[name])
      local bad = {}
      for p = 0, n - 1 do
        local v = values[name][p + 1]
        local want = round_to(f, v)
        local ok
        if v ~= v then
          local d = decode(f, back[p + 1])
          ok = d ~= d
        else
          ok = same(decode(f, back[p + 1]), want) and (want ~= v or back[p + 1] == p)
        end
        if not ok and #bad < 8 then
          bad[#bad + 1] = string.format("%s -> %s", hex(f, p), hex(f, back[p + 1]))
        end
      end
      assert(#bad == 0, name .. " encode: " .. table.concat(bad, ", "))
    end)

    it(name .. ": rounding cases give the expected patterns", function()
      local inputs, want, why = rounding_cases(f)
      local out = nl.encode(name, inputs)
      local got = {}
      for i = 1, #inputs do
        got[i] = decode(f, out[i])
      end
      check_list(name .. " rounding (patterns decoded here)", got, want, function(i)
        return string.format("%s: pattern %s", why[i], hex(f, out[i]))
      end)
    end)
  end

  it("refuses fp64, lists that are not lists and out-of-range patterns", function()
    assert.has_error(function() nl.encode("fp64", {1}) end)
    assert.has_error(function() nl.decode("bf16", 3) end)
    assert.has_error(function() nl.decode("fp8e4m3", {256}) end)
    assert.has_error(function() nl.decode("fp16", {-1}) end)
  end)
end)

-- A weight of -0 is a weight: at offset 0 the kernels multiply by it as it is (w + 0 would make
-- it +0), so y takes the sign of x times -0, as the GPU's kernels give it. An fp32 weight
-- beside 16-bit x takes the same path through the weight's own load.
describe("a -0 weight at offset 0", function()
  for _, case in ipairs({{"fp32", "fp32"}, {"bf16", "bf16"}, {"fp16", "fp16"}, {"bf16", "fp32"}}) do
    local dt, wdt = case[1], case[2]
    it(dt .. " x, " .. wdt .. " weight: ref, row and persistent keep the sign of x times -0", function()
      local x = cpu:from_table({1, -1, 2, -2}, dt)
      local w = cpu:from_table({-0.0, -0.0, 1, -1}, wdt)
      for _, v in ipairs({"ref", "row", "persistent"}) do
        local y, rstd = nl.rmsnorm(x, w, {variant = v})
        local got = y:read(0, 4)
        check_list(dt .. " rmsnorm." .. v, {got[1], got[2]}, {-0.0, 0.0})
        assert(got[3] > 0 and got[4] > 0, v .. ": the weighted columns")
        y:free()
        rstd:free()
      end
      x:free()
      w:free()
    end)
  end
end)

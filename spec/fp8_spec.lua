-- The fp8 output of the forwards, their transposed copy yt and the transpose op on the CPU
-- (spec/drivers.lua: this spec drives transpose.fwd on the CPU):
--   ref's fp8 y against an independent Lua computation (the norm in fp64 here, times the
--     scale, rounded to fp32, then to fp8 by nl.encode): the same bits wherever the fp32 value
--     cannot differ (its fp32 neighbours round to the same fp8 value), at most one fp8 ulp
--     elsewhere (counted); amax = max |y| within fp32 rounding; every CPU strategy against ref
--     the same way (bits equal or one ulp apart, the ulp-off elements counted and few);
--   saturation, NaN and Inf inputs, scale 0 and huge scales, current scaling (the scale from
--     amax, amax = 0 giving 1), yt strided and external giving y's bits transposed;
--   the transpose op exact for every dtype on odd shapes (M, N in 1, 7, 33, 127, 4099, and
--     3 x 100000), its fp8 cast against Lua bit for bit, cast_transpose's y and yt the same
--     bits, strided buffers, tile settings;
--   run info (transpose, scaling, bytes), and bad options: a clear error, outputs untouched.
local nl = require("normlab")
local helper = require("spec.helper")
local drivers = require("spec.drivers")

local cpu = nl.device("cpu")
local keep = helper.keeper(after_each)
local raises = helper.raises
local NAN, INF = 0 / 0, math.huge
local FP8 = {"fp8e4m3", "fp8e5m2"}
local FP8_MAX = {fp8e4m3 = 448, fp8e5m2 = 57344}

---- values and bits ----

local function values(b)
  return b:read(0, #b)
end

-- Values rounded to dt (a store and a load), a list at a time.
local function rounded(dt, list)
  return nl.decode(dt, nl.encode(dt, list))
end

local function isnan(v)
  return v ~= v
end

-- The fp8 bits expected for fp64 values v times scale: one rounding to fp32, then to fp8.
-- Also whether each is certain: the neighbouring fp32 values round to the same fp8 bits, so a
-- value off by an fp32 ulp still gives these bits.
local function expected_fp8(dt, v, scale)
  local prod = {}
  for i, y in ipairs(v) do
    prod[i] = y * scale
  end
  local b32 = nl.encode("fp32", prod)
  local lo, hi = {}, {}
  for i, b in ipairs(b32) do
    local mag = b % 2 ^ 31
    lo[i] = mag > 0 and b - 1 or b
    hi[i] = mag < 0x7f800000 and b + 1 or b
  end
  local v32 = nl.decode("fp32", b32)
  local bits = nl.encode(dt, v32)
  local blo, bhi = nl.encode(dt, nl.decode("fp32", lo)), nl.encode(dt, nl.decode("fp32", hi))
  local certain = {}
  for i = 1, #bits do
    certain[i] = blo[i] == bits[i] and bhi[i] == bits[i]
  end
  return bits, certain
end

-- Compares fp8 bits got against want: NaN patterns match any NaN; elsewhere equal, or (when
-- not certain[i]) one ulp apart with the same sign. Returns the count of one-ulp differences;
-- fails on anything else, naming the element.
local function fp8_match(dt, got, want, certain, what)
  local gv, wv = nl.decode(dt, got), nl.decode(dt, want)
  local off = 0
  for i = 1, #got do
    if isnan(wv[i]) or isnan(gv[i]) then
      assert(isnan(wv[i]) and isnan(gv[i]), string.format("%s: element %d is %s, expected %s",
        what, i, tostring(gv[i]), tostring(wv[i])))
    elseif got[i] ~= want[i] then
      local same_sign = (got[i] >= 128) == (want[i] >= 128)
      assert(not certain[i] and same_sign and math.abs(got[i] - want[i]) == 1, string.format(
        "%s: element %d has bits %d (%s), expected %d (%s)%s", what, i, got[i], tostring(gv[i]),
        want[i], tostring(wv[i]), certain[i] and " exactly" or " within one ulp"))
      off = off + 1
    end
  end
  return off
end

-- The bit patterns of a buffer's elements (fp64: the values, which are as exact).
local function bits_of(b)
  return b.dtype == "fp64" and values(b) or nl.encode(b.dtype, values(b))
end

-- yt holds y's bits transposed (y [M, N]).
local function assert_transposed(y, yt, what)
  local M, N = y.shape[1], y.shape[2]
  local yb, tb = bits_of(y), bits_of(yt)
  for i = 0, M - 1 do
    for j = 0, N - 1 do
      local a, b = yb[i * N + j + 1], tb[j * M + i + 1]
      if a ~= b then
        error(string.format("%s: yt[%d][%d] = %d but y[%d][%d] = %d", what, j, i, b, i, j, a), 2)
      end
    end
  end
end

---- the norms in Lua ----

-- y of op for rows of x (flat lists, row-major, M x N) in fp64, with the roundings the contract
-- prescribes in dt: add_rmsnorm's h, and x * rstd under llama casting.
local function lua_norm(op, dt, M, N, X, W, B, R, eps)
  local Y = {}
  for i = 0, M - 1 do
    local a = {}
    for j = 1, N do
      a[j] = X[i * N + j]
    end
    if op == "add_rmsnorm" then
      for j = 1, N do
        a[j] = a[j] + R[i * N + j]
      end
      a = rounded(dt, a)
    end
    if op == "layernorm" then
      local s, v = 0, 0
      for j = 1, N do s = s + a[j] end
      local mu = s / N
      for j = 1, N do v = v + (a[j] - mu) ^ 2 end
      local r = 1 / math.sqrt(v / N + eps)
      for j = 1, N do
        Y[i * N + j] = (a[j] - mu) * r * W[j] + B[j]
      end
    else
      local s = 0
      for j = 1, N do s = s + a[j] * a[j] end
      local r = 1 / math.sqrt(s / N + eps)
      local t = {}
      for j = 1, N do t[j] = a[j] * r end
      t = rounded(dt, t)
      for j = 1, N do
        Y[i * N + j] = t[j] * W[j]
      end
    end
  end
  return Y
end

-- Runs op's forward of variant v on inputs I with options o (out_dtype, scale, ...).
local function forward(op, v, I, o)
  o.variant = v
  if op == "rmsnorm" then
    return keep(nl.rmsnorm(I.x, I.w, o))
  elseif op == "layernorm" then
    local y, mean, rstd, yt, amax = keep(nl.layernorm(I.x, I.w, I.b, o))
    return y, rstd, yt, amax, mean
  end
  local y, h, rstd, yt, amax = keep(nl.add_rmsnorm(I.x, I.res, I.w, o))
  return y, rstd, yt, amax, h
end

local function inputs(op, dt, M, N, seed)
  local I = {x = keep(cpu:randn({M, N}, dt, {seed = seed}))}
  I.w = keep(cpu:randn({N}, dt, {seed = seed + 1, mean = 1, std = 0.3}))
  if op == "layernorm" then
    I.b = keep(cpu:randn({N}, dt, {seed = seed + 2, std = 0.3}))
  end
  if op == "add_rmsnorm" then
    I.res = keep(cpu:randn({M, N}, dt, {seed = seed + 3}))
  end
  return I
end

local function lua_y(op, dt, M, N, I)
  local B = I.b and values(I.b) or {}
  return lua_norm(op, dt, M, N, values(I.x), values(I.w), B, I.res and values(I.res),
    op == "layernorm" and 1e-5 or 1e-6)
end

local function max_abs(list)
  local m = 0
  for _, v in ipairs(list) do
    if isnan(v) or isnan(m) then
      m = 0 / 0
    elseif math.abs(v) > m then
      m = math.abs(v)
    end
  end
  return m
end

local function fp32(v)
  return rounded("fp32", {v})[1]
end

---- the norms' fp8 output ----

describe("fp8 output of the CPU forwards", function()
  local OPS = drivers.cpu.ops
  local M, N = 7, 129

  for _, op in ipairs(OPS) do
    for _, dt in ipairs({"fp32", "bf16", "fp16"}) do
      for _, f8 in ipairs(FP8) do
        it(string.format("%s %s -> %s: ref against Lua bit for bit, amax, yt", op, dt, f8), function()
          local I = inputs(op, dt, M, N, 17)
          local Y = lua_y(op, dt, M, N, I)
          for _, scale in ipairs({1, 0.37, 64}) do
            local y, _, yt, amax = forward(op, "ref", I, {out_dtype = f8, scale = scale,
              amax = true, transpose = "strided"})
            assert.are.equal(f8, y.dtype)
            local want, certain = expected_fp8(f8, Y, scale)
            local off = fp8_match(f8, bits_of(y), want, certain, op .. " ref scale " .. scale)
            assert.is_true(off <= #Y / 100, off .. " elements one ulp off")
            local m = fp32(max_abs(Y))
            assert.is_true(math.abs(amax:get(1) - m) <= m * 2 ^ -23, amax:get(1) .. " vs " .. m)
            assert_transposed(y, yt, op)
          end
        end)
      end
    end

    it(op .. ": every CPU strategy against ref (bits or one ulp), both scalings, yt either way", function()
      for _, dt in ipairs({"fp32", "bf16", "fp16"}) do
        local I = inputs(op, dt, 17, 129, 5)
        for _, f8 in ipairs(FP8) do
          for _, scaling in ipairs({"delayed", "current"}) do
            local sref = keep(cpu:empty({1}))
            local o = {out_dtype = f8, amax = true, scaling = scaling,
              scale = scaling == "current" and sref or 3}
            local ry, _, _, ramax = forward(op, "ref", I, o)
            local rbits, all = bits_of(ry), {}
            for i = 1, #rbits do all[i] = false end
            for _, v in ipairs(drivers.strategies("cpu", op, "fwd")) do
              for _, way in ipairs({"strided", "external"}) do
                local s = keep(cpu:empty({1}))
                local y, _, yt, amax = forward(op, v, I, {out_dtype = f8, amax = true,
                  scaling = scaling, scale = scaling == "current" and s or 3, transpose = way})
                local what = string.format("%s %s %s->%s %s %s", op, v, dt, f8, scaling, way)
                local off = fp8_match(f8, bits_of(y), rbits, all, what)
                assert.is_true(off <= #rbits / 50, what .. ": " .. off .. " elements one ulp off")
                local _, rtol = nl.tolerance(dt, "amax")
                assert.is_true(math.abs(amax:get(1) - ramax:get(1)) <= rtol * ramax:get(1), what)
                if scaling == "current" then
                  assert.are.equal(FP8_MAX[f8] / amax:get(1) == math.huge and 3.4028234663852886e38
                    or fp32(FP8_MAX[f8] / amax:get(1)), s:get(1))
                end
                assert_transposed(y, yt, what)
              end
            end
          end
        end
      end
    end)
  end

  it("current scaling: scale = fp8 max / amax, y scaled by it, amax = 0 gives scale 1", function()
    local I = inputs("rmsnorm", "bf16", 7, 129, 3)
    local Y = lua_y("rmsnorm", "bf16", 7, 129, I)
    local s = keep(cpu:empty({1}))
    local y, _, _, amax = forward("rmsnorm", "ref", I, {out_dtype = "fp8e4m3", scaling = "current",
      scale = s, amax = true})
    local a = fp32(max_abs(Y))
    assert.is_true(math.abs(amax:get(1) - a) <= a * 2 ^ -23)
    assert.are.equal(fp32(448 / amax:get(1)), s:get(1))
    local want, certain = expected_fp8("fp8e4m3", Y, s:get(1))
    fp8_match("fp8e4m3", bits_of(y), want, certain, "current")
    -- zeros: amax 0, scale 1, y 0; without an amax buffer the core's scratch holds it
    local z = keep(cpu:zeros({4, 16}, "bf16"))
    for _, v in ipairs({"ref", "row", "persistent"}) do
      local s0 = keep(cpu:full({1}, 7))
      local y0 = keep(nl.rmsnorm(z, nil, {variant = v, out_dtype = "fp8e5m2", scaling = "current",
        scale = s0}))
      assert.are.equal(1, s0:get(1))
      for _, b in ipairs(bits_of(y0)) do assert.are.equal(0, b) end
    end
  end)

  it("saturation, huge scales, scale 0, NaN and Inf inputs", function()
    for _, v in ipairs({"ref", "row", "persistent"}) do
      -- rows: plain values, a NaN, an inf (rstd 0: inf * 0 is NaN), zeros
      local x = keep(cpu:from_table({{1, -2, 3, 0.5}, {1, NAN, 2, 3}, {1, INF, 2, 3}, {0, 0, 0, 0}},
        "fp32"))
      local ref = keep(nl.rmsnorm(x, nil, {variant = "ref"}))
      local R = values(ref)
      for _, f8 in ipairs(FP8) do
        for _, scale in ipairs({1, 1e30, 0, -1, 2 ^ -140}) do
          local y, _, _, amax = keep(nl.rmsnorm(x, nil, {variant = v, out_dtype = f8, scale = scale,
            amax = true}))
          local got = values(y)
          for i, r in ipairs(R) do
            local want = r * scale
            if isnan(want) then
              assert.is_true(isnan(got[i]), v .. " " .. f8 .. " NaN at " .. i)
            elseif math.abs(want) >= FP8_MAX[f8] then
              assert.are.equal(want > 0 and FP8_MAX[f8] or -FP8_MAX[f8], got[i])
            else
              assert.are.equal(rounded(f8, {fp32(want)})[1], got[i])
            end
          end
          assert.is_true(isnan(amax:get(1)), "a NaN makes amax NaN")
        end
      end
      -- inf without NaN: amax inf, and current scaling takes scale 1
      local xi = keep(cpu:from_table({{1, 2}, {3, 4}}, "fp32"))
      local w = keep(cpu:from_table({INF, 1}, "fp32"))
      local s = keep(cpu:empty({1}))
      local _, _, _, am = keep(nl.rmsnorm(xi, w, {variant = v, out_dtype = "fp8e4m3",
        scaling = "current", scale = s, amax = true}))
      assert.are.equal(INF, am:get(1))
      assert.are.equal(1, s:get(1))
    end
  end)

  it("run info: the transpose used, the scaling, the byte model", function()
    local x = keep(cpu:randn({5, 24}, "bf16", {seed = 1}))
    local y8 = keep(cpu:empty({5, 24}, "fp8e4m3"))
    local yt8 = keep(cpu:empty({24, 5}, "fp8e4m3"))
    local amax, scale = keep(cpu:empty({1}), cpu:full({1}, 2))
    local info = nl.run("rmsnorm.fwd.row", {x = x, y = y8, yt = yt8, amax = amax, scale = scale,
      eps = 1e-6})
    assert.are.equal("external", info.transpose)
    assert.are.equal("delayed", info.scaling)
    assert.are.equal(5 * 24 * 2 + 5 * 24 * 2 + 8, info.bytes)
    assert.are.equal(5 * 24, info.extra_bytes) -- the external transpose reads y again
    info = nl.run("rmsnorm.fwd.persistent", {x = x, y = y8, yt = yt8, scale = scale, eps = 1e-6,
      scaling = "current", transpose = "strided"})
    assert.are.equal("strided", info.transpose)
    assert.are.equal("current: two passes", info.scaling)
    -- the amax pass reads x again; the amax it reduces into is 16 bytes of workspace (there is
    -- no amax buffer), counted as written and read
    assert.are.equal(16, info.workspace_bytes)
    assert.are.equal(5 * 24 * 2 + 2 * 16, info.extra_bytes)
    info = nl.run("rmsnorm.fwd.row", {x = x, y = keep(cpu:empty({5, 24}, "bf16")), eps = 1e-6})
    assert.are.equal("none", info.transpose)
    assert.are.equal("", info.scaling)
  end)
end)

---- the transpose op ----

describe("the transpose op on the CPU", function()
  local variants = {"ref"}
  for _, v in ipairs(drivers.strategies("cpu", "transpose", "fwd")) do
    variants[#variants + 1] = v
  end
  local DTYPES = {"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp64"}
  local SIZES = {1, 7, 33, 127, 4099}

  -- x transposed into yt by variant v: ref against x's bits here (every element up to 5000 of
  -- them, else 300 spread over the matrix), the others against ref in C, exactly.
  local function check_exact(v, x, what)
    local M, N = x.shape[1], x.shape[2]
    local yt = keep(cpu:empty({N, M}, x.dtype)):fill(NAN)
    keep(nl.transpose(x, {variant = v, out = yt}))
    if v ~= "ref" then
      local r = keep(nl.transpose(x, {variant = "ref"}))
      local c = nl.compare(yt, r, {atol = 0, rtol = 0})
      assert.are.equal(0, c.n_bad + c.n_nan, what .. ": " .. tostring(c))
    elseif #x <= 5000 then
      assert_transposed(x, yt, what)
    else
      for k = 0, 299 do
        local i, j = k * 7919 % M + 1, k * 104729 % N + 1
        local a, b = x:get(i, j), yt:get(j, i)
        assert.is_true(a == b or (isnan(a) and isnan(b)), what .. " at " .. i .. ", " .. j)
      end
    end
  end

  it("is exact for every dtype on odd shapes, and on 3 x 100000", function()
    for _, dt in ipairs(DTYPES) do
      for _, M in ipairs(SIZES) do
        for _, N in ipairs(SIZES) do
          if M * N < 4099 * 4099 then
            local x = keep(cpu:randn({M, N}, dt, {seed = M * 31 + N}))
            for _, v in ipairs(variants) do
              check_exact(v, x, string.format("%s %s %dx%d", v, dt, M, N))
            end
          end
        end
      end
      local wide = keep(cpu:randn({3, 100000}, dt, {seed = 9}))
      for _, v in ipairs(variants) do
        check_exact(v, wide, v .. " " .. dt .. " 3x100000")
      end
    end
  end)

  it("#slow is exact on 4099 x 4099", function()
    for _, dt in ipairs({"bf16", "fp8e4m3"}) do
      local x = keep(cpu:randn({4099, 4099}, dt, {seed = 2}))
      for _, v in ipairs(variants) do
        check_exact(v, x, v .. " " .. dt .. " 4099x4099")
      end
    end
  end)

  it("copies bits unscaled, NaN payloads and signed zeros included", function()
    local x = keep(cpu:empty({2, 3}, "fp8e5m2"))
    x:copy_(keep(cpu:from_table({{NAN, -0.0, INF}, {-INF, 1, -2}}, "fp64"):astype("fp8e5m2")))
    for _, v in ipairs(variants) do
      local yt = keep(nl.transpose(x, {variant = v}))
      assert_transposed(x, yt, v)
    end
  end)

  for _, f8 in ipairs(FP8) do
    it("casts to " .. f8 .. " bit for bit (x * scale in fp32, then fp8), amax = max |x|", function()
      for _, dt in ipairs({"fp32", "bf16", "fp16", "fp8e4m3", "fp8e5m2", "fp64"}) do
        local x = keep(cpu:randn({19, 67}, dt, {seed = 4, std = 30}))
        local X = values(x)
        for _, scale in ipairs({1, 0.731, 300, 1e30, 0, 2 ^ -130}) do
          local want = expected_fp8(f8, X, scale)
          for _, v in ipairs(variants) do
            local what = string.format("%s %s->%s scale %g", v, dt, f8, scale)
            local y, yt, amax = keep(nl.cast_transpose(x, {variant = v, dtype = f8, scale = scale,
              amax = true}))
            local exact = {}
            for i = 1, #want do exact[i] = true end
            fp8_match(f8, bits_of(y), want, exact, what)
            assert_transposed(y, yt, what)
            assert.are.equal(fp32(max_abs(X)), amax:get(1), what)
          end
        end
      end
    end)
  end

  it("current scaling: amax first, then the scale, written out; amax 0 gives 1", function()
    local x = keep(cpu:randn({7, 33}, "bf16", {seed = 5}))
    local X = values(x)
    for _, v in ipairs(variants) do
      local s = keep(cpu:empty({1}))
      local y, yt, amax = keep(nl.cast_transpose(x, {variant = v, dtype = "fp8e4m3",
        scaling = "current", scale = s, amax = true}))
      assert.are.equal(fp32(max_abs(X)), amax:get(1))
      assert.are.equal(fp32(448 / amax:get(1)), s:get(1))
      local want = expected_fp8("fp8e4m3", X, s:get(1))
      local exact = {}
      for i = 1, #want do exact[i] = true end
      fp8_match("fp8e4m3", bits_of(y), want, exact, v .. " current")
      assert_transposed(y, yt, v)
      local z = keep(cpu:zeros({3, 5}, "fp16"))
      local s0 = keep(cpu:full({1}, 5))
      keep(nl.transpose(z, {variant = v, dtype = "fp8e5m2", scaling = "current", scale = s0}))
      assert.are.equal(1, s0:get(1))
    end
  end)

  it("strided buffers and every tile setting give the same bits", function()
    local x = keep(cpu:empty({37, 45}, "bf16", {stride = 50}))
    x:copy_(keep(cpu:randn({37, 45}, "bf16", {seed = 6})))
    local r = keep(nl.transpose(x, {variant = "ref", dtype = "fp8e4m3", scale = 2}))
    for _, tile in ipairs({{1, 1}, {16, 16}, {32, 128}, {256, 8}}) do
      helper.with_settings({["transpose.tile_m"] = tile[1], ["transpose.tile_n"] = tile[2]}, function()
        local yt = keep(cpu:empty({45, 37}, "fp8e4m3", {stride = 40}))
        local y = keep(cpu:empty({37, 45}, "fp8e4m3", {stride = 47}))
        keep(nl.cast_transpose(x, {variant = "tiled", dtype = "fp8e4m3", scale = 2, out = y, yt = yt}))
        assert.are.same(bits_of(r), bits_of(keep(yt:to(cpu))))
        assert_transposed(y, yt, "tiled " .. tile[1] .. "x" .. tile[2])
      end)
    end
    helper.with_settings({["transpose.tile_m"] = 48}, function()
      local ok, err = nl.supports("transpose.fwd.tiled", {x = x, yt = keep(cpu:empty({45, 37}, "bf16"))})
      assert.is_false(ok)
      assert.truthy(err:find("not of powers of two", 1, true), err)
    end)
  end)

  it("nl.bench measures it (and a norm's fp8 output with its yt), checked against ref", function()
    helper.with_settings({["bench.warmup_ms"] = 1, ["bench.batch_ms"] = 1}, function()
      local r = nl.bench{op = "transpose", M = 33, N = {7, 64}, dtype = {"bf16", "fp8e4m3"},
        device = "cpu", batches = 1, progress = false, out_dtype = "fp8e5m2", rowwise = true,
        scaling = "current"}
      for _, row in ipairs(r.rows) do
        assert.are.equal("ok", row.status, tostring(row.reason))
        assert.are.equal("current: two passes", row.scaling)
        assert.are.same({"y", "yt", "amax", "scale"}, (function()
          local k = {}
          for _, f in ipairs({"y", "yt", "amax", "scale"}) do
            if row.check[f] then k[#k + 1] = f end
          end
          return k
        end)())
      end
      r = nl.bench{op = "layernorm", M = 9, N = {40}, device = "cpu", batches = 1, progress = false,
        out_dtype = "fp8e4m3", transpose = "strided"}
      for _, row in ipairs(r.rows) do
        assert.are.equal("ok", row.status, tostring(row.reason))
        assert.are.equal("strided", row.transpose)
        assert.is_true(row.check.yt.ok and row.check.amax.ok)
      end
    end)
  end)

  it("experiments/fp8_sweep.lua runs on the CPU (fused_tiled, chunked: skip)", function()
    local ok, out, err = helper.run_script("experiments/fp8_sweep.lua", {"--device", "cpu",
      "--M", "4", "--N", "16", "--batches", "1"}, {["bench.warmup_ms"] = 1, ["bench.batch_ms"] = 1})
    assert.is_true(ok, tostring(err))
    for _, col in ipairs({"auto", "auto:fp8", "auto:fp8+yt:strided", "auto:fp8+yt:external",
        "auto:fp8+yt:fused_tiled", "auto:fp8+yt:chunked", "transpose:tiled", "cast_transpose:tiled",
        "auto:fp8+yt:external/auto:fp8+yt:strided"}) do
      assert.truthy(out:find(col, 1, true), col .. "\n" .. out)
    end
    assert.truthy(out:find("skip auto:fp8+yt:fused_tiled: rmsnorm.fwd.row: transpose "
      .. "'fused_tiled' (the transposed copy yt) is not supported by this strategy", 1, true), out)
    assert.truthy(out:find("skip auto:fp8+yt:chunked: rmsnorm.fwd.row: transpose "
      .. "'chunked' (the transposed copy yt) is not supported by this strategy", 1, true), out)
    assert.falsy(out:find("FAIL", 1, true), out)
  end)
end)

---- bad options ----

describe("fp8 and transpose options", function()
  local x, w, y, yt8, amax
  before_each(function()
    x = keep(cpu:randn({4, 8}, "bf16", {seed = 1}))
    w = keep(cpu:full({8}, 1, "bf16"))
    y = keep(cpu:full({4, 8}, NAN, "fp8e4m3"))
    yt8 = keep(cpu:full({8, 4}, NAN, "fp8e4m3"))
    amax = keep(cpu:full({1}, NAN))
  end)

  local function untouched(...)
    for _, b in ipairs({...}) do
      for _, v in ipairs(values(b)) do
        assert.is_true(isnan(v), "an output was written")
      end
    end
  end

  it("refuse what cannot be, clearly, and change nothing", function()
    local bf = keep(cpu:full({4, 8}, NAN, "bf16"))
    local bft = keep(cpu:full({8, 4}, NAN, "bf16"))
    local cases = {
      {"rmsnorm.fwd.ref: argument 'yt' is [4, 8] but must be [8, 4] (x is [4, 8]; yt is y transposed)",
        {x = x, y = y, yt = keep(cpu:full({4, 8}, NAN, "fp8e4m3")), eps = 1e-6}},
      {"rmsnorm.fwd.ref: argument 'yt' is bf16 but y is fp8e4m3 (yt is y transposed)",
        {x = x, y = y, yt = bft, eps = 1e-6}},
      {"rmsnorm.fwd.ref: argument 'amax' comes with an fp8 output, but y is bf16",
        {x = x, y = bf, amax = amax, eps = 1e-6}},
      {"rmsnorm.fwd.ref: argument 'scale' must be a 1-element fp32 buffer, got fp32 [1, 2]",
        {x = x, y = y, scale = keep(cpu:full({2}, 1)), eps = 1e-6}},
      {"rmsnorm.fwd.ref: argument 'amax' must be a 1-element fp32 buffer, got fp16 [1, 1]",
        {x = x, y = y, amax = keep(cpu:full({1}, NAN, "fp16")), eps = 1e-6}},
      {"rmsnorm.fwd.ref: scaling 'current' needs an fp8 output, but y is bf16",
        {x = x, y = bf, scaling = "current", eps = 1e-6}},
      {"rmsnorm.fwd.ref: option transpose 'strided' needs yt, the buffer of the transposed copy",
        {x = x, y = y, transpose = "strided", eps = 1e-6}},
      {"rmsnorm.fwd.ref: unknown scaling 7 (0 delayed, 1 current)", {x = x, y = y, scaling = 7, eps = 1e-6}},
      {"rmsnorm.fwd.ref: unknown transpose -1 (0 default, 1 strided, 2 external, 3 fused_tiled, "
        .. "4 chunked)",
        {x = x, y = y, yt = yt8, transpose = -1, eps = 1e-6}},
      {"rmsnorm.fwd.ref: output 'amax' is the same buffer as 'scale' (outputs must be distinct buffers)",
        {x = x, y = y, scale = amax, amax = amax, eps = 1e-6}},
      {"rmsnorm.fwd.row: transpose 'fused_tiled' (the transposed copy yt) is not supported by this strategy",
        {x = x, y = y, yt = yt8, transpose = "fused_tiled", eps = 1e-6}, "rmsnorm.fwd.row"},
      {"rmsnorm.fwd.row: transpose 'chunked' (the transposed copy yt) is not supported by this strategy",
        {x = x, y = y, yt = yt8, transpose = "chunked", eps = 1e-6}, "rmsnorm.fwd.row"},
      {"transpose.fwd.ref: option transpose 'strided' applies to the norms' transposed copy; the "
        .. "transpose op writes yt itself", {x = x, yt = bft, transpose = "strided"}, "transpose.fwd.ref"},
      {"transpose.fwd.ref: argument 'yt' is fp16 but x is bf16 (yt is x's dtype or fp8e4m3 / fp8e5m2)",
        {x = x, yt = keep(cpu:full({8, 4}, NAN, "fp16"))}, "transpose.fwd.ref"},
      {"transpose.fwd.ref: argument 'w' is not used by this op and pass",
        {x = x, yt = bft, w = w}, "transpose.fwd.ref"},
    }
    for _, c in ipairs(cases) do
      raises(c[1], nl.run, c[3] or "rmsnorm.fwd.ref", c[2])
    end
    local dx = keep(cpu:full({4, 8}, NAN, "fp8e4m3"))
    raises("rmsnorm.bwd.ref: argument 'dx' is fp8e4m3 but x is bf16 (activations share one dtype)",
      nl.run, "rmsnorm.bwd.ref", {x = x, dy = x, rstd = keep(cpu:full({4}, 1)), dx = dx})
    raises("rmsnorm.bwd.ref: argument 'yt' is not used by this op and pass",
      nl.run, "rmsnorm.bwd.ref", {x = x, dy = x, rstd = keep(cpu:full({4}, 1)), dx = bf, yt = bft})
    untouched(y, yt8, amax, bf, bft, dx)
    -- the Lua layer
    raises("rmsnorm: option 'scale' comes with an fp8 output (out_dtype fp8e4m3 or fp8e5m2), but "
      .. "the output is bf16", nl.rmsnorm, x, w, {scale = 2})
    raises("rmsnorm: option 'out_dtype' is fp8e5m2 but the output buffer given is fp8e4m3",
      nl.rmsnorm, x, w, {out_dtype = "fp8e5m2", out = y})
    raises("rmsnorm: option 'scale' must be a number (not NaN) or a buffer; current scaling "
      .. "computes it: give a buffer to receive it", nl.rmsnorm, x, w,
      {out_dtype = "fp8e4m3", scaling = "current", scale = 2, out = y})
    raises("rmsnorm: option 'transpose' must be one of default, strided, external, fused_tiled, "
      .. "chunked, got 'sideways'", nl.rmsnorm, x, w, {transpose = "sideways"})
    raises("transpose: option 'scaling' comes with an fp8 output (out_dtype fp8e4m3 or "
      .. "fp8e5m2), but the output is bf16", nl.transpose, x, {scaling = "current"})
    raises("unknown option 'transpose' for cast_transpose (expected: variant, "
      .. "dtype, scale, amax, scaling, out, yt)", nl.cast_transpose, x, {transpose = "strided"})
    untouched(y)
  end)

  it("are offered as the registry says (nl.variants: fp8, transposes)", function()
    for _, v in ipairs(nl.variants{backend = "cpu"}) do
      if v.pass == "fwd" then
        assert.are.same({"delayed", "current"}, v.fp8, v.name)
        assert.are.same(v.op == "transpose" and {} or {"strided", "external"}, v.transposes, v.name)
      else
        assert.are.same({}, v.fp8, v.name)
      end
    end
  end)
end)

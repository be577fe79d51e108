-- The transpose op and the forwards' fp8 output and transposed copy on the GPU (#cuda; this
-- spec drives transpose.fwd on CUDA, spec/drivers.lua), against the CPU reference:
--   every CUDA transpose strategy (the registry's) exact for every dtype on odd shapes (M, N in
--     1, 7, 33, 127, 4099, and 3 x 100000), strided rows (16-byte accesses or not), every tile
--     setting, too small and non power-of-two tiles refused with their reason;
--   its fp8 cast (x * scale rounded once to fp32, then to fp8) and cast_transpose's y and yt
--     bit for bit, amax exactly max |x|, saturation, NaN and Inf, scale 0 and huge and tiny
--     (no flush to zero), current scaling (the scale's bits, amax = 0 giving 1);
--   every CUDA norm forward with an fp8 y: those that offer it (nl.supports) against ref, the
--     bits where the fp32 value cannot differ and one ulp elsewhere (counted and printed),
--     amax within fp32 rounding of y's, yt by each way they offer equal to y transposed; those
--     that do not, refusing with the reason; on shapes that reach every kernel (sub-warp rows,
--     one-row CTAs, the element path, the pipelined kernel, the looping kernel at 65536
--     columns); current scaling's run info (two passes, the inputs read again); saturation,
--     NaN and Inf rows, scale 0 and huge scales, current scaling of all-zero x (scale 1);
--     yt in x's dtype by each way every forward offers (external, strided); wide rows' packs per
--     thread under rmsnorm.fwd.fp8_max_threads (fp8_many_max_threads from fp8_many_min_m
--     rows) and add_rmsnorm's twin (run info's kernel).
local nl = require("normlab")
local helper = require("spec.helper")
local drivers = require("spec.drivers")

local cuda = helper.cuda
local cpu = nl.device("cpu")
local it_cuda = cuda and it or pending
local keep = helper.keeper(after_each)
local NAN, INF = 0 / 0, math.huge
local FP8 = {"fp8e4m3", "fp8e5m2"}
local DTYPES = {"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2"}
local SIZES = {1, 7, 33, 127, 4099}

local function strategies()
  return drivers.strategies("cuda", "transpose", "fwd")
end

-- a and b (any devices) hold the same values, NaN where the other has NaN; returns the cmp.
local function same(a, b, what)
  local c = nl.compare(a, b, {atol = 0, rtol = 0})
  assert.are.equal(0, c.n_bad + c.n_nan, what .. ": " .. tostring(c))
  return c
end

local function values(b)
  return b:read(0, #b)
end

-- A CPU copy of x in a GPU buffer with row stride `pad` elements past N (nil: dense).
local function to_gpu(x, pad)
  local g = keep(cuda:empty(x.shape, x.dtype, {stride = pad and x.shape[2] + pad or nil}))
  g:copy_(x)
  return g
end

describe("#cuda transpose op", function()
  it_cuda("is exact for every dtype on odd shapes and 3 x 100000, dense and strided", function()
    for _, dt in ipairs(DTYPES) do
      local shapes = {{3, 100000}}
      for _, M in ipairs(SIZES) do
        for _, N in ipairs(SIZES) do
          shapes[#shapes + 1] = {M, N}
        end
      end
      for _, s in ipairs(shapes) do
        local x = keep(cpu:randn(s, dt, {seed = s[1] * 13 + s[2]}))
        local r = keep(nl.transpose(x, {variant = "ref"}))
        for _, pad in ipairs({false, 1, 16}) do
          local gx = to_gpu(x, pad or nil)
          for _, v in ipairs(strategies()) do
            local yt = keep(cuda:full({s[2], s[1]}, NAN, dt))
            keep(nl.transpose(gx, {variant = v, out = yt}))
            same(yt, r, string.format("%s %s %dx%d pad %s", v, dt, s[1], s[2], tostring(pad)))
          end
        end
      end
    end
  end)

  it_cuda("casts to fp8 bit for bit: y and yt, amax, NaN/Inf, scales 0, huge, tiny", function()
    for _, dt in ipairs(DTYPES) do
      local x = keep(cpu:randn({37, 1029}, dt, {seed = 3, std = 20}))
      -- specials in the first row: NaN, +-inf, +-0, the largest and a tiny value of the dtype
      local specials = {NAN, INF, -INF, 0, -0.0, 1e30, -1e-30, 2 ^ -130}
      for j, v in ipairs(specials) do x:set(1, j, v) end
      local gx = to_gpu(x)
      for _, f8 in ipairs(FP8) do
        for _, scale in ipairs({1, 0.731, 300, 1e30, 0, 2 ^ -120, 2 ^ 100}) do
          local ry, ryt, ramax = keep(nl.cast_transpose(x, {variant = "ref", dtype = f8,
            scale = scale, amax = true}))
          for _, v in ipairs(strategies()) do
            local what = string.format("%s %s->%s scale %g", v, dt, f8, scale)
            local y, yt, amax = keep(nl.cast_transpose(gx, {variant = v, dtype = f8, scale = scale,
              amax = true}))
            same(y, ry, what .. " y")
            same(yt, ryt, what .. " yt")
            same(amax, ramax, what .. " amax")
            assert.is_true(amax:get(1) ~= amax:get(1), what .. ": a NaN makes amax NaN")
          end
        end
      end
    end
  end)

  it_cuda("current scaling: the scale's bits, amax, y; amax = 0 gives 1", function()
    for _, dt in ipairs({"bf16", "fp32"}) do
      local x = keep(cpu:randn({129, 515}, dt, {seed = 8}))
      local gx = to_gpu(x)
      for _, f8 in ipairs(FP8) do
        local rs = keep(cpu:empty({1}))
        local ry, ryt, ramax = keep(nl.cast_transpose(x, {variant = "ref", dtype = f8,
          scaling = "current", scale = rs, amax = true}))
        for _, v in ipairs(strategies()) do
          local s = keep(cuda:empty({1}))
          local y, yt, amax = keep(nl.cast_transpose(gx, {variant = v, dtype = f8,
            scaling = "current", scale = s, amax = true}))
          local what = v .. " " .. dt .. "->" .. f8
          same(s, rs, what .. " scale")
          same(amax, ramax, what .. " amax")
          same(y, ry, what .. " y")
          same(yt, ryt, what .. " yt")
          local info = nl.run("transpose.fwd." .. v, {x = gx, yt = yt, scale = s, scaling = "current"})
          assert.are.equal("current: two passes", info.scaling)
        end
      end
    end
    local z = to_gpu(keep(cpu:zeros({5, 40}, "bf16")))
    for _, v in ipairs(strategies()) do
      local s = keep(cuda:full({1}, 9))
      keep(nl.transpose(z, {variant = v, dtype = "fp8e4m3", scaling = "current", scale = s}))
      assert.are.equal(1, s:get(1))
    end
  end)

  it_cuda("tiled: every tile setting gives the same bits; bad tiles are refused", function()
    local x = keep(cpu:randn({257, 130}, "bf16", {seed = 4}))
    local r = keep(nl.transpose(x, {variant = "ref", dtype = "fp8e4m3", scale = 3}))
    local gx = to_gpu(x, 2)
    for _, tile in ipairs({{16, 16}, {16, 128}, {32, 64}, {64, 64}, {128, 128}, {256, 64}, {64, 256}}) do
      helper.with_settings({["transpose.tile_m"] = tile[1], ["transpose.tile_n"] = tile[2]}, function()
        local yt = keep(nl.transpose(gx, {variant = "tiled", dtype = "fp8e4m3", scale = 3}))
        same(yt, r, "tile " .. tile[1] .. "x" .. tile[2])
      end)
    end
    local yt = keep(cuda:empty({130, 257}, "fp32"))
    local fx = to_gpu(keep(cpu:randn({257, 130}, "fp32", {seed = 5})))
    for _, c in ipairs({{{48, 64}, "not of powers of two"}, {{2, 64}, "too small"},
        {{1024, 1024}, "does not fit a CTA's shared memory"}}) do
      helper.with_settings({["transpose.tile_m"] = c[1][1], ["transpose.tile_n"] = c[1][2]}, function()
        local ok, why = nl.supports("transpose.fwd.tiled", {x = fx, yt = yt})
        assert.is_false(ok)
        assert.truthy(why:find(c[2], 1, true), why)
      end)
    end
  end)
end)

describe("#cuda fp8 output of the CUDA forwards", function()
  local OPS = drivers.cuda.ops

  local function args_of(op, x, y, extra)
    local a = {x = x, y = y, eps = op == "layernorm" and 1e-5 or 1e-6}
    if op == "add_rmsnorm" then
      a.residual = x
      a.residual_out = keep(cuda:empty(x.shape, x.dtype))
    end
    for k, v in pairs(extra or {}) do a[k] = v end
    return a
  end

  -- The forward of op through nl's op functions: y, yt, amax (b: LayerNorm's bias, else none).
  local function forward(op, x, w, o, b)
    if op == "rmsnorm" then
      local y, _, yt, amax = keep(nl.rmsnorm(x, w, o))
      return y, yt, amax
    elseif op == "layernorm" then
      local y, _, _, yt, amax = keep(nl.layernorm(x, w, b, o))
      return y, yt, amax
    end
    local y, _, _, yt, amax = keep(nl.add_rmsnorm(x, x, w, o))
    return y, yt, amax
  end

  -- Shapes for every kernel of the family: rows sharing a warp (blockrow; 4099 rows), one-row
  -- CTAs, odd N (single elements), the pipelined kernel's several rows per CTA, wide rows,
  -- the looping kernel (65536 columns; with bf16 only, the other dtypes adding nothing there).
  local SHAPES = {{1, 1}, {7, 7}, {37, 64}, {4099, 111}, {7, 1023}, {37, 1025}, {199, 4096},
    {1, 4096}, {7, 8191}}
  local LOOP_SHAPE = {3, 65536}

  it_cuda("every forward: fp8 y against ref where offered (ulp-off counted), else refused", function()
    for _, op in ipairs(OPS) do
      for _, dt in ipairs({"bf16", "fp16", "fp32"}) do
        local shapes = {}
        for _, s in ipairs(SHAPES) do shapes[#shapes + 1] = s end
        if dt == "bf16" then shapes[#shapes + 1] = LOOP_SHAPE end
        for _, s in ipairs(shapes) do
          local x = keep(cpu:randn(s, dt, {seed = s[1] + s[2]}))
          local w = keep(cpu:randn({s[2]}, dt, {seed = 2, mean = 1, std = 0.2}))
          local gx, gw = to_gpu(x), to_gpu(w)
          for _, f8 in ipairs(FP8) do
            for _, scaling in ipairs({"delayed", "current"}) do
              local o = {variant = "ref", out_dtype = f8, scaling = scaling, amax = true,
                scale = scaling == "current" and keep(cpu:empty({1})) or 2}
              local ry, _, ramax = forward(op, x, w, o)
              for _, v in ipairs(drivers.strategies("cuda", op, "fwd")) do
                local name = op .. ".fwd." .. v
                local probe = args_of(op, gx, keep(cuda:empty(s, f8)),
                  {w = gw, scaling = scaling, scale = keep(cuda:full({1}, 2))})
                local ok, why = nl.supports(name, probe)
                local what = string.format("%s %s->%s %s %dx%d", name, dt, f8, scaling, s[1], s[2])
                if not ok then
                  -- not offered, or a shape the strategy does not take (blockrow's, staged's N)
                  assert.truthy(why:find("not supported by this strategy", 1, true) or
                    why:find("N = ", 1, true), what .. ": " .. why)
                else
                  local ways = {}
                  for _, t in ipairs(nl.variants{op = op, pass = "fwd", backend = "cuda"}) do
                    if t.strategy == v then ways = t.transposes end
                  end
                  for _, way in ipairs(ways) do
                    local go = {variant = v, out_dtype = f8, scaling = scaling, amax = true,
                      transpose = way, scale = scaling == "current" and keep(cuda:empty({1})) or 2}
                    local okw, whyw = nl.supports(name, args_of(op, gx, keep(cuda:empty(s, f8)),
                      {w = gw, scaling = scaling, scale = keep(cuda:full({1}, 2)), transpose = way,
                        yt = keep(cuda:empty({s[2], s[1]}, f8))}))
                    -- chunked takes the rows that one-row kernels hold (not the looping kernel's)
                    assert.is_true(okw or way == "chunked" and whyw:find("one-row kernel", 1, true) ~= nil,
                      what .. " " .. way .. ": " .. tostring(whyw))
                    if not okw then
                      goto next_way
                    end
                    local y, yt, amax = forward(op, gx, gw, go)
                    -- one ulp: an eighth (e4m3) or a quarter (e5m2) of the value, or the
                    -- subnormal quantum
                    local c = nl.compare(y, ry, {atol = f8 == "fp8e4m3" and 2 ^ -9 or 2 ^ -16,
                      rtol = f8 == "fp8e4m3" and 2 ^ -3 or 2 ^ -2})
                    local exact = nl.compare(y, ry, {atol = 0, rtol = 0})
                    print(string.format("%s %s: %d of %d elements one fp8 ulp off", what, way,
                      exact.n_bad, exact.n))
                    assert.are.equal(0, c.n_bad + c.n_nan, what .. " " .. way .. ": " .. tostring(c))
                    assert.is_true(exact.n_bad <= exact.n / 100, what .. ": too many off")
                    local _, rtol = nl.tolerance(dt, "amax")
                    assert.is_true(math.abs(amax:get(1) - ramax:get(1)) <= rtol * ramax:get(1), what)
                    local back = keep(nl.transpose(yt, {variant = "tiled"}))
                    same(back, y, what .. " " .. way .. " yt")
                    ::next_way::
                  end
                  if scaling == "current" and v ~= "auto" then
                    local gy = keep(cuda:empty(s, f8))
                    local info = nl.run(name, args_of(op, gx, gy, {w = gw, scaling = "current",
                      amax = keep(cuda:empty({1}))}))
                    assert.are.equal("current: two passes", info.scaling, what)
                    local elt = ({bf16 = 2, fp16 = 2, fp32 = 4})[dt]
                    assert.are.equal(s[1] * s[2] * elt * (op == "add_rmsnorm" and 2 or 1),
                      info.extra_bytes, what .. ": extra bytes (x read again)")
                  end
                end
              end
            end
          end
        end
      end
    end
  end)

  -- transpose.keep_max_mb decides whether the norm stores an fp8 y for L2 to keep (and the
  -- transpose reads it as its last use) or streams it: a cache policy, never the bits.
  it_cuda("external yt: an fp8 y kept in L2 or streamed (transpose.keep_max_mb) has the same bits", function()
    local s = {515, 1040}
    for _, op in ipairs(OPS) do
      local x = keep(cuda:randn(s, "bf16", {seed = 31}))
      local w = keep(cuda:randn({s[2]}, "bf16", {seed = 32, mean = 1, std = 0.2}))
      for _, v in ipairs(drivers.strategies("cuda", op, "fwd")) do
        local o = {variant = v, out_dtype = "fp8e4m3", transpose = "external", scale = 2}
        local probe = args_of(op, x, keep(cuda:empty(s, "fp8e4m3")), {w = w, scale = keep(cuda:full({1}, 2)),
          yt = keep(cuda:empty({s[2], s[1]}, "fp8e4m3")), transpose = "external"})
        if nl.supports(op .. ".fwd." .. v, probe) then
          local what = op .. ".fwd." .. v
          local y1, yt1 = forward(op, x, w, o)
          local y0, yt0
          helper.with_settings({["transpose.keep_max_mb"] = 0}, function() y0, yt0 = forward(op, x, w, o) end)
          same(y1, y0, what .. ": y")
          same(yt1, yt0, what .. ": yt")
          same(yt1, keep(nl.transpose(y1, {variant = "naive"})), what .. ": yt is y transposed")
        end
      end
    end
  end)

  -- transpose = "chunked" runs the forward in chunks of transpose.chunk_kb of y, each launch
  -- also transposing the chunk before it: y, yt and amax as external gives them, whatever the
  -- chunk (one tile of rows, several with a part-filled last, one chunk), the tile (widened
  -- with the row by transpose.chunk_tile_div or not), 16-byte or element accesses (111
  -- columns), either scaling, with and without cuda.pdl.
  it_cuda("chunked yt: every chunk and tile gives external's bits", function()
    for _, op in ipairs(OPS) do
      for _, s in ipairs({{515, 1040}, {4099, 111}, {37, 4096}, {1, 64}}) do
        local x = keep(cuda:randn(s, "bf16", {seed = 33}))
        local w = keep(cuda:randn({s[2]}, "bf16", {seed = 34, mean = 1, std = 0.2}))
        for _, v in ipairs({"row", "blockrow", "auto"}) do
          local probe = args_of(op, x, keep(cuda:empty(s, "fp8e4m3")), {w = w, transpose = "chunked",
            yt = keep(cuda:empty({s[2], s[1]}, "fp8e4m3"))})
          local ok, why = nl.supports(op .. ".fwd." .. v, probe)
          if not ok then -- blockrow's rows are narrow
            assert.truthy(why:find("N = ", 1, true), why)
          end
          for _, scaling in ipairs(ok and {"delayed", "current"} or {}) do
            local function run(way)
              return forward(op, x, w, {variant = v, out_dtype = "fp8e4m3", transpose = way,
                scaling = scaling, amax = true, scale = scaling == "current" and keep(cuda:empty({1})) or 2})
            end
            local y0, yt0, am0 = run("external")
            -- {chunk KB, tile_m, tile_n, chunk_tile_div}
            for _, set in ipairs({{1, 64, 128, 32}, {4, 16, 16, 0}, {4, 16, 16, 64}, {64, 32, 256, 32},
                {16384, 64, 128, 8}}) do
              for pdl = 0, 1 do
                helper.with_settings({["transpose.chunk_kb"] = set[1], ["transpose.tile_m"] = set[2],
                  ["transpose.tile_n"] = set[3], ["transpose.chunk_tile_div"] = set[4], ["cuda.pdl"] = pdl}, function()
                    local what = string.format("%s.fwd.%s %s %dx%d chunk %d KB, tile %dx%d / %d, pdl %d", op,
                      v, scaling, s[1], s[2], set[1], set[2], set[3], set[4], pdl)
                    local y, yt, am = run("chunked")
                    same(y, y0, what .. ": y")
                    same(yt, yt0, what .. ": yt")
                    assert.are.equal(am0:get(1), am:get(1), what .. ": amax")
                  end)
              end
            end
          end
        end
      end
    end
    -- nl.bench checks it against ref, which writes yt its own way
    helper.with_settings({["bench.warmup_ms"] = 1, ["bench.batch_ms"] = 1}, function()
      local r = nl.bench{op = "rmsnorm", M = 67, N = {1040}, device = "cuda", batches = 1,
        progress = false, out_dtype = "fp8e4m3", transpose = "chunked", variants = {"row"}}
      assert.are.equal("ok", r.rows[1].status, tostring(r.rows[1].reason))
      assert.are.equal("chunked", r.rows[1].transpose)
      assert.is_true(r.rows[1].check.yt.ok and r.rows[1].check.amax.ok)
    end)
  end)

  -- transpose.chunked_min_n .. chunked_max_n (LayerNorm's and add_rmsnorm's own max): the
  -- columns whose fp8 y takes chunked by default (where the strategy has it), external outside
  -- them, for a y in x's dtype and for the other ops at their own 0
  it_cuda("the default transposed copy: chunked within transpose.chunked_min_n .. chunked_max_n", function()
    helper.with_settings({["transpose.chunked_min_n"] = 1024, ["transpose.chunked_max_n"] = 2048,
      ["layernorm.fwd.chunked_max_n"] = 0, ["add_rmsnorm.fwd.chunked_max_n"] = 1024}, function()
      for _, c in ipairs({{"rmsnorm", 1040, "row", "fp8e4m3", "chunked"},
          {"rmsnorm", 1040, "auto", "fp8e4m3", "chunked"}, {"rmsnorm", 4096, "row", "fp8e4m3", "external"},
          {"rmsnorm", 1040, "row", "bf16", "external"}, {"rmsnorm", 1040, "staged", "fp8e4m3", "external"},
          {"layernorm", 1040, "row", "fp8e4m3", "external"}, {"add_rmsnorm", 1024, "row", "fp8e4m3", "chunked"},
          {"add_rmsnorm", 1040, "row", "fp8e4m3", "external"}}) do
        local s = {67, c[2]}
        local x = keep(cuda:randn(s, "bf16", {seed = 35}))
        local y, yt = keep(cuda:empty(s, c[4])), keep(cuda:empty({s[2], s[1]}, c[4]))
        local info = nl.run(c[1] .. ".fwd." .. c[3], args_of(c[1], x, y, {yt = yt}))
        local what = string.format("%s.fwd.%s %s N = %d", c[1], c[3], c[4], c[2])
        assert.are.equal(c[5], info.transpose, what)
        same(yt, keep(nl.transpose(y, {variant = "naive"})), what)
      end
    end)
    -- in the window, a row the strategy cannot chunk (past what registers hold): its own way
    helper.with_settings({["transpose.chunked_min_n"] = 1024, ["transpose.chunked_max_n"] = 65536}, function()
      local s = {67, 40000}
      local x = keep(cuda:randn(s, "bf16", {seed = 36}))
      local y, yt = keep(cuda:empty(s, "fp8e4m3")), keep(cuda:empty({s[2], s[1]}, "fp8e4m3"))
      assert.is_false(nl.supports("rmsnorm.fwd.row", args_of("rmsnorm", x, y, {yt = yt, transpose = "chunked"})))
      local info = nl.run("rmsnorm.fwd.row", args_of("rmsnorm", x, y, {yt = yt}))
      assert.are.equal("external", info.transpose)
      same(yt, keep(nl.transpose(y, {variant = "naive"})), "rmsnorm.fwd.row 67 x 40000")
    end)
  end)

  it_cuda("yt in x's dtype: every forward's transposed copy by each way is y transposed, exactly", function()
    for _, op in ipairs(OPS) do
      for _, dt in ipairs({"bf16", "fp32"}) do
        for _, s in ipairs({{129, 1000}, {37, 1025}, {4099, 64}, {2, 65536}}) do
          local x = keep(cuda:randn(s, dt, {seed = 6}))
          local w = keep(cuda:randn({s[2]}, dt, {seed = 7, mean = 1, std = 0.2}))
          for _, v in ipairs(drivers.strategies("cuda", op, "fwd")) do
            local name = op .. ".fwd." .. v
            local ok, why = nl.supports(name, args_of(op, x, keep(cuda:empty(s, dt)),
              {w = w, yt = keep(cuda:empty({s[2], s[1]}, dt))}))
            if ok then
              local ways = {}
              for _, t in ipairs(nl.variants{op = op, pass = "fwd", backend = "cuda"}) do
                if t.strategy == v then ways = t.transposes end
              end
              local plain = forward(op, x, w, {variant = v})
              for _, way in ipairs(ways) do
                local what = string.format("%s %s %dx%d %s", name, dt, s[1], s[2], way)
                if way == "chunked" then -- an fp8 y only
                  local okc, whyc = nl.supports(name, args_of(op, x, keep(cuda:empty(s, dt)),
                    {w = w, yt = keep(cuda:empty({s[2], s[1]}, dt)), transpose = way}))
                  assert.is_false(okc, what)
                  assert.truthy(whyc:find("the chunked transposed copy takes an fp8 y", 1, true), whyc)
                  goto next_way
                end
                local y, yt = forward(op, x, w, {variant = v, transpose = way})
                same(y, plain, what .. ": y as without yt")
                same(yt, keep(nl.transpose(y, {variant = "naive"})), what)
                local info = nl.run(name, args_of(op, x, y, {w = w, yt = yt, transpose = way}))
                assert.are.equal(way, info.transpose, what)
                ::next_way::
              end
            else
              assert.truthy(why:find("shared memory", 1, true) or why:find("N =", 1, true), why)
            end
          end
        end
      end
    end
  end)

  -- The fp8 forward of op on CUDA strategy v against ref on x (CPU), options o for both:
  -- y within one fp8 ulp (the off ones counted and printed), NaN where ref has NaN, amax and
  -- (current scaling) the scale written.
  local function against_ref(op, v, x, w, o, what, b)
    local function run(variant, dev, xx, ww, bb)
      local oo = {variant = variant, amax = true}
      for k, val in pairs(o) do oo[k] = val end
      if o.scaling == "current" then oo.scale = keep(dev:full({1}, 7)) end
      local y, _, amax = forward(op, xx, ww, oo, bb)
      return y, amax, o.scaling == "current" and oo.scale or nil -- the scale written
    end
    local gx, gw, gb = to_gpu(x), to_gpu(w), b and to_gpu(b)
    local ok, why = nl.supports(op .. ".fwd." .. v, args_of(op, gx, keep(cuda:empty(x.shape, o.out_dtype)),
      {w = gw, scaling = o.scaling}))
    if not ok then -- a shape the strategy does not take
      assert.truthy(why:find("N = ", 1, true), what .. ": " .. why)
      return
    end
    local ry, ramax, rscale = run("ref", cpu, x, w, b)
    local y, amax, scale = run(v, cuda, gx, gw, gb)
    local f8 = o.out_dtype
    local c = nl.compare(y, ry, {atol = f8 == "fp8e4m3" and 2 ^ -9 or 2 ^ -16,
      rtol = f8 == "fp8e4m3" and 2 ^ -3 or 2 ^ -2})
    local exact = nl.compare(y, ry, {atol = 0, rtol = 0})
    print(string.format("%s: %d of %d elements one fp8 ulp off", what, exact.n_bad, exact.n))
    assert.are.equal(0, c.n_bad + c.n_nan, what .. ": " .. tostring(c))
    local a, ra = amax:get(1), ramax:get(1)
    local _, rtol = nl.tolerance(x.dtype, "amax")
    if ra ~= ra then
      assert.is_true(a ~= a, what .. ": a NaN in y makes amax NaN")
    else
      assert.is_true(math.abs(a - ra) <= rtol * ra, what .. string.format(": amax %g, ref %g", a, ra))
    end
    if scale then
      local sv, rv = scale:get(1), rscale:get(1)
      assert.is_true(math.abs(sv - rv) <= rtol * rv, what .. string.format(": scale %g, ref %g", sv, rv))
    end
    return y, scale
  end

  it_cuda("fp8 y: saturation, NaN and Inf rows, scales 0 and huge, current scaling of zeros", function()
    for _, op in ipairs(OPS) do
      for _, v in ipairs(drivers.strategies("cuda", op, "fwd")) do
        for _, s in ipairs({{37, 64}, {7, 1025}, {9, 4096}}) do
          local x = keep(cpu:randn(s, "bf16", {seed = 21, std = 3}))
          local w = keep(cpu:randn({s[2]}, "bf16", {seed = 22, mean = 1, std = 0.5}))
          -- row 2: a NaN, row 3: an Inf (NaN after the norm, or 0 but for the Inf's element,
          -- as ref gives them); values past the fp8 max come from the scales
          x:set(2, 1, NAN)
          x:set(3, s[2], INF)
          for _, f8 in ipairs(FP8) do
            for _, scale in ipairs({0, 1, 1e4, 1e30, 3.4e38}) do
              against_ref(op, v, x, w, {out_dtype = f8, scale = scale},
                string.format("%s.fwd.%s %dx%d %s scale %g", op, v, s[1], s[2], f8, scale))
            end
            against_ref(op, v, x, w, {out_dtype = f8, scaling = "current"},
              string.format("%s.fwd.%s %dx%d %s current, NaN rows", op, v, s[1], s[2], f8))
            local clean = keep(cpu:randn(s, "bf16", {seed = 23, std = 100}))
            against_ref(op, v, clean, w, {out_dtype = f8, scaling = "current"},
              string.format("%s.fwd.%s %dx%d %s current", op, v, s[1], s[2], f8))
            local zeros = keep(cpu:zeros(s, "bf16"))
            local _, sc = against_ref(op, v, zeros, w, {out_dtype = f8, scaling = "current"},
              string.format("%s.fwd.%s %dx%d %s current, x = 0", op, v, s[1], s[2], f8))
            if sc then assert.are.equal(1, sc:get(1), "amax 0 gives scale 1") end
          end
        end
      end
    end
  end)

  it_cuda("fp8 y on wide rows: more packs per thread (rmsnorm.fwd.fp8_max_threads, fp8_many_max_threads, add_rmsnorm's twin), run info, against ref", function()
    -- bf16 8192 columns: 1024 packs, 4 a thread (fp8_items) is 256 threads, 8 is 128; fp32
    -- 8192 columns: 2048 packs, 8 a thread is 256 threads (the most packs there are). The
    -- defaults: 128 threads for rmsnorm and layernorm, off for add_rmsnorm (its own setting).
    -- From rmsnorm.fwd.fp8_many_min_m rows the cap is rmsnorm.fwd.fp8_many_max_threads.
    -- LayerNorm runs without a bias and with one of x's dtype (weight and bias plain: the
    -- epilogue's other path, found once a row at 8 packs).
    local function packs(op, x, w)
      local a = args_of(op, to_gpu(x), keep(cuda:empty(x.shape, "fp8e4m3")), {w = to_gpu(w)})
      local info = nl.run(op .. ".fwd.row", a)
      return tonumber(info.kernel:match("^fwd_one<[^,]+, %d+, (%d+),")), info.kernel
    end
    local function check(op, x, w, what)
      against_ref(op, "row", x, w, {out_dtype = "fp8e4m3", scale = 2}, what)
      if op == "layernorm" then
        local b = keep(cpu:randn(w.shape, w.dtype, {seed = 35}))
        against_ref(op, "row", x, w, {out_dtype = "fp8e4m3", scale = 2}, what .. ", bias", b)
      end
    end
    local fixed = {["rmsnorm.fwd.fp8_items"] = 4, ["rmsnorm.fwd.reload_min_n"] = 0,
      ["rmsnorm.fwd.early_weight_max_n"] = 0}
    local key = {rmsnorm = "rmsnorm.fwd.fp8_max_threads", layernorm = "rmsnorm.fwd.fp8_max_threads",
      add_rmsnorm = "add_rmsnorm.fwd.fp8_max_threads"}
    for _, op in ipairs(OPS) do
      for _, c in ipairs({{"bf16", 8192}, {"bf16", 16384}, {"fp32", 8192}}) do
        local x = keep(cpu:randn({7, c[2]}, c[1], {seed = 31}))
        local w = keep(cpu:randn({c[2]}, c[1], {seed = 32, mean = 1, std = 0.2}))
        for _, cap in ipairs({0, 128}) do
          -- the other op's key at the other value: each op reads its own
          local s = {[key[op]] = cap}
          s[key[op] == key.add_rmsnorm and key.rmsnorm or key.add_rmsnorm] = 128 - cap
          for k, v in pairs(fixed) do s[k] = v end
          helper.with_settings(s, function()
            local items, kernel = packs(op, x, w)
            assert.are.equal(cap == 0 and 4 or 8, items, kernel)
            check(op, x, w, string.format("%s.fwd.row 7x%d %s fp8_max_threads %d", op, c[2], c[1], cap))
          end)
        end
        helper.with_settings(fixed, function()
          local items, kernel = packs(op, x, w)
          assert.are.equal(op == "add_rmsnorm" and 4 or 8, items, "defaults: " .. kernel)
        end)
      end
    end
    -- 4096 bf16 columns, 512 packs: 4 a thread at 128 threads, 8 at 64 from fp8_many_min_m
    -- rows (7 here); add_rmsnorm's cap is off either way
    local x = keep(cpu:randn({7, 4096}, "bf16", {seed = 33}))
    local w = keep(cpu:randn({4096}, "bf16", {seed = 34, mean = 1, std = 0.2}))
    for _, min_m in ipairs({7, 8}) do
      local s = {["rmsnorm.fwd.fp8_max_threads"] = 128, ["rmsnorm.fwd.fp8_many_max_threads"] = 64,
        ["rmsnorm.fwd.fp8_many_min_m"] = min_m, ["add_rmsnorm.fwd.fp8_max_threads"] = 0}
      for k, v in pairs(fixed) do s[k] = v end
      helper.with_settings(s, function()
        for _, op in ipairs(OPS) do
          local items, kernel = packs(op, x, w)
          assert.are.equal(min_m == 7 and op ~= "add_rmsnorm" and 8 or 4, items,
            op .. " fp8_many_min_m " .. min_m .. ": " .. kernel)
          check(op, x, w, string.format("%s.fwd.row 7x4096 bf16 fp8_many_min_m %d", op, min_m))
        end
      end)
    end
  end)
end)

-- Every registered CPU strategy (row, persistent, auto today: the registry's list) of every op
-- spec/drivers.lua lists for the CPU, forward and backward, against the fp64 reference run on
-- the same inputs:
--   the grid M x N x dtype (sizes with tails) with the default options;
--   each option on its own (weight fp32 / x's dtype / none, bias likewise, cast llama /
--     gemma / none, offset, dx in place over dy, residual_out in place over residual, dres
--     given or not, strided rows with stride N + 3) on two shapes, and the full cross product
--     of the options on the same shapes (#slow: several times longer under the sanitizers);
--   every output buffer is poisoned with NaN before the run, so an element a kernel leaves
--     unwritten fails the comparison;
--   an exact case for the rounding of x * rstd that dw pairs dy with (llama, none);
--   dw and db bitwise reproducible run to run, and right with 1, 3 and 5 threads;
--   nl.run's info: deterministic, the byte model (cases counted by hand, and every op and
--     pass over the grid: each buffer read or written once at its logical size, LayerNorm's
--     bias and db and mean and rstd included), extra bytes = 2 x the workspace.
-- The backward passes all take the reference forward's statistics (rstd, mean, h), so that
-- a backward is checked on its own. Tolerances are nl.tolerance's for the activation dtype,
-- dw and db growing with sqrt(M); residual_out (one rounding of an exact sum) must be exact.
local nl = require("normlab")
local helper = require("spec.helper")
local drivers = require("spec.drivers")

local cpu = nl.device("cpu")
local NAN = 0 / 0

local DTYPES = {"fp32", "fp16", "bf16"}
local OPS = drivers.cpu.ops

local keep, release = helper.keeper(after_each)

---- one case ----

-- A case: op, M, N, dt and the options
--   weight, bias  "fp32" | "x" (the activation dtype) | "none"    (bias: layernorm only)
--   cast          "llama" | "gemma" | "none"                      (rmsnorm, add_rmsnorm)
--   offset        number (needs a weight)
--   inplace       dx over dy; for add_rmsnorm also residual_out over residual
--   strided       every activation buffer with row stride N + 3
--   dres          add_rmsnorm backward gets a gradient at residual_out
--   atol          {output = atol}: an explicit bound for one case, to be documented where
--                 used (none is needed: the llama/none dw of fp16/bf16, which may differ from
--                 ref by rounding flips of x * rstd, stays within nl.tolerance, at most 0.2 of
--                 the dw bound over the whole cross product)

local DT_INDEX = {fp32 = 1, fp16 = 2, bf16 = 3}
local OP_INDEX = {rmsnorm = 1, layernorm = 2, add_rmsnorm = 3}

local function seed_of(c)
  return ((c.M * 7919 + c.N) * 4 + DT_INDEX[c.dt]) * 4 + OP_INDEX[c.op]
end

local function label(c, variant)
  local parts = {string.format("%s %s M=%d N=%d %s weight=%s", c.op, variant, c.M, c.N, c.dt,
    c.weight)}
  if c.op == "layernorm" then
    parts[#parts + 1] = "bias=" .. c.bias
  else
    parts[#parts + 1] = "cast=" .. c.cast
  end
  if c.offset ~= 0 then
    parts[#parts + 1] = "offset=" .. c.offset
  end
  if c.inplace then
    parts[#parts + 1] = "inplace"
  end
  if c.strided then
    parts[#parts + 1] = "strided"
  end
  if c.op == "add_rmsnorm" then
    parts[#parts + 1] = c.dres and "dres" or "no-dres"
  end
  return table.concat(parts, " ")
end

-- An empty activation buffer in the case's layout.
local function act(c)
  return keep(c.strided and cpu:empty({c.M, c.N}, c.dt, {stride = c.N + 3})
    or cpu:empty({c.M, c.N}, c.dt))
end

-- A copy of b in the case's layout.
local function copy(c, b)
  return act(c):copy_(b)
end

local function poisoned(c, shape, dt)
  local b = type(shape) == "table" and act(c) or keep(cpu:empty(shape, dt))
  return b:fill(NAN)
end

local function vec_dtype(c, kind)
  return kind == "x" and c.dt or kind
end

local function inputs(c)
  local s = seed_of(c)
  local I = {}
  I.x = copy(c, keep(cpu:randn({c.M, c.N}, c.dt, {seed = s})))
  if c.op == "add_rmsnorm" then
    I.res = copy(c, keep(cpu:randn({c.M, c.N}, c.dt, {seed = s + 1})))
  end
  if c.weight ~= "none" then
    I.w = keep(cpu:randn(c.N, vec_dtype(c, c.weight), {seed = s + 2, mean = 1, std = 0.5}))
  end
  if c.op == "layernorm" and c.bias ~= "none" then
    I.b = keep(cpu:randn(c.N, vec_dtype(c, c.bias), {seed = s + 3, std = 0.5}))
  end
  I.dy = copy(c, keep(cpu:randn({c.M, c.N}, c.dt, {seed = s + 4})))
  if c.op == "add_rmsnorm" and c.dres then
    I.dres = copy(c, keep(cpu:randn({c.M, c.N}, c.dt, {seed = s + 5})))
  end
  return I
end

-- Forward of variant v; O holds the output buffers (nil: allocated by the op). Returns the
-- outputs by name.
local function forward(c, v, I, O)
  local o = {variant = v, offset = c.offset, out = O.y, rstd = O.rstd}
  if c.op == "rmsnorm" then
    o.cast = c.cast
    local y, rstd = keep(nl.rmsnorm(I.x, I.w, o))
    return {y = y, rstd = rstd}
  elseif c.op == "layernorm" then
    o.mean = O.mean
    local y, mean, rstd = keep(nl.layernorm(I.x, I.w, I.b, o))
    return {y = y, mean = mean, rstd = rstd}
  end
  o.cast = c.cast
  local res = I.res
  if O.inplace then
    res, o.inplace = copy(c, I.res), true
  else
    o.residual_out = O.residual_out
  end
  local y, h, rstd = keep(nl.add_rmsnorm(I.x, res, I.w, o))
  if O.inplace then
    assert.are.equal(res, h)
  end
  return {y = y, residual_out = h, rstd = rstd}
end

-- Backward of variant v from the statistics S of a forward (rstd, mean, residual_out).
local function backward(c, v, I, S, O)
  local o = {variant = v, offset = c.offset, dw = O.dw}
  local dy = I.dy
  if O.inplace then
    dy, o.inplace = copy(c, I.dy), true
  else
    o.dx = O.dx
  end
  local out
  if c.op == "rmsnorm" then
    o.cast = c.cast
    local dx, dw = keep(nl.rmsnorm_bwd(dy, I.x, I.w, S.rstd, o))
    out = {dx = dx, dw = dw}
  elseif c.op == "layernorm" then
    o.db = O.db
    local dx, dw, db = keep(nl.layernorm_bwd(dy, I.x, I.w, I.b, S.mean, S.rstd, o))
    out = {dx = dx, dw = dw, db = db}
  else
    o.cast, o.dres = c.cast, I.dres
    local dx, dw = keep(nl.add_rmsnorm_bwd(dy, S.h, I.w, S.rstd, o))
    out = {dx = dx, dw = dw}
  end
  if O.inplace then
    assert.are.equal(dy, out.dx)
  end
  return out
end

local function check(c, variant, got, want, output)
  local atol, rtol = nl.tolerance(c.dt, output, c.M)
  if output == "residual_out" then
    atol, rtol = 0, 0
  end
  if c.atol and c.atol[output] then
    atol = c.atol[output]
  end
  local cmp = nl.compare(got, want, {atol = atol, rtol = rtol})
  assert(cmp.ok, string.format("%s: %s (seed %d): %s", label(c, variant), output, seed_of(c),
    tostring(cmp)))
end

-- Runs the case for the given strategies against ref, every registered one (ref aside) when
-- none are given.
local function run_case(c, strategies)
  c.cast = c.cast or "llama"
  c.offset = c.offset or 0
  c.weight = c.weight or "fp32"
  c.bias = c.bias or "fp32"
  local I = inputs(c)
  local ref_f = forward(c, "ref", I, {})
  -- the backward's inputs: ref's statistics, h in the case's layout
  local S = {rstd = ref_f.rstd, mean = ref_f.mean,
    h = ref_f.residual_out and copy(c, ref_f.residual_out)}
  local ref_b = backward(c, "ref", I, S, {})
  for _, v in ipairs(strategies or drivers.strategies("cpu", c.op, "fwd")) do
    local O = {y = poisoned(c, {}), rstd = poisoned(c, c.M, "fp32"), inplace = c.inplace}
    if c.op == "layernorm" then
      O.mean = poisoned(c, c.M, "fp32")
    elseif c.op == "add_rmsnorm" then
      O.residual_out = poisoned(c, {})
    end
    local f = forward(c, v, I, O)
    for name, want in pairs(ref_f) do
      check(c, v .. " fwd", f[name], want, name)
    end
  end
  for _, v in ipairs(strategies or drivers.strategies("cpu", c.op, "bwd")) do
    local O = {dx = poisoned(c, {}), inplace = c.inplace}
    if I.w then
      O.dw = poisoned(c, c.N, I.w.dtype)
    end
    if I.b then
      O.db = poisoned(c, c.N, I.b.dtype)
    end
    local b = backward(c, v, I, S, O)
    for name, want in pairs(ref_b) do
      check(c, v .. " bwd", b[name], want, name)
    end
  end
  release()
end

---- the specs ----

describe("CPU strategies against ref", function()
  local MS, NS = {1, 7, 37, 199}, {1, 7, 111, 1023, 1025, 4097}

  for _, op in ipairs(OPS) do
    it(op .. ": the shape grid x dtypes, default options", function()
      for _, M in ipairs(MS) do
        for _, N in ipairs(NS) do
          for _, dt in ipairs(DTYPES) do
            run_case({op = op, M = M, N = N, dt = dt, dres = true})
          end
        end
      end
    end)
  end

  -- The options on two shapes: rows with a tail over NLC_BLK (1025) and many short rows (111).
  local SHAPES = {{37, 1025}, {199, 111}}
  local WEIGHTS = {"fp32", "x", "none"}
  local CASTS = {"llama", "gemma", "none"}

  -- Each option moved away from the defaults on its own, then all of them at once.
  local function each_variation(op, fn)
    local list = {{weight = "x"}, {weight = "none"}, {offset = 0.5}, {inplace = true},
      {strided = true}}
    if op == "layernorm" then
      list[#list + 1] = {bias = "x"}
      list[#list + 1] = {bias = "none"}
      list[#list + 1] = {weight = "x", bias = "x", offset = 0.5, inplace = true, strided = true}
    else
      list[#list + 1] = {cast = "gemma"}
      list[#list + 1] = {cast = "none"}
      list[#list + 1] = {weight = "x", cast = "none", offset = 0.5, inplace = true,
        strided = true}
    end
    for _, o in ipairs(list) do
      o.dres = op == "add_rmsnorm"
      fn(o)
    end
    if op == "add_rmsnorm" then
      fn({dres = false})
      fn({dres = false, inplace = true, strided = true, cast = "gemma"})
    end
  end

  -- The full cross product.
  local function each_option(op, fn)
    for _, wk in ipairs(WEIGHTS) do
      for _, second in ipairs(op == "layernorm" and WEIGHTS or CASTS) do
        for _, offset in ipairs(wk == "none" and {0} or {0, 0.5}) do
          for _, inplace in ipairs({false, true}) do
            for _, strided in ipairs({false, true}) do
              for _, dres in ipairs(op == "add_rmsnorm" and {true, false} or {false}) do
                fn({weight = wk, bias = op == "layernorm" and second or nil,
                  cast = op ~= "layernorm" and second or nil, offset = offset,
                  inplace = inplace, strided = strided, dres = dres})
              end
            end
          end
        end
      end
    end
  end

  -- Each option alone, then every combination (#slow: about 7 s under Lua 5.4 for the three
  -- ops, about 50 s under the sanitizers).
  local SWEEPS = {{"each option on two shapes", each_variation},
    {"every option combination on two shapes #slow", each_option}}
  for _, sweep in ipairs(SWEEPS) do
    for _, op in ipairs(OPS) do
      it(op .. ": " .. sweep[1], function()
        for _, shape in ipairs(SHAPES) do
          for _, dt in ipairs(DTYPES) do
            sweep[2](op, function(o)
              o.op, o.M, o.N, o.dt = op, shape[1], shape[2], dt
              run_case(o)
            end)
          end
        end
      end)
    end
  end
end)

describe("CPU strategies, the weight gradient's rounding of x * rstd", function()
  -- nl.tolerance cannot see whether dw pairs dy with x*rstd rounded to the dtype (llama,
  -- none) or not: the difference is under an ULP per term. Here it is exact: rows of one
  -- value c = +-2^k give x*rstd = +-1 / sqrt(1 + eps/c^2), within half an ULP of +-1 in bf16
  -- and fp16 for eps = 2^-14, so rounded it is +-1 and dw = sum of +-dy, small integers that
  -- every strategy must hit exactly (unrounded, dw misses by about 2^-13 relative).
  it("llama and none pair dy with round(x * rstd): an exact case", function()
    local M, N, eps = 24, 37, 2 ^ -14
    local C = {0.5, -1, 2, -4, 1, -0.5}
    for _, op in ipairs({"rmsnorm", "add_rmsnorm"}) do
      for _, dt in ipairs({"bf16", "fp16"}) do
        for _, cast in ipairs({"llama", "none"}) do
          local xs, dys, want = {}, {}, {}
          for j = 1, N do
            want[j] = 0
          end
          for i = 1, M do
            local c = C[(i - 1) % #C + 1]
            for j = 1, N do
              local dy = (i * 7 + j * 3) % 7 - 3          -- integers in [-3, 3]
              xs[#xs + 1], dys[#dys + 1] = op == "add_rmsnorm" and c / 2 or c, dy
              want[j] = want[j] + (c > 0 and dy or -dy)
            end
          end
          local x = keep(cpu:empty({M, N}, dt)):write(0, xs)
          local dy = keep(cpu:empty({M, N}, dt)):write(0, dys)
          local w = keep(cpu:full(N, 1.5, "fp32"))
          local dw_want = keep(cpu:from_table(want, "fp32"))
          local h, rstd
          if op == "rmsnorm" then
            h = x
            local _
            _, rstd = keep(nl.rmsnorm(x, w, {variant = "ref", eps = eps, cast = cast}))
          else
            local _
            _, h, rstd = keep(nl.add_rmsnorm(x, x, w, {variant = "ref", eps = eps, cast = cast}))
          end
          for _, v in ipairs({"ref", "row", "persistent", "auto"}) do
            local _, dw
            if op == "rmsnorm" then
              _, dw = keep(nl.rmsnorm_bwd(dy, h, w, rstd, {variant = v, cast = cast}))
            else
              _, dw = keep(nl.add_rmsnorm_bwd(dy, h, w, rstd, {variant = v, cast = cast}))
            end
            local cmp = nl.compare(dw, dw_want, {atol = 0, rtol = 0})
            assert(cmp.ok, string.format("%s %s %s %s: dw: %s", op, v, dt, cast, tostring(cmp)))
          end
        end
      end
    end
  end)
end)

describe("CPU strategies, determinism and threads", function()
  it("dw and db are bitwise reproducible run to run", function()
    for _, op in ipairs(OPS) do
      for _, dt in ipairs(DTYPES) do
        for _, shape in ipairs({{199, 1025}, {37, 4097}}) do
          local c = {op = op, M = shape[1], N = shape[2], dt = dt, weight = "fp32", bias = "x",
            cast = "llama", offset = 0, dres = true}
          local I = inputs(c)
          local S = forward(c, "ref", I, {})
          S.h = S.residual_out
          for _, v in ipairs({"row", "persistent"}) do
            local a = backward(c, v, I, S, {})
            local b = backward(c, v, I, S, {})
            for _, name in ipairs({"dx", "dw", "db"}) do
              if a[name] then
                local cmp = nl.compare(a[name], b[name], {atol = 0, rtol = 0})
                assert(cmp.max_abs == 0 and cmp.n_nan == 0, string.format(
                  "%s: %s differs between two runs (seed %d): %s", label(c, v), name, seed_of(c),
                  tostring(cmp)))
              end
            end
          end
          release()
        end
      end
    end
  end)

  it("agree with ref for 1, 3 and 5 threads", function()
    for _, threads in ipairs({1, 3, 5}) do
      helper.with_settings({["cpu.threads"] = threads}, function()
        for _, op in ipairs(OPS) do
          for _, shape in ipairs({{7, 1025}, {37, 111}, {1, 4097}}) do
            run_case({op = op, M = shape[1], N = shape[2], dt = "bf16", weight = "x",
              bias = "fp32", dres = true}, {"row", "persistent"})
          end
        end
      end)
    end
  end)
end)

describe("nl.run info of the CPU strategies", function()
  it("deterministic, the byte model and extra bytes = 2 x workspace", function()
    helper.with_settings({["cpu.threads"] = 3}, function()
      -- layernorm backward, bf16 activations, fp32 weight, bf16 bias, M = 37, N = 1025,
      -- counted by hand: dy, x read and dx written (3 x 37 x 1025 x 2 = 227550), w read and
      -- dw written (2 x 1025 x 4 = 8200), db written (1025 x 2 = 2050; b is not read),
      -- mean and rstd read (2 x 37 x 4 = 296): 238096 bytes.
      local M, N = 37, 1025
      local x, dy = keep(cpu:randn({M, N}, "bf16", {seed = 1}), cpu:randn({M, N}, "bf16",
        {seed = 2}))
      local w, b = keep(cpu:randn(N, "fp32", {seed = 3}), cpu:randn(N, "bf16", {seed = 4}))
      local y, mean, rstd = keep(nl.layernorm(x, w, b, {variant = "ref"}))
      local dx, dw, db = keep(cpu:empty({M, N}, "bf16"), cpu:empty(N, "fp32"),
        cpu:empty(N, "bf16"))
      local args = {dy = dy, x = x, w = w, b = b, mean = mean, rstd = rstd, dx = dx, dw = dw,
        db = db}
      for _, v in ipairs({"ref", "row", "persistent", "auto"}) do
        local info = nl.run("layernorm.bwd." .. v, args)
        assert.are.equal(238096, info.bytes)
        assert.is_true(info.deterministic)
        assert.are.equal(2 * info.workspace_bytes, info.extra_bytes)
        -- the scratch: row an M x N fp32 temp per gradient, persistent a partial row per
        -- thread and gradient (auto picks persistent from cpu.persistent_min_m = 16 rows)
        local want_ws = ({ref = 0, row = 4 * M * N * 2, persistent = 4 * 3 * N * 2,
          auto = 4 * 3 * N * 2})[v]
        assert.are.equal(want_ws, info.workspace_bytes, v)
        assert.are.equal(v == "auto" and "layernorm.bwd.persistent" or "layernorm.bwd." .. v,
          info.variant)
      end

      -- add_rmsnorm forward in place, fp16, weight fp16, M = 7, N = 111: x and residual read,
      -- y and residual_out written (4 x 7 x 111 x 2 = 6216), w read (222), rstd written (28):
      -- 6466 bytes; the residual is counted once read and once written although it is one
      -- buffer.
      local x2, r2 = keep(cpu:randn({7, 111}, "fp16", {seed = 5}), cpu:randn({7, 111}, "fp16",
        {seed = 6}))
      local w2, y2, rs2 = keep(cpu:randn(111, "fp16", {seed = 7}), cpu:empty({7, 111}, "fp16"),
        cpu:empty(7, "fp32"))
      for _, v in ipairs({"ref", "row", "persistent", "auto"}) do
        local info = nl.run("add_rmsnorm.fwd." .. v, {x = x2, residual = r2, w = w2, y = y2,
          residual_out = r2, rstd = rs2, eps = 1e-6})
        assert.are.equal(6466, info.bytes)
        assert.is_true(info.deterministic)
        assert.are.equal(0, info.workspace_bytes)
        assert.are.equal(0, info.extra_bytes)
      end
    end)
  end)

  it("the byte model over the grid: every buffer once at its logical size", function()
    local SZ = {fp32 = 4, fp16 = 2, bf16 = 2}
    for _, dt in ipairs(DTYPES) do
      for _, shape in ipairs({{1, 7}, {37, 1025}}) do
        local M, N = shape[1], shape[2]
        local A, V = M * N * SZ[dt], N * 4               -- an activation, an fp32 vector
        local x = keep(cpu:empty({M, N}, dt, {stride = N + 3}):fill(1))
        local dy = keep(cpu:full({M, N}, 1, dt))
        local w = keep(cpu:full(N, 1, "fp32"))
        local rstd, mean = keep(cpu:full(M, 1, "fp32"), cpu:full(M, 0, "fp32"))
        local y, dx, dw = keep(cpu:empty({M, N}, dt), cpu:empty({M, N}, dt), cpu:empty(N, "fp32"))
        for _, v in ipairs({"row", "persistent"}) do
          local f = nl.run("rmsnorm.fwd." .. v, {x = x, w = w, y = y, rstd = rstd, eps = 1e-6})
          assert.are.equal(2 * A + V + 4 * M, f.bytes)
          local b = nl.run("rmsnorm.bwd." .. v, {dy = dy, x = x, w = w, rstd = rstd, dx = dx,
            dw = dw})
          assert.are.equal(3 * A + 2 * V + 4 * M, b.bytes)
          local bi = nl.run("rmsnorm.bwd." .. v, {dy = dy, x = x, w = w, rstd = rstd, dx = dy,
            dw = dw})
          assert.are.equal(3 * A + 2 * V + 4 * M, bi.bytes)
          local l = nl.run("layernorm.bwd." .. v, {dy = dy, x = x, rstd = rstd, mean = mean,
            dx = dx})
          assert.are.equal(3 * A + 8 * M, l.bytes)
          assert.are.equal(0, l.workspace_bytes)
          -- layernorm: the bias read once (forward) and db written once (backward, b not
          -- read), mean and rstd (fp32, M each) written by the forward and read by the backward
          local b_, db = keep(cpu:full(N, 0, "fp32"), cpu:empty(N, "fp32"))
          local lf = nl.run("layernorm.fwd." .. v, {x = x, w = w, b = b_, y = y, mean = mean,
            rstd = rstd, eps = 1e-5})
          assert.are.equal(2 * A + 2 * V + 8 * M, lf.bytes)
          local lb = nl.run("layernorm.bwd." .. v, {dy = dy, x = x, w = w, b = b_, mean = mean,
            rstd = rstd, dx = dx, dw = dw, db = db})
          assert.are.equal(3 * A + 3 * V + 8 * M, lb.bytes)
          -- add_rmsnorm: x and residual read, y and residual_out written; the backward reads
          -- dy, h (as x), the gradient at residual_out (dres) when given, and writes dx
          local res, rout = keep(cpu:full({M, N}, 1, dt), cpu:empty({M, N}, dt))
          local af = nl.run("add_rmsnorm.fwd." .. v, {x = x, residual = res, w = w, y = y,
            residual_out = rout, rstd = rstd, eps = 1e-6})
          assert.are.equal(4 * A + V + 4 * M, af.bytes)
          local ab = nl.run("add_rmsnorm.bwd." .. v, {dy = dy, dres = res, x = x, w = w,
            rstd = rstd, dx = dx, dw = dw})
          assert.are.equal(4 * A + 2 * V + 4 * M, ab.bytes)
          local ab0 = nl.run("add_rmsnorm.bwd." .. v, {dy = dy, x = x, w = w, rstd = rstd,
            dx = dx, dw = dw})
          assert.are.equal(3 * A + 2 * V + 4 * M, ab0.bytes)
          assert.is_true(f.deterministic and b.deterministic and l.deterministic)
          assert.are.equal(2 * b.workspace_bytes, b.extra_bytes)
        end
        release()
      end
    end
  end)
end)

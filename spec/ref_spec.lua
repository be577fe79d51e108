-- The fp64 reference (variant "ref"), the oracle every other variant is checked against.
--   analytic cases: closed forms of rmsnorm on constant rows, layernorm on affine rows,
--     add_rmsnorm as h = x + residual followed by rmsnorm(h);
--   consistency: non-affine = unit weight, offset = shifted weight, the cast modes put their
--     roundings where DESIGN.md says, and a run on a storage dtype equals the fp64 run rounded
--     once (gemma, layernorm);
--   finite differences: ref's backward (dx, dw, db, the dres pass-through) against central
--     differences of ref's forward in fp64, for all three ops with and without weight, bias
--     and offset. rstd and mean are stored fp32 by contract, so the backward is only good to
--     about 1e-7 relative; the bound used is a few 1e-6.
local nl = require("normlab")
local helper = require("spec.helper")

local cpu = nl.device("cpu")

local keep = helper.keeper(after_each)

local function vals(b)
  return b:read(0, #b)
end

local function buf(t, dt)
  return keep(cpu:from_table(t, dt or "fp64"))
end

-- a close to ref: |a - ref| <= atol + rtol |ref| everywhere; the message says where not.
local function close(a, ref, atol, rtol, what)
  if type(ref) == "table" then
    ref = buf(ref, "fp64")
  end
  local c = nl.compare(a, ref, {atol = atol, rtol = rtol})
  assert(c.ok, (what or "") .. ": " .. tostring(c))
end

-- a and b hold the same values (NaN matching NaN).
local function exact(a, b, what)
  close(a, b, 0, 0, what)
end

-- Half an fp32 ULP, relative: the error of a value computed in fp64 and stored in fp32.
local F32 = 2 ^ -24 * (1 + 2 ^ -20)

local REF = {variant = "ref"}
local function with(opts, extra)
  local o = {}
  for k, v in pairs(opts) do
    o[k] = v
  end
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return o
end

describe("ref, analytic cases", function()
  it("rmsnorm of a constant row c is sign(c) * W / sqrt(1 + eps / c^2)", function()
    local N, eps = 13, 2 ^ -10                   -- eps exact in fp32 (the core keeps fp32)
    local cs = {0.5, -3, 1e-3, -2 ^ -7, 0}
    local rows = {}
    for i, c in ipairs(cs) do
      rows[i] = {}
      for j = 1, N do
        rows[i][j] = c
      end
    end
    local x = buf(rows)
    local wr = keep(cpu:randn(N, "fp64", {seed = 11, mean = 1, std = 0.5}))
    for _, case in ipairs({{w = wr, offset = 0}, {w = wr, offset = 0.25}, {w = nil, offset = 0}}) do
      local W = {}
      for j, v in ipairs(case.w and vals(case.w) or {}) do
        W[j] = v + case.offset
      end
      for _, cast in ipairs({"llama", "gemma", "none"}) do
        local y, rstd = keep(nl.rmsnorm(x, case.w, {variant = "ref", eps = eps,
          offset = case.w and case.offset or nil, cast = cast}))
        local want_y, want_r = {}, {}
        for i, c in ipairs(cs) do
          want_y[i] = {}
          for j = 1, N do
            local s = c > 0 and 1 or (c < 0 and -1 or 0)
            want_y[i][j] = c == 0 and 0 or s * (W[j] or 1) / math.sqrt(1 + eps / (c * c))
          end
          want_r[i] = 1 / math.sqrt(c * c + eps)
        end
        local what = string.format("%s weight, offset %g, cast %s", case.w and "with" or "no",
          case.offset, cast)
        close(y, want_y, 1e-15, 1e-13, "y " .. what)
        close(rstd, want_r, 0, F32, "rstd " .. what)
      end
    end
  end)

  it("layernorm of an affine row a*j + b gives (j - (N-1)/2) a W / sqrt(var + eps) + B",
    function()
      local eps = 2 ^ -12
      local ab = {{0.25, -1.5}, {-2, 3}, {2 ^ -10, 100}, {0, 7}}
      for _, N in ipairs({1, 2, 17}) do
        local rows = {}
        for i, p in ipairs(ab) do
          rows[i] = {}
          for j = 0, N - 1 do
            rows[i][j + 1] = p[1] * j + p[2]          -- exact in fp64
          end
        end
        local x = buf(rows)
        local w = keep(cpu:randn(N, "fp64", {seed = 21, mean = 1, std = 0.5}))
        local b = keep(cpu:randn(N, "fp64", {seed = 22}))
        for _, case in ipairs({{w = w, b = b}, {w = w}, {b = b}, {}, {w = w, b = b, offset = 0.5}}) do
          local W, B = case.w and vals(case.w) or {}, case.b and vals(case.b) or {}
          local y, mean, rstd = keep(nl.layernorm(x, case.w, case.b, {variant = "ref", eps = eps,
            offset = case.offset}))
          local want_y, want_m, want_r = {}, {}, {}
          for i, p in ipairs(ab) do
            local var = p[1] * p[1] * (N * N - 1) / 12
            local r = 1 / math.sqrt(var + eps)
            want_y[i] = {}
            for j = 0, N - 1 do
              local Wj = (W[j + 1] or 1) + (case.offset or 0)
              want_y[i][j + 1] = (j - (N - 1) / 2) * p[1] * r * Wj + (B[j + 1] or 0)
            end
            want_m[i] = p[1] * (N - 1) / 2 + p[2]
            want_r[i] = r
          end
          local what = string.format("N=%d w=%s b=%s offset=%s", N, tostring(case.w ~= nil),
            tostring(case.b ~= nil), tostring(case.offset))
          close(y, want_y, 1e-13, 1e-12, "y " .. what)
          close(mean, want_m, 0, F32, "mean " .. what)
          close(rstd, want_r, 0, F32, "rstd " .. what)
        end
      end
    end)

  it("add_rmsnorm returns h = x + residual and the rmsnorm of h", function()
    for _, dt in ipairs({"fp64", "fp32", "bf16", "fp16"}) do
      local M, N = 5, 33
      local x = keep(cpu:randn({M, N}, dt, {seed = 31}))
      local r = keep(cpu:randn({M, N}, dt, {seed = 32}))
      local w = keep(cpu:randn(N, dt == "fp64" and "fp64" or "fp32", {seed = 33, mean = 1}))
      -- h: the fp64 sum (exact for these dtypes), rounded once to the dtype
      local xv, rv, hv = vals(x), vals(r), {}
      for k = 1, #xv do
        hv[k] = xv[k] + rv[k]
      end
      local h_want = keep(cpu:empty({M, N}, dt))
      h_want:write(0, hv)
      for _, cast in ipairs({"llama", "gemma", "none"}) do
        local o = {variant = "ref", cast = cast, offset = 0.125}
        local y, h, rstd = keep(nl.add_rmsnorm(x, r, w, o))
        exact(h, h_want, dt .. " residual_out " .. cast)
        local y2, rstd2 = keep(nl.rmsnorm(h_want, w, o))
        exact(y, y2, dt .. " y " .. cast)
        exact(rstd, rstd2, dt .. " rstd " .. cast)
        -- in place: residual_out over residual gives the same
        local r2 = keep(r:to(cpu))
        local y3, h3 = keep(nl.add_rmsnorm(x, r2, w, with(o, {inplace = true})))
        assert.are.equal(r2, h3)
        exact(h3, h_want, dt .. " in-place residual_out " .. cast)
        exact(y3, y2, dt .. " in-place y " .. cast)
      end
    end
  end)
end)

describe("ref, consistency", function()
  local M, N = 6, 29

  local function inputs(dt)
    local x = keep(cpu:randn({M, N}, dt, {seed = 41}))
    local r = keep(cpu:randn({M, N}, dt, {seed = 42}))
    local dy = keep(cpu:randn({M, N}, dt, {seed = 43}))
    local w = keep(cpu:randn(N, dt == "fp64" and "fp64" or "fp32", {seed = 44, mean = 1, std = 0.3}))
    local b = keep(cpu:randn(N, dt == "fp64" and "fp64" or "fp32", {seed = 45, std = 0.3}))
    return x, r, dy, w, b
  end

  -- Every output of fwd + bwd of op with options o (w, b may be nil), in a table by name.
  local function run(op, x, r, dy, w, b, o)
    o = with(o, {variant = "ref"})
    local bo = {variant = "ref", cast = o.cast, offset = o.offset}
    if op == "rmsnorm" then
      local y, rstd = keep(nl.rmsnorm(x, w, o))
      local dx, dw = keep(nl.rmsnorm_bwd(dy, x, w, rstd, bo))
      return {y = y, rstd = rstd, dx = dx, dw = dw}
    elseif op == "layernorm" then
      local y, mean, rstd = keep(nl.layernorm(x, w, b, o))
      local dx, dw, db = keep(nl.layernorm_bwd(dy, x, w, b, mean, rstd, bo))
      return {y = y, mean = mean, rstd = rstd, dx = dx, dw = dw, db = db}
    end
    local y, h, rstd = keep(nl.add_rmsnorm(x, r, w, o))
    local dx, dw = keep(nl.add_rmsnorm_bwd(dy, h, w, rstd, with(bo, {dres = r})))
    return {y = y, residual_out = h, rstd = rstd, dx = dx, dw = dw}
  end

  local OPS = {"rmsnorm", "layernorm", "add_rmsnorm"}

  local function same_outputs(a, b, what)
    for name, v in pairs(a) do
      assert(b[name], what .. ": " .. name .. " missing")
      exact(v, b[name], what .. " " .. name)
    end
  end

  it("non-affine equals a unit weight", function()
    for _, dt in ipairs({"fp64", "bf16"}) do
      local x, r, dy = inputs(dt)
      local ones = keep(cpu:full(N, 1, dt == "fp64" and "fp64" or "fp32"))
      for _, op in ipairs(OPS) do
        for _, cast in ipairs(op == "layernorm" and {"gemma"} or {"llama", "gemma", "none"}) do
          local o = op == "layernorm" and {} or {cast = cast}
          local a = run(op, x, r, dy, nil, nil, o)
          local b = run(op, x, r, dy, ones, nil, o)
          b.dw = nil
          same_outputs(a, b, op .. " " .. dt .. " " .. cast)
        end
      end
    end
  end)

  it("offset o with weight w equals weight w + o (fp64)", function()
    local x, r, dy, w, b = inputs("fp64")
    local o = 0.75
    local wo = keep(cpu:from_table((function()
      local t = vals(w)
      for j = 1, #t do
        t[j] = t[j] + o
      end
      return t
    end)(), "fp64"))
    for _, op in ipairs(OPS) do
      local a = run(op, x, r, dy, w, b, {offset = o})
      local c = run(op, x, r, dy, wo, b, {})
      same_outputs(a, c, op .. " offset")
    end
  end)

  it("the cast modes coincide in fp64", function()
    local x, r, dy, w = inputs("fp64")
    for _, op in ipairs({"rmsnorm", "add_rmsnorm"}) do
      local g = run(op, x, r, dy, w, nil, {cast = "gemma", offset = 0.5})
      same_outputs(run(op, x, r, dy, w, nil, {cast = "llama", offset = 0.5}), g, op .. " llama")
      same_outputs(run(op, x, r, dy, w, nil, {cast = "none", offset = 0.5}), g, op .. " none")
    end
  end)

  it("on a storage dtype, gemma and layernorm equal the fp64 run rounded once", function()
    for _, dt in ipairs({"fp32", "bf16", "fp16"}) do
      local x, r, dy, w, b = inputs(dt)
      local x64, dy64 = keep(x:to(cpu, "fp64")), keep(dy:to(cpu, "fp64"))
      for _, op in ipairs({"rmsnorm", "layernorm"}) do
        local o = op == "layernorm" and {offset = 0.5} or {cast = "gemma", offset = 0.5}
        local got = run(op, x, r, dy, w, b, o)
        -- fp32 weights serve fp64 activations too: dw and db come out fp32 in both runs
        local want = run(op, x64, r, dy64, w, b, o)
        for name, v in pairs(got) do
          local wv = want[name]
          if wv.dtype ~= v.dtype then
            wv = keep(wv:astype(v.dtype))
          end
          exact(v, wv, op .. " " .. dt .. " " .. name)
        end
      end
    end
  end)

  it("llama rounds x*rstd to the dtype before the weight; none also rounds the weight", function()
    for _, dt in ipairs({"fp32", "bf16", "fp16"}) do
      local x, r, dy, w = inputs(dt)
      local o = 0.5
      -- t = x * r in fp64 exactly as ref forms it: the non-affine gemma output in fp64
      local x64 = keep(x:to(cpu, "fp64"))
      local t = vals((keep(nl.rmsnorm(x64, nil, {variant = "ref", cast = "gemma"}))))
      local tr = vals(buf(t, dt))                       -- rounded to dt
      local W = vals(w)
      for j = 1, N do
        W[j] = W[j] + o
      end
      local Wr = vals(buf(W, dt))                       -- none: the weight in dt too
      local want_l, want_n = {}, {}
      for k = 1, M * N do
        local j = (k - 1) % N + 1
        want_l[k] = tr[k] * W[j]
        want_n[k] = tr[k] * Wr[j]
      end
      local yl = keep(nl.rmsnorm(x, w, {variant = "ref", cast = "llama", offset = o}))
      local yn, rstd = keep(nl.rmsnorm(x, w, {variant = "ref", cast = "none", offset = o}))
      local wl, wn = keep(cpu:empty({M, N}, dt), cpu:empty({M, N}, dt))
      wl:write(0, want_l)
      wn:write(0, want_n)
      exact(yl, wl, dt .. " llama y")
      exact(yn, wn, dt .. " none y")
      -- backward: dx does not depend on the mode; dw pairs dy with round(x * rstd)
      local dxg, dwg = keep(nl.rmsnorm_bwd(dy, x, w, rstd, {variant = "ref", cast = "gemma",
        offset = o}))
      local rs, xv, dyv = vals(rstd), vals(x), vals(dy)
      local xh = {}
      for k = 1, M * N do
        xh[k] = xv[k] * rs[math.floor((k - 1) / N) + 1]
      end
      local xhr = vals(buf(xh, dt))
      for _, cast in ipairs({"llama", "none"}) do
        local dx, dw = keep(nl.rmsnorm_bwd(dy, x, w, rstd, {variant = "ref", cast = cast,
          offset = o}))
        exact(dx, dxg, dt .. " " .. cast .. " dx")
        local want = {}
        for j = 1, N do
          local s = 0
          for i = 0, M - 1 do
            s = s + dyv[i * N + j] * xhr[i * N + j]
          end
          want[j] = s
        end
        -- the sums' order differs from ref's, so up to an fp32 ULP
        close(dw, want, 0, 2 * F32, dt .. " " .. cast .. " dw")
      end
    end
  end)
end)

---- finite differences ----

-- loss = sum(y * g) (+ sum(h * g2) for add_rmsnorm, where h is residual_out) as a function of
-- one input element, through ref's forward in fp64 with preallocated outputs.
describe("ref backward against central differences in fp64", function()
  local SHAPES = {{1, 1, 0.25}, {2, 7, 2 ^ -4}, {5, 16, 2 ^ -20}}   -- M, N, eps
  local SEED = 500

  local function dot(a, b)
    local s = 0
    for k = 1, #a do
      s = s + a[k] * b[k]
    end
    return s
  end

  -- Checks the analytic gradient `an` (buffer) of the loss with respect to buffer `v`
  -- against central differences with steps of 1e-6 relative.
  local function check_grad(what, an, v, loss)
    local n, av = #v, vals(an)
    local fd, scale = {}, 0
    for k = 1, n do
      local x0 = v:read(k - 1, 1)[1]
      local h = 1e-6 * math.max(math.abs(x0), 0.1)
      v:write(k - 1, {x0 + h})
      local lp = loss()
      v:write(k - 1, {x0 - h})
      local lm = loss()
      v:write(k - 1, {x0})
      fd[k] = (lp - lm) / (2 * h)
      scale = math.max(scale, math.abs(fd[k]))
    end
    local worst, at = 0, 1
    for k = 1, n do
      -- relative to the gradient's scale, with a floor of 0.1 (inputs are randn-scaled) for
      -- gradients that vanish: LayerNorm of one column has dx = dw = 0 exactly, where the
      -- fp32-stored mean leaves (x - fp32(x)) * rstd, about 1e-8, in dw.
      local err = math.abs(av[k] - fd[k]) / (math.abs(fd[k]) + math.max(scale, 0.1))
      if err > worst then
        worst, at = err, k
      end
    end
    assert(worst <= 3e-6, string.format("%s (seed %d): element %d: backward %.12g, central "
      .. "difference %.12g, error %.3g of max |grad| %.3g", what, SEED, at, av[at], fd[at], worst,
      scale))
  end

  local CASES = {
    rmsnorm = {{w = true}, {w = true, offset = 0.5}, {w = true, cast = "gemma"}, {}},
    layernorm = {{w = true, b = true}, {w = true}, {b = true}, {},
      {w = true, b = true, offset = 0.5}},
    add_rmsnorm = {{w = true, dres = true}, {w = true, offset = 0.5, dres = true}, {w = true},
      {dres = true}},
  }

  for _, op in ipairs({"rmsnorm", "layernorm", "add_rmsnorm"}) do
    it(op, function()
      for _, shape in ipairs(SHAPES) do
        local M, N, eps = shape[1], shape[2], shape[3]
        for ci, c in ipairs(CASES[op]) do
          local s = SEED + 10 * ci
          local x = keep(cpu:randn({M, N}, "fp64", {seed = s}))
          local res = keep(cpu:randn({M, N}, "fp64", {seed = s + 1}))
          local w = c.w and keep(cpu:randn(N, "fp64", {seed = s + 2, mean = 1, std = 0.5})) or nil
          local b = c.b and keep(cpu:randn(N, "fp64", {seed = s + 3})) or nil
          local g = keep(cpu:randn({M, N}, "fp64", {seed = s + 4}))
          local g2 = keep(cpu:randn({M, N}, "fp64", {seed = s + 5}))
          local gv, g2v = vals(g), vals(g2)
          local y, h = keep(cpu:empty({M, N}, "fp64"), cpu:empty({M, N}, "fp64"))
          local mean, rstd = keep(cpu:empty(M, "fp32"), cpu:empty(M, "fp32"))
          local fo = {variant = "ref", eps = eps, offset = c.offset, out = y, rstd = rstd}
          if op ~= "layernorm" then
            fo.cast = c.cast
          end
          local function forward()
            if op == "rmsnorm" then
              nl.rmsnorm(x, w, fo)
            elseif op == "layernorm" then
              nl.layernorm(x, w, b, with(fo, {mean = mean}))
            else
              nl.add_rmsnorm(x, res, w, with(fo, {residual_out = h}))
            end
          end
          local function loss()
            forward()
            local l = dot(vals(y), gv)
            if op == "add_rmsnorm" and c.dres then
              l = l + dot(vals(h), g2v)
            end
            return l
          end
          -- the analytic gradients, from the saved statistics of an unperturbed forward
          forward()
          local bo = {variant = "ref", offset = c.offset}
          local dx, dw, db
          if op == "rmsnorm" then
            dx, dw = keep(nl.rmsnorm_bwd(g, x, w, rstd, with(bo, {cast = c.cast})))
          elseif op == "layernorm" then
            dx, dw, db = keep(nl.layernorm_bwd(g, x, w, b, mean, rstd, bo))
          else
            dx, dw = keep(nl.add_rmsnorm_bwd(g, h, w, rstd, with(bo,
              {dres = c.dres and g2 or nil})))
          end
          local what = string.format("%s M=%d N=%d eps=%g w=%s b=%s offset=%s cast=%s dres=%s",
            op, M, N, eps, tostring(c.w), tostring(c.b), tostring(c.offset), tostring(c.cast),
            tostring(c.dres))
          check_grad(what .. ": dx", dx, x, loss)
          if op == "add_rmsnorm" then
            -- h = x + residual: the residual gets the same gradient as x
            check_grad(what .. ": d residual", dx, res, loss)
          end
          if w then
            check_grad(what .. ": dw", dw, w, loss)
          end
          if b then
            check_grad(what .. ": db", db, b, loss)
          end
        end
      end
    end)
  end
end)

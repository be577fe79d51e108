-- Every CUDA variant of the ops spec/drivers.lua lists for CUDA (rmsnorm, layernorm and
-- add_rmsnorm) against the fp64 reference on the CPU. The variants come from the registry, so
-- a new strategy is tested without editing this file; a new op needs its driver here (the
-- problem and reference below, and check_fwd / check_bwd), which spec/coverage_spec.lua asks
-- for.
--
-- Every output buffer (y, residual_out, mean, rstd, dx, dw, db) is filled with NaN before each
-- launch, so an element a kernel forgets to write fails the comparison. The reference runs on
-- CPU copies of the same inputs, and the backward pass of both sides reads the same saved
-- statistics (the reference's rstd, and mean for layernorm). Tolerances come from
-- nl.tolerance; dW's and dB's grow with sqrt(M). Runs only where a GPU is present (#cuda);
-- the layernorm tests stay pending while no CUDA layernorm variant is registered.
local nl = require("normlab")
local helper = require("spec.helper")
local util = require("normlab.util")
local drivers = require("spec.drivers")

local BACKEND = "cuda"
local cuda = helper.cuda
local cpu = nl.device("cpu")
local it_cuda = cuda and it or pending
local NaN = 0 / 0

local OPS = drivers.cuda.ops
local function variants(op, pass)
  return drivers.strategies(BACKEND, op, pass)
end
-- The layernorm tests need a GPU and a registered CUDA layernorm variant; until one is
-- registered they show as pending instead of passing without running anything.
local has_ln = #variants("layernorm", "fwd") + #variants("layernorm", "bwd") > 0
local it_ln = cuda and has_ln and it or pending
local MS = {1, 7, 37, 199, 4099}
local NS = {1, 7, 64, 111, 512, 1023, 1025, 4096, 8191, 16384, 65536}
-- The shape grid is every (M, N) above up to this many elements: enough to reach every
-- code path (each register layout, the looping kernels, tails of every kind) while the fp64
-- reference stays quick.
local MAX_ELEMS = 2 ^ 23

local with_settings = helper.with_settings

local function free(...)
  for i = 1, select("#", ...) do
    local b = select(i, ...)
    if b then
      b:free()
    end
  end
end

-- Two buffers hold the same bits (and no NaN); `what` names them in the failure.
local function assert_same_bits(a, b, what)
  local cmp = nl.compare(a, b, {atol = 0, rtol = 0})
  assert(cmp.max_abs == 0 and cmp.n_nan == 0, what .. ": " .. tostring(cmp))
end

-- A buffer of NaN; rows of `stride` elements when given (a padded output).
local function poisoned(shape, dtype, stride)
  local b = cuda:empty(shape, dtype, {stride = stride})
  b:fill(NaN)
  return b
end

-- One problem: inputs on the CPU and their copies on the GPU. o: op ("rmsnorm" unless add
-- says add_rmsnorm), weight and bias ("fp32" | "x" | "none"; bias: layernorm only), cast
-- (rmsnorm ops only), offset, stride (row padding). `from`, when given, is an earlier problem
-- of the same M, N, dtype and stride whose x and dy (the same draws: the seed is M's and N's)
-- this one shares instead of drawing them again; `from` is released after it.
local function problem(M, N, dtype, o, from)
  o = o or {}
  local op = o.op or (o.add and "add_rmsnorm") or "rmsnorm"
  local ln = op == "layernorm"
  local seed = 1000 * M + N
  local p = {op = op, M = M, N = N, dtype = dtype, seed = seed,
    cast = not ln and (o.cast or "llama") or nil, offset = o.offset or 0,
    eps = ln and 1e-5 or 1e-6, add = op == "add_rmsnorm"}
  local function kind(k)
    if k == "none" then
      return nil
    end
    return k == "x" and dtype or "fp32"
  end
  local wdt, bdt = kind(o.weight), ln and kind(o.bias) or nil
  local stride = o.stride and N + o.stride or nil
  if from then
    p.x, p.dy, p.gx, p.gdy, p.shared = from.x, from.dy, from.gx, from.gdy, true
  else
    p.x = cpu:randn({M, N}, dtype, {seed = seed})
    p.dy = cpu:randn({M, N}, dtype, {seed = seed + 1})
  end
  if wdt then
    p.w = cpu:randn({N}, wdt, {seed = seed + 2, mean = 1, std = 0.25})
  end
  if bdt then
    p.b = cpu:randn({N}, bdt, {seed = seed + 5, std = 0.5})
  end
  if p.add then
    p.res = cpu:randn({M, N}, dtype, {seed = seed + 3})
    p.dres = cpu:randn({M, N}, dtype, {seed = seed + 4})
  end
  if not from then
    p.gx = cuda:empty({M, N}, dtype, {stride = stride})
    p.gx:copy_(p.x)
    p.gdy = cuda:empty({M, N}, dtype, {stride = stride})
    p.gdy:copy_(p.dy)
  end
  p.gw = p.w and p.w:to(cuda)
  p.gb = p.b and p.b:to(cuda)
  p.gres = p.res and p.res:to(cuda)
  p.gdres = p.dres and p.dres:to(cuda)
  return p
end

local function release(p)
  free(p.w, p.b, p.res, p.dres, p.gw, p.gb, p.gres, p.gdres, p.ry, p.rr, p.rh, p.rmean, p.rdx,
    p.rdw, p.rdb, p.grstd, p.gmean, p.gh)
  if not p.shared then
    free(p.x, p.dy, p.gx, p.gdy)
  end
end

-- The options of a forward; layernorm has no cast (p.cast is nil).
local function fwd_opts(p, variant, extra)
  local o = {variant = variant, cast = p.cast, offset = p.offset, eps = p.eps}
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return o
end

-- The reference forward and backward, computed once per problem. For add_rmsnorm the
-- backward's input is the forward's residual_out h; layernorm's backward reads the mean
-- and rstd its forward saved.
local function reference(p)
  if p.add then
    p.ry, p.rh, p.rr = nl.add_rmsnorm(p.x, p.res, p.w, fwd_opts(p, "ref"))
    p.rdx, p.rdw = nl.add_rmsnorm_bwd(p.dy, p.rh, p.w, p.rr,
      {variant = "ref", cast = p.cast, offset = p.offset, dres = p.dres})
    p.gh = p.rh:to(cuda)
  elseif p.op == "layernorm" then
    p.ry, p.rmean, p.rr = nl.layernorm(p.x, p.w, p.b, fwd_opts(p, "ref"))
    p.rdx, p.rdw, p.rdb = nl.layernorm_bwd(p.dy, p.x, p.w, p.b, p.rmean, p.rr,
      {variant = "ref", offset = p.offset})
    p.gmean = p.rmean:to(cuda)
  else
    p.ry, p.rr = nl.rmsnorm(p.x, p.w, fwd_opts(p, "ref"))
    p.rdx, p.rdw = nl.rmsnorm_bwd(p.dy, p.x, p.w, p.rr,
      {variant = "ref", cast = p.cast, offset = p.offset})
  end
  p.grstd = p.rr:to(cuda)
end

local function label(p, variant, pass)
  local second = p.op == "layernorm" and "b=" .. (p.b and p.b.dtype or "none")
    or "cast=" .. p.cast
  return string.format("%s.%s.%s M=%d N=%d %s w=%s %s offset=%g", p.op, pass, variant, p.M,
    p.N, p.dtype, p.w and p.w.dtype or "none", second, p.offset)
end

local function fwd_args(p)
  return {x = p.gx, residual = p.gres, w = p.gw, b = p.gb, eps = p.eps, cast = p.cast,
    offset = p.offset}
end

-- fwd_args(p) with NaN-poisoned outputs: y, rstd, and the mean or residual_out p's op writes.
local function poisoned_fwd_args(p)
  local a = fwd_args(p)
  a.y, a.rstd = poisoned({p.M, p.N}, p.dtype), poisoned({p.M}, "fp32")
  a.mean = p.op == "layernorm" and poisoned({p.M}, "fp32") or nil
  a.residual_out = p.add and poisoned({p.M, p.N}, p.dtype) or nil
  return a
end

-- Runs a forward variant into poisoned outputs and compares. false, reason when the
-- variant does not take this shape.
local function check_fwd(p, variant)
  local y, rstd = poisoned({p.M, p.N}, p.dtype), poisoned({p.M}, "fp32")
  local mean = p.op == "layernorm" and poisoned({p.M}, "fp32") or nil
  local probe = fwd_args(p)
  probe.y, probe.rstd, probe.mean = y, rstd, mean
  if p.add then
    probe.residual_out = y:to(cuda)
  end
  local ok, why = nl.supports(p.op .. ".fwd." .. variant, probe)
  free(probe.residual_out)
  if not ok then
    free(y, rstd, mean)
    return false, why
  end
  local what = label(p, variant, "fwd")
  if p.add then
    local h = poisoned({p.M, p.N}, p.dtype)
    nl.add_rmsnorm(p.gx, p.gres, p.gw, fwd_opts(p, variant, {out = y, rstd = rstd, residual_out = h}))
    assert.allclose(h, p.rh, {output = "residual_out", seed = what})
    h:free()
  elseif mean then
    nl.layernorm(p.gx, p.gw, p.gb, fwd_opts(p, variant, {out = y, mean = mean, rstd = rstd}))
    assert.allclose(mean, p.rmean, {output = "mean", dtype = p.dtype, seed = what})
  else
    nl.rmsnorm(p.gx, p.gw, fwd_opts(p, variant, {out = y, rstd = rstd}))
  end
  assert.allclose(y, p.ry, {output = "y", seed = what})
  assert.allclose(rstd, p.rr, {output = "rstd", dtype = p.dtype, seed = what})
  free(y, rstd, mean)
  return true
end

-- The arguments of nl.run / nl.supports for a backward of p into dx, dw, db (o: reduce).
local function bwd_args(p, dy, dx, dw, db, o)
  return {dy = dy, x = p.add and p.gh or p.gx, w = p.gw, b = p.gb, rstd = p.grstd,
    mean = p.gmean, dres = p.gdres, dx = dx, dw = dw, db = db, cast = p.cast,
    offset = p.offset, reduce = o and o.reduce}
end

local function check_bwd(p, variant, o)
  o = o or {}
  local what = label(p, variant, "bwd") .. (o.reduce and (" reduce=" .. o.reduce) or "")
    .. (o.inplace and " inplace" or "")
  local dy = o.inplace and p.gdy:to(cuda) or p.gdy
  local dx = o.inplace and dy or poisoned({p.M, p.N}, p.dtype)
  local dw = p.w and poisoned({p.N}, p.w.dtype) or nil
  local db = p.b and poisoned({p.N}, p.b.dtype) or nil
  local ok, why = nl.supports(p.op .. ".bwd." .. variant, bwd_args(p, dy, dx, dw, db, o))
  if not ok then
    free(dx, dw, db)
    return false, why
  end
  if o.inplace then
    dx = nil
  end
  local opts = {variant = variant, cast = p.cast, offset = p.offset, reduce = o.reduce,
    dx = dx, dw = dw, db = db, inplace = o.inplace}
  local rdx, rdw, rdb
  if p.add then
    opts.dres = p.gdres
    rdx, rdw = nl.add_rmsnorm_bwd(dy, p.gh, p.gw, p.grstd, opts)
  elseif p.op == "layernorm" then
    rdx, rdw, rdb = nl.layernorm_bwd(dy, p.gx, p.gw, p.gb, p.gmean, p.grstd, opts)
  else
    rdx, rdw = nl.rmsnorm_bwd(dy, p.gx, p.gw, p.grstd, opts)
  end
  if o.inplace then
    assert.are.equal(dy, rdx)
  end
  assert.allclose(rdx, p.rdx, {output = "dx", seed = what})
  if p.w then
    assert.allclose(rdw, p.rdw, {output = "dw", dtype = p.dtype, M = p.M, seed = what})
  end
  if p.b then
    assert.allclose(rdb, p.rdb, {output = "db", dtype = p.dtype, M = p.M, seed = what})
  end
  free(rdx, rdw, rdb)
  return true
end

-- check_bwd(p, variant), then the run info of the same launch on poisoned outputs (which
-- kernel, which layout, which cluster).
local function checked_bwd_info(p, variant)
  check_bwd(p, variant)
  local dx, dw = poisoned({p.M, p.N}, p.dtype), p.w and poisoned({p.N}, p.w.dtype)
  local db = p.b and poisoned({p.N}, p.b.dtype)
  local info = nl.run(p.op .. ".bwd." .. variant, bwd_args(p, p.gdy, dx, dw, db))
  free(dx, dw, db)
  return info
end

-- The packs a thread of the pipelined backward's kernel (bwd_stride<T, VEC, ITEMS, ...>) that
-- run info names; nil for any other kernel.
local function stride_items(info)
  return tonumber(info.kernel:match("^bwd_stride<[^,]+, %d+, (%d+),"))
end

-- Under settings: check_fwd(p, variant), then the run info of the same launch on poisoned
-- outputs and the packs a thread of its one-row kernel (fwd_one / fwd_reload<T, VEC, ITEMS, ...>).
local function checked_fwd_items(p, variant, settings)
  local info
  with_settings(settings, function()
    assert.is_true(check_fwd(p, variant))
    local a = poisoned_fwd_args(p)
    info = nl.run(p.op .. ".fwd." .. variant, a)
    free(a.y, a.rstd, a.mean, a.residual_out)
  end)
  return tonumber(info.kernel:match("^fwd_%a+<[^,]+, %d+, (%d+)")), info
end

-- Every forward and backward variant of p's op; returns how many of them refused its shape
-- and the set of the refused ones ("fwd.row" = reason).
local function check_all(p)
  local skipped, refused = 0, {}
  for _, pass in ipairs({"fwd", "bwd"}) do
    for _, v in ipairs(variants(p.op, pass)) do
      local ran, why = (pass == "fwd" and check_fwd or check_bwd)(p, v)
      if not ran then
        skipped = skipped + 1
        refused[pass .. "." .. v] = why
      end
    end
  end
  return skipped, refused
end

-- check_all on every dtype x shape x weight kind x casting mode of the lists; Gemma casting
-- with a weight adds offset 1. add(shape), when given: whether that shape is add_rmsnorm's.
local function check_weight_grid(dtypes, shape_list, weights, casts, add)
  for _, dtype in ipairs(dtypes) do
    for _, s in ipairs(shape_list) do
      for _, weight in ipairs(weights) do
        for _, cast in ipairs(casts) do
          local offset = weight ~= "none" and cast == "gemma" and 1 or 0
          local p = problem(s[1], s[2], dtype,
            {weight = weight, cast = cast, offset = offset, add = add and add(s)})
          reference(p)
          check_all(p)
          release(p)
        end
      end
    end
  end
end

local function shapes()
  local list = {}
  for _, M in ipairs(MS) do
    for _, N in ipairs(NS) do
      if M * N <= MAX_ELEMS then
        list[#list + 1] = {M, N}
      end
    end
  end
  return list
end

---- layernorm ----

-- The layernorm options of the shape grid: each weight kind paired with a bias kind (a
-- weight without a bias, a bias without a weight, and each of them in fp32 and in x's
-- dtype), and a weight with offset 0 and 1 (zero-centred gamma). LN_FULL is the cross
-- product, run on a few shapes.
local LN_PAIRS = {{"fp32", "x"}, {"x", "none"}, {"none", "fp32"}}
local LN_ALL_PAIRS = {}
for _, w in ipairs({"fp32", "x", "none"}) do
  for _, b in ipairs({"fp32", "x", "none"}) do
    LN_ALL_PAIRS[#LN_ALL_PAIRS + 1] = {w, b}
  end
end
local LN_OFFSET = 1
local function ln_options(weight_bias_pairs)
  local list = {}
  for _, wb in ipairs(weight_bias_pairs) do
    for _, offset in ipairs(wb[1] == "none" and {0} or {0, LN_OFFSET}) do
      list[#list + 1] = {op = "layernorm", weight = wb[1], bias = wb[2], offset = offset}
    end
  end
  return list
end
local LN_GRID = ln_options(LN_PAIRS)
local LN_FULL = ln_options(LN_ALL_PAIRS)

-- Runs check_all on layernorm problems: each shape of shape_list with each option set of
-- options in dtype. Each registered variant must run on some problem, and auto, whatever
-- it picks, on every one (the op's contract: any M >= 1, any N >= 1).
local function check_ln(dtype, shape_list, options)
  local ran = {}
  for _, s in ipairs(shape_list) do
    local first
    for _, o in ipairs(options) do
      local p = problem(s[1], s[2], dtype, o, first)
      first = first or p
      reference(p)
      local _, refused = check_all(p)
      for _, pass in ipairs({"fwd", "bwd"}) do
        assert.is_nil(refused[pass .. ".auto"], label(p, "auto", pass) .. ": "
          .. tostring(refused[pass .. ".auto"]))
        for _, v in ipairs(variants("layernorm", pass)) do
          ran[pass .. "." .. v] = ran[pass .. "." .. v] or not refused[pass .. "." .. v]
        end
      end
      if p ~= first then
        release(p)
      end
    end
    release(first)
  end
  for _, pass in ipairs({"fwd", "bwd"}) do
    for _, v in ipairs(variants("layernorm", pass)) do
      assert.is_true(ran[pass .. "." .. v], "layernorm." .. pass .. "." .. v
        .. " refused every problem in " .. dtype)
    end
  end
end

-- The problem options of a settings test: the given ones, then layernorm's where a CUDA
-- layernorm variant is registered (layernorm runs the same kernel family and takes the same
-- rmsnorm.* settings).
local function and_ln(list, ...)
  if has_ln then
    for i = 1, select("#", ...) do
      list[#list + 1] = select(i, ...)
    end
  end
  return list
end

-- The registry's entries of the backward variants of op on the backend, auto aside.
local function bwd_entries(op)
  local list = {}
  for _, v in ipairs(nl.variants{op = op, pass = "bwd", backend = BACKEND}) do
    if v.strategy ~= "ref" and v.strategy ~= "auto" then
      list[#list + 1] = v
    end
  end
  return list
end

describe("CUDA ops #cuda", function()
  for _, op in ipairs(OPS) do
    for _, dtype in ipairs({"bf16", "fp16", "fp32"}) do
      if op == "layernorm" then
        it_ln("layernorm: every variant, forward and backward, on the shape grid in " .. dtype
          .. ", each weight / bias pair, offset 0 and " .. LN_OFFSET, function()
          check_ln(dtype, shapes(), LN_GRID)
        end)
      else
        it_cuda(op .. ": every variant, forward and backward, on the shape grid in " .. dtype,
          function()
            local skipped = 0
            for _, s in ipairs(shapes()) do
              local p = problem(s[1], s[2], dtype, {add = op == "add_rmsnorm"})
              reference(p)
              skipped = skipped + check_all(p)
              release(p)
            end
            -- blockrow refuses the wide rows only: N > 2048 (bf16/fp16) or 1024 (fp32) with
            -- 16-byte packs, and odd N > 256; staged refuses rows of 65536 fp32 (256 KB, and
            -- 128 KB of bf16 with add_rmsnorm's residual).
            assert.is_true(skipped > 0)
          end)
      end
    end
  end

  it_cuda("weights, casting modes and offset on every variant", function()
    check_weight_grid({"bf16", "fp16", "fp32"}, {{37, 1025}, {199, 4096}, {7, 65536}, {4099, 512}},
      {"fp32", "x", "none"}, {"llama", "gemma", "none"})
  end)

  -- Small hidden sizes (rows of a warp or less: several rows share a warp, the whole-warp CTA
  -- of row for N that is not a power of two): every variant and pass, each dtype, weight kind
  -- and casting mode, rmsnorm and add_rmsnorm, at the row counts of issue 18.
  local SMALL_NS = {1, 2, 7, 31, 32, 33, 63, 64, 65, 96, 127, 128, 192, 255, 256, 384, 511, 512,
    768, 1023, 1024}
  it_cuda("small hidden sizes: every variant, dtype, weight kind and casting mode, N 1 .. 1024", function()
    local list = {}
    for _, M in ipairs({1, 7, 4099, 65537}) do
      for _, N in ipairs(SMALL_NS) do
        if M * N <= 2 ^ 22 or N <= 64 then list[#list + 1] = {M, N} end
      end
    end
    for _, add in ipairs({false, true}) do
      check_weight_grid({"bf16", "fp16", "fp32"}, list, {"fp32"}, {"llama"}, function() return add end)
    end
    local few = {{65537, 64}, {4099, 33}, {7, 96}, {37, 384}, {199, 768}, {1, 1023}}
    check_weight_grid({"bf16", "fp16", "fp32"}, few, {"fp32", "x", "none"}, {"llama", "gemma", "none"})
  end)

  it_cuda("the weight loaded with x in the one-row forward kernels (early_weight_max_n)", function()
    with_settings({["rmsnorm.fwd.early_weight_max_n"] = 2 ^ 24}, function()
      check_weight_grid({"bf16", "fp16", "fp32"}, {{37, 1024}, {199, 4096}, {4099, 512}, {7, 1023}},
        {"x", "fp32", "none"}, {"llama", "gemma"}, function(s) return s[1] == 199 end)
    end)
  end)

  it_cuda("x read twice in the one-row forward kernels (reload_min_n, reload_min_m)", function()
    with_settings({["rmsnorm.fwd.reload_min_n"] = 1, ["rmsnorm.fwd.reload_min_m"] = 1}, function()
      check_weight_grid({"bf16", "fp16", "fp32"}, {{37, 1024}, {199, 8192}, {4099, 512}, {7, 1023}},
        {"x", "fp32", "none"}, {"llama", "gemma", "none"}, function(s) return s[1] == 37 end)
    end)
  end)

  -- row's packs per thread doubled where that fits the grid's CTAs in one wave
  -- (rmsnorm.fwd.one_wave_doublings): against ref either way; one row never needs a second
  -- wave, so its kernel does not change; on an H100 or H200 (132 SMs) 1024 rows of 5120 bf16
  -- columns take 1.3-1.6 waves at 2 packs a thread and one at 4 (docs/kernels.md).
  it_cuda("row's packs doubled where that fits one wave (one_wave_doublings), against ref", function()
    local gpu = cuda.info.name
    for _, o in ipairs({{}, {add = true}, {op = "layernorm", weight = "x", bias = "fp32", offset = LN_OFFSET}}) do
      for _, dtype in ipairs({"bf16", "fp32"}) do
        for _, s in ipairs({{1, 5120}, {1024, 5120}, {777, 6144}}) do
          local p = problem(s[1], s[2], dtype, o)
          reference(p)
          local items = {}
          for _, on in ipairs({0, 2}) do
            items[on] = checked_fwd_items(p, "row", {["rmsnorm.fwd.one_wave_doublings"] = on,
              ["rmsnorm.fwd.items"] = 2})
          end
          local what = label(p, "row", "fwd")
          assert(items[2] == items[0] or items[2] == 2 * items[0] or items[2] == 4 * items[0], what)
          if p.M == 1 then
            assert(items[2] == items[0], what .. ": one row doubled its packs")
          end
          if p.M == 1024 and dtype == "bf16" and not p.add and p.op == "rmsnorm" and gpu:match("H[12]00") then
            assert(items[0] == 2 and items[2] == 4, what .. ": " .. items[0] .. " -> " .. items[2] .. " packs")
          end
          release(p)
        end
      end
    end
  end)

  -- blockrow's packs doubled the same way (rmsnorm.fwd.blockrow_wave_doublings): half the
  -- threads a row and twice the rows a CTA, so half the CTAs, where that fits them in one wave;
  -- against ref either way. On a GPU of 132 SMs (H100, H200) 32768 rows of 128 bf16 columns at
  -- 2 packs (the early weight's kernel, 64-thread CTAs) are 4096 CTAs, more than the 25 an SM
  -- holds at its 40 registers, and 2048 at 4 packs fit.
  it_cuda("blockrow's packs doubled where that fits one wave (blockrow_wave_doublings), against ref", function()
    local sms132 = cuda.info.name:match("H[12]00") ~= nil
    for _, o in ipairs({{}, {add = true}, {op = "layernorm", weight = "x", bias = "x"}}) do
      for _, dtype in ipairs({"bf16", "fp32"}) do
        for _, s in ipairs({{7, 64}, {32768, 128}, {16384, 256}, {65537, 64}}) do
          local p = problem(s[1], s[2], dtype, o)
          reference(p)
          local items, grid = {}, {}
          for _, on in ipairs({0, 1}) do
            local info
            items[on], info = checked_fwd_items(p, "blockrow", {["rmsnorm.fwd.blockrow_wave_doublings"] = on,
              ["rmsnorm.fwd.blockrow_items"] = 2, ["layernorm.fwd.blockrow_items"] = 2,
              ["rmsnorm.fwd.blockrow_group"] = 0, ["rmsnorm.fwd.blockrow_block"] = 64,
              ["rmsnorm.fwd.early_weight_max_n"] = 4096})
            grid[on] = info.grid
          end
          local what = label(p, "blockrow", "fwd") .. ": " .. items[0] .. " -> " .. items[1] .. " packs"
          if items[1] == items[0] then
            assert(grid[1] == grid[0], what)
          else
            assert(items[1] == 2 * items[0] and grid[1] == math.floor((grid[0] + 1) / 2), what)
          end
          if p.M == 7 or (p.M == 65537 and dtype == "bf16") then
            -- one wave at any layout; 64 bf16 columns at 4 packs would leave a row 2 threads,
            -- fewer than rmsnorm.fwd.blockrow_wave_min_group (4)
            assert(items[1] == items[0], what)
          end
          if p.M == 32768 and dtype == "bf16" and p.op == "rmsnorm" and not p.add and sms132 then
            assert(items[0] == 2 and items[1] == 4, what)
          end
          release(p)
        end
      end
    end
  end)

  -- LayerNorm's twins of RMSNorm's packs a thread, each read on one side of a row count only:
  -- for every op at t.min_m - 1 and t.min_m rows of t.N bf16 columns, the variant's packs with
  -- the twin at each of two values and RMSNorm's setting (in t.fixed, with what else pins the
  -- layout) at t.own, against ref; LayerNorm's launches on the twin's side (below t.min_m rows,
  -- or from there) follow the twin, every other launch keeps t.own.
  local function twin_packs(t)
    for _, o in ipairs({{}, {add = true}, {op = "layernorm", weight = "x", bias = "x"}}) do
      for _, M in ipairs({t.min_m - 1, t.min_m}) do
        local p = problem(M, t.N, "bf16", o)
        reference(p)
        local items = {}
        for i, v in ipairs(t.values) do
          local settings = util.copy(t.fixed)
          settings[t.twin] = v
          items[i] = checked_fwd_items(p, t.variant, settings)
        end
        local what = label(p, t.variant, "fwd") .. ": " .. items[1] .. ", " .. items[2] .. " packs"
        local follows = p.op == "layernorm" and (M < t.min_m) == t.below
        for i, v in ipairs(t.values) do
          assert(items[i] == (follows and v or t.own), what)
        end
        release(p)
      end
    end
  end

  -- blockrow's (layernorm.fwd.blockrow_items) below rmsnorm.fwd.blockrow_group_min_m rows: from
  -- there LayerNorm follows RMSNorm's rule.
  it_cuda("LayerNorm's blockrow packs (layernorm.fwd.blockrow_items) below blockrow_group_min_m only", function()
    twin_packs({variant = "blockrow", twin = "layernorm.fwd.blockrow_items", values = {1, 2}, own = 4,
      N = 128, min_m = nl.get("rmsnorm.fwd.blockrow_group_min_m"), below = true,
      fixed = {["rmsnorm.fwd.blockrow_items"] = 4, ["rmsnorm.fwd.blockrow_group"] = 0,
        ["rmsnorm.fwd.blockrow_wave_doublings"] = 0}})
  end)

  -- row's (layernorm.fwd.items) from rmsnorm.fwd.blockrow_min_m rows (no doublings, no second
  -- read of x, so the packs are the settings').
  it_cuda("LayerNorm's row packs (layernorm.fwd.items) from blockrow_min_m rows only", function()
    twin_packs({variant = "row", twin = "layernorm.fwd.items", values = {2, 4}, own = 1, N = 4096,
      min_m = nl.get("rmsnorm.fwd.blockrow_min_m"), below = false,
      fixed = {["rmsnorm.fwd.items"] = 1, ["rmsnorm.fwd.one_wave_doublings"] = 0,
        ["rmsnorm.fwd.reload_min_n"] = 0}})
  end)

  -- The one-row forward kernels with the row's threads compiled in (rmsnorm.fwd.fixed_lanes_max,
  -- 4 to 32 lanes, up to 4 16-byte packs a thread, y in x's dtype, the weight read after the
  -- reduction): run info names the instance (its last template argument, 0 for the general
  -- kernel), and y, rstd, the mean and residual_out are the general kernel's bits (LayerNorm's
  -- instances at up to 2 packs hold the row as fp32: process_ln_held). The grid above runs
  -- them against the reference.
  it_cuda("lanes compiled in: the general kernel's bits, the instance named in run info", function()
    local function lanes_of(info)
      return tonumber(info.kernel:match("^fwd_one<.*, (%d+)>$"))
    end
    local seen = {}
    for _, o in ipairs({{}, {add = true}, {op = "layernorm", weight = "x", bias = "fp32", offset = LN_OFFSET},
      {op = "layernorm", weight = "x", bias = "x"}}) do
      for _, dtype in ipairs({"bf16", "fp16", "fp32"}) do
        for _, s in ipairs({{1, 64}, {7, 256}, {4099, 32}, {4099, 128}, {199, 512}, {37, 1024}, {33, 96}}) do
          local p = problem(s[1], s[2], dtype, o)
          for _, v in ipairs({"row", "blockrow", "persistent"}) do
            for _, early in ipairs({0, 2 ^ 24}) do
              local outs = {}
              for _, max in ipairs({32, 0}) do
                local a = poisoned_fwd_args(p)
                local info
                with_settings({["rmsnorm.fwd.fixed_lanes_max"] = max, ["rmsnorm.fwd.early_weight_max_n"] = early,
                  ["rmsnorm.fwd.blockrow_group_min_m"] = 4096, ["rmsnorm.fwd.blockrow_group"] = 4,
                  ["rmsnorm.fwd.ctas_per_sm"] = 1, ["rmsnorm.fwd.stages"] = 4}, function()
                  info = nl.run(p.op .. ".fwd." .. v, a)
                end)
                local lanes = lanes_of(info)
                local items = tonumber(info.kernel:match("^fwd_one<[^,]+, %d+, (%d+),"))
                -- the early weight and 8 packs a thread keep the general kernel
                if max == 0 or (early > 0 and p.op == "rmsnorm") or items == 8 then
                  assert(lanes == nil or lanes == 0, info.kernel)
                elseif lanes and lanes > 0 then
                  seen[lanes] = true
                end
                outs[#outs + 1] = a
              end
              for _, name in ipairs({"y", "rstd", "mean", "residual_out"}) do
                local a, b = outs[1][name], outs[2][name]
                if a then
                  assert_same_bits(a, b, string.format("%s early=%d: %s differs with lanes compiled in",
                    label(p, v, "fwd"), early, name))
                end
                free(a, b)
              end
            end
          end
          release(p)
        end
      end
    end
    -- blockrow at 32 / 64 / 128 / 256 bf16 columns (4 to 32 lanes), row's single warp
    assert.are.same({[4] = true, [8] = true, [16] = true, [32] = true}, seen)
  end)

  -- Rows of single 16-bit elements (N, a stride or a pointer off 16 bytes): row's forward cuts
  -- each at x's 16-byte boundaries into a head, 16-byte packs and a tail (fwd_skew) wherever y's
  -- rows (and add_rmsnorm's residual and residual_out rows) sit at x's offsets; a y at other
  -- offsets takes the one-element kernel. Shapes from a head alone (N = 1, 7) to the widest the
  -- packs hold in registers (16391: 2048 whole packs), and past it (the looping kernel), with
  -- contiguous rows and with rows padded by 3 elements.
  it_cuda("rows of single 16-bit elements: row's forward in a head, 16-byte packs and a tail", function()
    -- y (and add_rmsnorm's residual_out) with rows of y_stride elements, the residual with x's
    local function run_row(p, x_stride, y_stride)
      local shape = {p.M, p.N}
      local y = poisoned(shape, p.dtype, y_stride)
      local h = p.add and poisoned(shape, p.dtype, y_stride) or nil
      local res = p.add and poisoned(shape, p.dtype, x_stride) or nil
      if res then
        res:copy_(p.res)
      end
      local rstd = poisoned({p.M}, "fp32")
      local mean = p.op == "layernorm" and poisoned({p.M}, "fp32") or nil
      local a = fwd_args(p)
      a.y, a.rstd, a.mean, a.residual, a.residual_out = y, rstd, mean, res, h
      local info = nl.run(p.op .. ".fwd.row", a)
      local what = label(p, "row", "fwd") .. " " .. info.kernel
      assert.allclose(y, p.ry, {output = "y", seed = what})
      assert.allclose(rstd, p.rr, {output = "rstd", dtype = p.dtype, seed = what})
      if mean then
        assert.allclose(mean, p.rmean, {output = "mean", dtype = p.dtype, seed = what})
      end
      if h then
        assert.allclose(h, p.rh, {output = "residual_out", seed = what})
      end
      free(y, h, res, rstd, mean)
      return info.kernel
    end
    local skewed = 0
    for _, s in ipairs({{37, 1023}, {199, 4095}, {7, 1}, {5, 7}, {3, 9}, {4099, 100}, {33, 8191},
      {3, 16383}, {2, 16391}, {2, 16393}, {37, 1024, 3}}) do
      for _, o in ipairs(and_ln({{weight = "x"}, {weight = "fp32", cast = "gemma", offset = 1},
        {weight = "none", cast = "none"}, {add = true, weight = "x"}, {add = true, weight = "fp32",
        cast = "gemma", offset = 1}}, {op = "layernorm", weight = "x", bias = "x", offset = LN_OFFSET},
        {op = "layernorm", weight = "fp32", bias = "none"})) do
        for _, dtype in ipairs({"bf16", "fp16"}) do
          o.stride = s[3]
          local p = problem(s[1], s[2], dtype, o)
          reference(p)
          local stride = s[3] and s[2] + s[3] or nil
          local k = run_row(p, stride, stride)
          if s[2] <= 16391 then -- 2048 packs: 8 a thread at 256 threads
            assert(k:match("^fwd_skew<"), label(p, "row", "fwd") .. ": " .. k)
            skewed = skewed + 1
          else
            assert(k:match("^fwd_loop<"), label(p, "row", "fwd") .. ": " .. k)
          end
          -- y at other offsets than x (one more element a row): a one-element kernel (the
          -- reloading one from rmsnorm.fwd.reload_min_n columns and reload_min_m rows on the H200)
          if s[2] > 1 and s[2] <= 8191 then
            k = run_row(p, stride, s[2] + (s[3] or 0) + 1)
            assert(k:match("^fwd_one<[^,]+, 1,") or k:match("^fwd_reload<[^,]+, 1,"),
              label(p, "row", "fwd") .. " other y offsets: " .. k)
          end
          release(p)
        end
      end
    end
    assert.is_true(skewed > 0)
  end)

  it_cuda("add_rmsnorm forward and backward, with the residual gradient", function()
    check_weight_grid({"bf16", "fp32"}, {{1, 7}, {37, 1023}, {199, 4096}, {7, 65536}, {4099, 512}},
      {"x", "none"}, {"llama"}, function() return true end)
  end)

  it_cuda("add_rmsnorm in place: residual_out over residual", function()
    local p = problem(199, 4096, "bf16", {add = true})
    reference(p)
    for _, v in ipairs(variants("add_rmsnorm", "fwd")) do
      local res, y = p.gres:to(cuda), poisoned({p.M, p.N}, p.dtype)
      if nl.supports("add_rmsnorm.fwd." .. v, {x = p.gx, residual = res, w = p.gw, y = y,
        residual_out = res, eps = 1e-6}) then
        local y2, h, rstd = nl.add_rmsnorm(p.gx, res, p.gw, {variant = v, inplace = true, out = y})
        assert.are.equal(res, h)
        assert.allclose(h, p.rh, {output = "residual_out", seed = v})
        assert.allclose(y2, p.ry, {output = "y", seed = v})
        free(rstd)
      end
      free(res, y)
    end
    release(p)
  end)

  it_cuda("in-place backward, fp32-atomic reductions, the fused in-kernel reduction, clusters, "
    .. "the reduce kernel launched without programmatic dependent launch", function()
      for _, s in ipairs({{199, 1024}, {4099, 4096}, {37, 65536}}) do
        for _, o in ipairs(and_ln({{}}, {op = "layernorm", bias = "x"})) do
          local p = problem(s[1], s[2], "bf16", o)
          reference(p)
          for _, v in ipairs(variants(p.op, "bwd")) do
            check_bwd(p, v, {inplace = true})
            check_bwd(p, v, {reduce = "atomic"})
          end
          with_settings({["rmsnorm.bwd.fused_reduce"] = 1}, function()
            check_bwd(p, "persistent")
          end)
          -- the reduce kernel as an ordinary launch (by default it is queued behind the main
          -- one under programmatic dependent launch), every variant that reduces partials
          with_settings({["rmsnorm.bwd.reduce_pdl"] = 0}, function()
            for _, v in ipairs(variants(p.op, "bwd")) do
              check_bwd(p, v)
            end
          end)
          -- clusters summing dW (and dB) through distributed shared memory (sm_90; elsewhere
          -- the plan falls back to a partial row per CTA), CTAs past the last row included
          for _, c in ipairs({2, 4, 8}) do
            with_settings({["rmsnorm.bwd.cluster"] = c}, function()
              check_bwd(p, "persistent")
              check_bwd(p, "partials")
              check_bwd(p, "persistent", {inplace = true})
            end)
          end
          release(p)
        end
      end
    end)

  it_cuda("rows shared by a thread-block cluster (rmsnorm.bwd.share_n, share_max)", function()
    -- share_n = 512 (clusters of up to 8) shares rows of 1024 among 2 CTAs and wider ones
    -- among 8; 2048 (at most 2) shares 4096 and 16384 among 2, and 65536 among 4 or 8, as 2
    -- CTAs' registers do not hold the slice; 8192 (at most 4: an H100's defaults) shares
    -- 16384 among 2 and 65536 among 4 (fp32: 8). 1025 columns do not divide, so the plan falls
    -- back to unshared rows; M = 1 and 7 leave clusters without rows; 128-thread CTAs hold
    -- several rows each. Before sm_90 every plan falls back. Layernorm (where registered)
    -- takes the odd shapes too, with the weight kind of the next shape as its bias. The three
    -- settings take rmsnorm.bwd.scalar_lead 0, 1 and 2 (every lane, one lane a warp, one lane
    -- in shared rows staging rstd and mean).
    local sm90 = cuda.info.cc_major >= 9
    local shapes = {{1, 1024}, {7, 65536}, {37, 1025}, {199, 4096}, {4099, 1024}, {37, 16384}}
    local weights = {"fp32", "x", "none"}
    local settings = {{512, 8}, {2048, 2}, {8192, 4}}
    local shared = 0
    for _, dtype in ipairs({"bf16", "fp16", "fp32"}) do
      for i, s in ipairs(shapes) do
        local weight, cast = weights[i % 3 + 1], i % 2 == 0 and "gemma" or "llama"
        local options = {{weight = weight, cast = cast,
          offset = cast == "gemma" and weight ~= "none" and 1 or 0, add = i == 4}}
        if i % 2 == 1 then
          and_ln(options, {op = "layernorm", weight = weight, bias = weights[(i + 1) % 3 + 1],
            offset = weight ~= "none" and LN_OFFSET or 0})
        end
        for _, o in ipairs(options) do
          local p = problem(s[1], s[2], dtype, o)
          reference(p)
          for j, set in ipairs(settings) do
            local share_n, share_max = set[1], set[2]
            with_settings({["rmsnorm.bwd.share_n"] = share_n, ["layernorm.bwd.share_n"] = share_n,
              ["layernorm.bwd.w32_share_n"] = share_n, ["rmsnorm.bwd.fp32_share_n"] = share_n,
              ["rmsnorm.bwd.share_max"] = share_max,
              ["rmsnorm.bwd.stages"] = j + 1, ["rmsnorm.bwd.block"] = j == 1 and 128 or 512,
              ["rmsnorm.bwd.scalar_lead"] = j - 1},
              function()
                for _, v in ipairs({"partials", "persistent"}) do
                  local info = checked_bwd_info(p, v)
                  local c = info.cluster
                  assert.is_true(c == 1 or sm90 and (c == 2 or c == 4 or c == 8) and p.N % c == 0
                    and info.grid % c == 0 and (p.N / c <= share_n or c >= share_max))
                  shared = shared + (c > 1 and 1 or 0)
                end
                check_bwd(p, "persistent", {reduce = "atomic"})
                check_bwd(p, "persistent", {inplace = true})
              end)
          end
          release(p)
        end
      end
    end
    if sm90 then
      assert.is_true(shared > 0)
    end
  end)

  -- rmsnorm.bwd.float_weights: the pipelined kernel's 16-bit rows at 1 or 2 packs a thread hold
  -- their weights as fp32 (1; 2: fp32 weights only) or as packs of x's dtype (0), for every
  -- weight kind, offset and op, alone, with clusters summing dW and with rows shared by a
  -- cluster (4099 x 4096: 2 packs; 7 x 16384, shared by 2 from 8192 columns: 2 packs a CTA's
  -- half).
  it_cuda("weights held as fp32 or as packs (rmsnorm.bwd.float_weights)", function()
    local shapes = {{37, 1024}, {199, 2048}, {4099, 4096}, {7, 16384}}
    local weights = {"x", "fp32", "none"}
    local cases = {{}, {["rmsnorm.bwd.cluster"] = 2},
      {["rmsnorm.bwd.share_n"] = 8192, ["layernorm.bwd.share_n"] = 8192,
        ["layernorm.bwd.w32_share_n"] = 8192}}
    -- the pipelined kernels checked at each value, and those holding fp32 weights at 2
    local seen, fp32_at_2 = {[0] = 0, 0, 0}, 0
    for _, dtype in ipairs({"bf16", "fp16"}) do
      for i, s in ipairs(shapes) do
        local weight, cast = weights[i % 3 + 1], i % 2 == 0 and "gemma" or "llama"
        local options = and_ln({{weight = weight, cast = cast,
          offset = cast == "gemma" and weight ~= "none" and 1 or 0, add = i == 3}},
          {op = "layernorm", weight = weight, bias = weights[(i + 1) % 3 + 1],
            offset = weight ~= "none" and LN_OFFSET or 0})
        for _, o in ipairs(options) do
          local p = problem(s[1], s[2], dtype, o)
          reference(p)
          for fw = 0, 2 do
            for _, case in ipairs(cases) do
              local set = {["rmsnorm.bwd.float_weights"] = fw, ["rmsnorm.bwd.items"] = 2,
                ["layernorm.bwd.items"] = 2}
              for k, v in pairs(case) do
                set[k] = v
              end
              with_settings(set, function()
                for _, v in ipairs({"partials", "persistent"}) do
                  local info = checked_bwd_info(p, v)
                  local items = stride_items(info)
                  if items and items <= 2 then
                    local fp32 = fw == 1 or (fw == 2 and weight == "fp32")
                    assert.are.equal(fp32, info.kernel:match(", true>$") ~= nil,
                      label(p, v, "bwd") .. " at " .. fw .. ": " .. info.kernel)
                    seen[fw] = seen[fw] + 1
                    if fw == 2 and fp32 then
                      fp32_at_2 = fp32_at_2 + 1
                    end
                  end
                end
                check_bwd(p, "persistent", {inplace = true})
              end)
            end
          end
          release(p)
        end
      end
    end
    assert.is_true(seen[0] > 0 and seen[1] > 0 and seen[2] > fp32_at_2 and fp32_at_2 > 0)
  end)

  -- LayerNorm's rows are shared from layernorm.bwd.share_n columns, RMSNorm's from
  -- rmsnorm.bwd.share_n: 12288 bf16 columns fit one CTA (384 threads at 4 packs) for both ops,
  -- LayerNorm's dB summed in shared memory there, and are shared by 2 below 12288.
  it_cuda("LayerNorm's rows shared from its own share_n (layernorm.bwd.share_n)", function()
    if not has_ln or cuda.info.cc_major < 9 then
      return
    end
    for _, o in ipairs({{}, {op = "layernorm", weight = "x", bias = "fp32"}}) do
      local p = problem(37, 12288, "bf16", o)
      reference(p)
      local ln = o.op == "layernorm"
      for _, set in ipairs({{16384, 8192}, {8192, 16384}}) do
        with_settings({["rmsnorm.bwd.share_n"] = set[1], ["layernorm.bwd.share_n"] = set[2],
          ["rmsnorm.bwd.items"] = 4, ["layernorm.bwd.items"] = 2, ["rmsnorm.bwd.share_max"] = 4}, function()
            for _, v in ipairs({"partials", "persistent"}) do
              local info = checked_bwd_info(p, v)
              local share_n = ln and set[2] or set[1]
              assert.are.equal(share_n < 12288 and 2 or 1, info.cluster,
                label(p, v, "bwd") .. " at share_n " .. share_n .. ": " .. info.kernel)
              local items = stride_items(info)
              -- LayerNorm asks for 2 packs: the unshared row needs 4 to fit 512 threads
              assert.are.equal(ln and share_n < 12288 and 2 or 4, items, info.kernel)
            end
          end)
      end
      release(p)
    end
  end)

  -- LayerNorm's rows with fp32 weights are shared from layernorm.bwd.w32_share_n columns (at 2
  -- packs they hold the weights as fp32), with 16-bit weights from layernorm.bwd.share_n.
  it_cuda("LayerNorm with fp32 weights shares its rows from its own threshold (layernorm.bwd.w32_share_n)", function()
    if not has_ln or cuda.info.cc_major < 9 then
      return
    end
    for _, weight in ipairs({"x", "fp32"}) do
      local p = problem(37, 12288, "bf16", {op = "layernorm", weight = weight, bias = "x"})
      reference(p)
      with_settings({["layernorm.bwd.share_n"] = 16384, ["layernorm.bwd.w32_share_n"] = 8192,
        ["layernorm.bwd.items"] = 2, ["rmsnorm.bwd.share_max"] = 4}, function()
          for _, v in ipairs({"partials", "persistent"}) do
            local info = checked_bwd_info(p, v)
            assert.are.equal(weight == "fp32" and 2 or 1, info.cluster,
              label(p, v, "bwd") .. ": " .. info.kernel)
          end
        end)
      release(p)
    end
  end)

  -- LayerNorm's 4-pack rows keep dB in shared memory: the plan counts it wherever it takes 4
  -- packs, also for a row that 2 do not fit. An unshared 16384-column bf16 row at 3 stages (274
  -- KB with dB) must fall back to 2 stages (200 KB), not to the looping kernel.
  it_cuda("LayerNorm's dB slots counted where 4 packs replace the 2 asked (rmsnorm.bwd.stages 3)", function()
    if not has_ln or cuda.info.cc_major < 9 then
      return
    end
    local p = problem(37, 16384, "bf16", {op = "layernorm", weight = "x", bias = "x"})
    reference(p)
    with_settings({["layernorm.bwd.share_n"] = 16384, ["layernorm.bwd.items"] = 2, ["rmsnorm.bwd.stages"] = 3},
      function()
        for _, v in ipairs({"partials", "persistent"}) do
          local info = checked_bwd_info(p, v)
          local items = stride_items(info)
          assert.are.equal(4, items, label(p, v, "bwd") .. ": " .. info.kernel)
          assert.are.equal(1, info.cluster, info.kernel)
        end
      end)
    release(p)
  end)

  -- fp32 LayerNorm rows of 4097 to 8192 columns (up to rmsnorm.bwd.fp32_share_n, unshared):
  -- 2 packs of 4 floats would need more than 512 threads, so the plan takes 4 packs (dB's sums
  -- in shared memory) in one CTA of whole warps rather than the looping kernel.
  it_cuda("fp32 LayerNorm rows of 4097 to 8192 columns in one 4-pack CTA", function()
    if not has_ln then
      return
    end
    for _, s in ipairs({{37, 4100}, {5, 6144}, {37, 8192}}) do
      local p = problem(s[1], s[2], "fp32", {op = "layernorm", weight = "fp32", bias = "x"})
      reference(p)
      with_settings({["layernorm.bwd.items"] = 2, ["rmsnorm.bwd.fp32_share_n"] = 8192}, function()
        for _, v in ipairs({"partials", "persistent"}) do
          local info = checked_bwd_info(p, v)
          local items = stride_items(info)
          assert.are.equal(4, items, label(p, v, "bwd") .. ": " .. info.kernel)
        end
        check_bwd(p, "persistent", {reduce = "atomic"})
        check_bwd(p, "persistent", {inplace = true})
      end)
      release(p)
    end
  end)

  it_cuda("a row's CTA of whole warps (rmsnorm.bwd.whole_warps, add_rmsnorm's twin)", function()
    -- rows whose packs need a thread count that is not a power of two: 5120 bf16 columns at 2
    -- / 4 packs a thread are 320 / 160 threads, LayerNorm's 12288 shared by 2 are 192 at 4,
    -- 1280 at 2 are 96 (3 warps); fp32's 5120 are 320 at 4; the sum over the CTA's warps then
    -- reads zeroed slots past its last warp. Off, the same rows take a power of two.
    local function pow2(v) -- (no bitwise operators: the specs also run under LuaJIT)
      while v > 1 and v % 2 == 0 do
        v = v / 2
      end
      return v == 1
    end
    local cases = {{37, 5120, "bf16", {}}, {4099, 1280, "bf16", {}}, {37, 5120, "fp32", {}},
      {199, 12288, "bf16", {}}, {37, 5120, "bf16", {add = true, weight = "fp32"}}}
    and_ln(cases, {199, 12288, "bf16", {op = "layernorm", weight = "x", bias = "fp32", offset = LN_OFFSET}})
    and_ln(cases, {7, 5120, "fp16", {op = "layernorm", weight = "fp32", bias = "none"}})
    for _, c in ipairs(cases) do
      local p = problem(c[1], c[2], c[3], c[4])
      reference(p)
      for _, items in ipairs({2, 4}) do
        for whole = 0, 1 do
          with_settings({["rmsnorm.bwd.whole_warps"] = whole, ["add_rmsnorm.bwd.whole_warps"] = whole,
            ["rmsnorm.bwd.items"] = items, ["layernorm.bwd.items"] = items,
            ["rmsnorm.bwd.stages"] = items == 2 and 2 or 3, ["layernorm.bwd.share_n"] = 8192,
            ["rmsnorm.bwd.share_n"] = 16384, ["rmsnorm.bwd.fused_reduce"] = items == 4 and 1 or 0},
            function()
              for _, v in ipairs({"partials", "persistent"}) do
                local info = checked_bwd_info(p, v)
                local what = label(p, v, "bwd") .. " items " .. items .. " whole_warps " .. whole
                if info.block ~= 512 then -- not the looping kernel
                  -- partials keeps its one CTA per SM a power of two
                  assert.are.equal(whole == 0 or v == "partials", pow2(info.block),
                    what .. ": block " .. info.block)
                end
              end
              check_bwd(p, "persistent", {reduce = "atomic"})
              check_bwd(p, "persistent", {inplace = true})
              with_settings({["rmsnorm.bwd.cluster"] = 2, ["rmsnorm.bwd.fused_reduce"] = 0}, function()
                check_bwd(p, "partials")
              end)
            end)
        end
      end
      release(p)
    end
  end)

  it_cuda("every register layout and CTA size the settings can ask for", function()
    -- 1023 columns: single elements, held in registers by the pipelined backward
    for _, s in ipairs({{199, 1024}, {37, 4096}, {7, 16384}, {199, 1023}}) do
      for _, o in ipairs(and_ln({{}}, {op = "layernorm", weight = "x", bias = "fp32",
        offset = LN_OFFSET})) do
        local p = problem(s[1], s[2], "bf16", o)
        reference(p)
        for _, items in ipairs({1, 2, 4, 8}) do
          for _, block in ipairs({32, 128, 1024}) do
            with_settings({["rmsnorm.fwd.items"] = items, ["rmsnorm.bwd.items"] = items,
              ["layernorm.bwd.items"] = items,
              ["rmsnorm.bwd.held_items"] = items,
              ["rmsnorm.fwd.block"] = block, ["rmsnorm.bwd.block"] = block,
              ["rmsnorm.fwd.stages"] = 2 + (items + block) % 3,
              ["rmsnorm.bwd.stages"] = 2 + (items + block + 1) % 3,
              ["rmsnorm.bwd.fused_reduce"] = (items + block) % 2,
              ["rmsnorm.bwd.cluster"] = 2 ^ ((items + block / 32) % 4),
              ["rmsnorm.bwd.grid_sms"] = (items + block) % 3 * 7,
              ["rmsnorm.fwd.early_weight_max_n"] = (items + block + 1) % 2 * 2 ^ 24,
              ["rmsnorm.fwd.staged_items"] = block == 1024 and 64 or items,
              ["rmsnorm.fwd.reload_min_n"] = (items + block / 32) % 2, ["rmsnorm.fwd.reload_min_m"] = 1,
              ["rmsnorm.fwd.ctas_per_sm"] = 1, ["rmsnorm.bwd.ctas_per_sm"] = 2,
              ["rmsnorm.fwd.blockrow_block"] = block,
              ["rmsnorm.fwd.blockrow_items"] = items,
              ["rmsnorm.fwd.blockrow_group"] = (items * block) % 3 == 0 and 0 or 2 ^ ((items + block / 32) % 6),
              ["rmsnorm.fwd.blockrow_group_min_m"] = 1,
              ["rmsnorm.bwd.blockrow_block"] = 1024 / block * 32,
              ["cuda.pdl"] = (items + block / 32) % 2}, function()
              check_all(p)
            end)
          end
        end
        release(p)
      end
    end
  end)

  it_cuda("rows of single 16-bit elements: the pipelined backward holds them, wider ones shared by a cluster", function()
    -- up to 4096 columns in one CTA (8 elements a thread at 4095); wider rows (sm_90) in
    -- uneven slices of a cluster of 2 (8191) or 4 (12289: share_max 4); M = 5 leaves clusters
    -- without rows
    local sm90 = cuda.info.cc_major >= 9
    for _, s in ipairs({{37, 4095}, {199, 1023}, {7, 1}, {37, 8191}, {5, 12289}}) do
      for _, o in ipairs(and_ln({{weight = "x"}, {add = true, cast = "gemma", weight = "fp32", offset = 1}},
        {op = "layernorm", weight = "x", bias = "none", offset = LN_OFFSET})) do
        local p = problem(s[1], s[2], "fp16", o)
        reference(p)
        for _, held in ipairs({1, 4, 8}) do
          with_settings({["rmsnorm.bwd.held_items"] = held, ["rmsnorm.bwd.share_max"] = 4}, function()
            for _, v in ipairs({"partials", "persistent"}) do
              local info = checked_bwd_info(p, v)
              if s[2] <= 4096 or sm90 then
                local items = tonumber(info.kernel:match("^bwd_stride<[^,]+, 1, (%d+),"))
                assert(items and items >= held and (s[2] ~= 4095 or items == 8), info.kernel)
                local want = s[2] <= 4096 and 1 or s[2] <= 8192 and 2 or 4
                assert.are.equal(want, info.cluster, info.kernel)
              end
            end
            check_bwd(p, "persistent", {inplace = true})
          end)
        end
        release(p)
      end
    end
  end)

  it_cuda("the looping kernels at every CTA count per SM the settings can ask for", function()
    for _, s in ipairs({{37, 4096}, {7, 65536}}) do
      for _, o in ipairs(and_ln({{}}, {op = "layernorm", weight = "fp32", bias = "x"})) do
        local p = problem(s[1], s[2], "bf16", o)
        reference(p)
        for _, n in ipairs({0, 1, 3}) do
          -- 32-thread backward CTAs send 4096 columns to the looping kernel too
          with_settings({["rmsnorm.fwd.items"] = 0, ["rmsnorm.fwd.loop_ctas_per_sm"] = n,
            ["rmsnorm.bwd.loop_ctas_per_sm"] = n, ["rmsnorm.bwd.split_min_n"] = 0,
            ["rmsnorm.bwd.block"] = 32}, function()
            check_all(p)
          end)
        end
        release(p)
      end
    end
  end)

  it_cuda("the split backward (row kernel, then column kernel) where the looping one would run",
    function()
      -- 32-thread CTAs leave 4096 columns too wide for registers (row chunks of 21 rows);
      -- fp32 rows split where their dW row outgrows shared memory (N = 65536)
      local cases = and_ln({{4099, 4096, "bf16"}, {37, 65536, "bf16"},
        {7, 65536, "fp32", {add = true, cast = "gemma", offset = 1}}},
        {4099, 4096, "bf16", {op = "layernorm", weight = "x", bias = "fp32"}},
        {7, 65536, "fp32", {op = "layernorm", bias = "x", offset = LN_OFFSET}})
      for _, s in ipairs(cases) do
        local p = problem(s[1], s[2], s[3], s[4])
        reference(p)
        with_settings({["rmsnorm.bwd.block"] = 32, ["rmsnorm.bwd.split_min_n"] = 1}, function()
          for _, v in ipairs({"partials", "persistent"}) do
            assert.is_true(check_bwd(p, v))
            check_bwd(p, v, {inplace = true})
            assert.is_true(check_bwd(p, v, {reduce = "atomic"}) or v == "partials")
          end
        end)
        release(p)
      end
    end)

  it_cuda("auto takes the defaults of the GPU it runs on, whichever the default device", function()
    local core = require("normlab.binding")
    local x, y = cuda:randn({2048, 2048}, "bf16", {seed = 3}), cuda:empty({2048, 2048}, "bf16")
    local args = {x = x, y = y, eps = 1e-6}
    local max_n
    for _, s in ipairs(nl.settings(cuda)) do
      if s.key == "rmsnorm.fwd.blockrow_max_n" then
        max_n = s.value
      end
    end
    local want = max_n >= 2048 and "rmsnorm.fwd.blockrow" or "rmsnorm.fwd.row"
    assert.are.equal(want, nl.resolve("rmsnorm.fwd.auto", args))
    core.set_device(cpu.backend, cpu.index)
    local ok, got = pcall(nl.resolve, "rmsnorm.fwd.auto", args)
    core.set_device(cuda.backend, cuda.index)
    assert.is_true(ok, got)
    assert.are.equal(want, got)
    free(x, y)
  end)

  it_cuda("auto forward follows staged_min_n, blockrow_*, row_min_n, narrow_min_m and persistent_*", function()
    local x, y = cuda:randn({64, 1024}, "bf16", {seed = 3}), cuda:empty({64, 1024}, "bf16")
    local args = {x = x, y = y, eps = 1e-6}
    -- narrower than row_min_n: blockrow whatever M from narrow_min_m
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 63,
      ["rmsnorm.fwd.row_min_n"] = 1025, ["rmsnorm.fwd.narrow_min_m"] = 64}, function()
        assert.are.equal("rmsnorm.fwd.blockrow", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 63,
      ["rmsnorm.fwd.row_min_n"] = 1025, ["rmsnorm.fwd.narrow_min_m"] = 65}, function()
        assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_min_m"] = 65},
      function()
        assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
        -- a few narrow rows keep a CTA each, from narrow_min_m they share warps
        local xs, ys = cuda:randn({8, 128}, "bf16", {seed = 3}), cuda:empty({8, 128}, "bf16")
        local few = {x = xs, y = ys, eps = 1e-6}
        with_settings({["rmsnorm.fwd.narrow_min_m"] = 9}, function()
          assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", few))
        end)
        with_settings({["rmsnorm.fwd.narrow_min_m"] = 8}, function()
          assert.are.equal("rmsnorm.fwd.blockrow", nl.resolve("rmsnorm.fwd.auto", few))
        end)
        free(xs, ys)
      end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 64,
      ["rmsnorm.fwd.blockrow_min_m"] = 1}, function()
        assert.are.equal("rmsnorm.fwd.blockrow", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 63,
      ["rmsnorm.fwd.row_min_n"] = 1024}, function()
        assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    -- a few wide rows: persistent up to persistent_max_m rows from persistent_min_n columns
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 512, ["rmsnorm.fwd.persistent_max_m"] = 64,
      ["rmsnorm.fwd.persistent_min_n"] = 1024}, function()
      assert.are.equal("rmsnorm.fwd.persistent", nl.resolve("rmsnorm.fwd.auto", args))
    end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 512, ["rmsnorm.fwd.persistent_max_m"] = 63,
      ["rmsnorm.fwd.persistent_min_n"] = 1024}, function()
      assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
    end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 512, ["rmsnorm.fwd.persistent_max_m"] = 64,
      ["rmsnorm.fwd.persistent_min_n"] = 1025}, function()
      assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
    end)
    -- staged from staged_min_n columns where the row fits shared memory, before blockrow
    with_settings({["rmsnorm.fwd.staged_min_n"] = 1024}, function()
      assert.are.equal("rmsnorm.fwd.staged", nl.resolve("rmsnorm.fwd.auto", args))
    end)
    with_settings({["rmsnorm.fwd.staged_min_n"] = 1025}, function()
      assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
    end)
    -- LayerNorm takes RMSNorm's staged_min_n, and staged from layernorm.fwd.staged_min_waves
    -- of row's waves (any waves > 0 with a tiny setting), RMSNorm never
    local m, r = cuda:empty({64}, "fp32"), cuda:empty({64}, "fp32")
    local ln = {x = x, y = y, mean = m, rstd = r, eps = 1e-5}
    with_settings({["rmsnorm.fwd.staged_min_n"] = 1024, ["layernorm.fwd.staged_min_waves"] = 0}, function()
      assert.are.equal("layernorm.fwd.staged", nl.resolve("layernorm.fwd.auto", ln))
    end)
    with_settings({["rmsnorm.fwd.staged_min_n"] = 1025, ["layernorm.fwd.staged_min_waves"] = 0}, function()
      assert.are.equal("layernorm.fwd.row", nl.resolve("layernorm.fwd.auto", ln))
    end)
    with_settings({["rmsnorm.fwd.staged_min_n"] = 1025, ["layernorm.fwd.staged_min_waves"] = 1e-6}, function()
      assert.are.equal("layernorm.fwd.staged", nl.resolve("layernorm.fwd.auto", ln))
      assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
    end)
    -- and its twin of persistent_max_m
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 512, ["rmsnorm.fwd.persistent_min_n"] = 1024,
      ["rmsnorm.fwd.persistent_max_m"] = 64, ["layernorm.fwd.persistent_max_m"] = 0,
      ["rmsnorm.fwd.staged_min_n"] = 2 ^ 24, ["layernorm.fwd.staged_min_waves"] = 0}, function()
        assert.are.equal("layernorm.fwd.row", nl.resolve("layernorm.fwd.auto", ln))
        assert.are.equal("rmsnorm.fwd.persistent", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 512, ["rmsnorm.fwd.persistent_min_n"] = 1024,
      ["rmsnorm.fwd.persistent_max_m"] = 0, ["layernorm.fwd.persistent_max_m"] = 64,
      ["rmsnorm.fwd.staged_min_n"] = 2 ^ 24}, function()
        assert.are.equal("layernorm.fwd.persistent", nl.resolve("layernorm.fwd.auto", ln))
      end)
    -- and its twins of narrow_min_m and, from blockrow_min_m rows, row_min_n
    local narrow = {["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 63,
      ["rmsnorm.fwd.blockrow_min_m"] = 64, ["rmsnorm.fwd.narrow_min_m"] = 64,
      ["layernorm.fwd.narrow_min_m"] = 64, ["layernorm.fwd.staged_min_waves"] = 0,
      ["layernorm.fwd.row_min_n"] = 1025, ["rmsnorm.fwd.row_min_n"] = 1024,
      ["rmsnorm.fwd.many_row_min_n"] = 1024}
    with_settings(narrow, function()
      assert.are.equal("layernorm.fwd.blockrow", nl.resolve("layernorm.fwd.auto", ln))
      assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
      -- RMSNorm's own from blockrow_min_m rows, row_min_n below them
      with_settings({["rmsnorm.fwd.many_row_min_n"] = 1025}, function()
        assert.are.equal("rmsnorm.fwd.blockrow", nl.resolve("rmsnorm.fwd.auto", args))
        with_settings({["rmsnorm.fwd.blockrow_min_m"] = 65}, function()
          assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
        end)
      end)
      with_settings({["layernorm.fwd.narrow_min_m"] = 65}, function()
        assert.are.equal("layernorm.fwd.row", nl.resolve("layernorm.fwd.auto", ln))
      end)
      with_settings({["rmsnorm.fwd.blockrow_min_m"] = 65}, function()
        assert.are.equal("layernorm.fwd.row", nl.resolve("layernorm.fwd.auto", ln))
      end)
    end)
    free(m, r)
    -- add_rmsnorm follows its twins of blockrow_max_n and narrow_min_m
    local res, ro = cuda:randn({64, 1024}, "bf16", {seed = 4}), cuda:empty({64, 1024}, "bf16")
    local add = {x = x, y = y, residual = res, residual_out = ro, eps = 1e-6}
    local add_narrow = {["rmsnorm.fwd.blockrow_max_n"] = 1024, ["add_rmsnorm.fwd.blockrow_max_n"] = 1024,
      ["rmsnorm.fwd.blockrow_max_m"] = 63, ["rmsnorm.fwd.blockrow_min_m"] = 64,
      ["rmsnorm.fwd.row_min_n"] = 1025, ["rmsnorm.fwd.many_row_min_n"] = 1025,
      ["rmsnorm.fwd.narrow_min_m"] = 64, ["add_rmsnorm.fwd.narrow_min_m"] = 65}
    with_settings(add_narrow, function()
      assert.are.equal("add_rmsnorm.fwd.row", nl.resolve("add_rmsnorm.fwd.auto", add))
      assert.are.equal("rmsnorm.fwd.blockrow", nl.resolve("rmsnorm.fwd.auto", args))
      with_settings({["add_rmsnorm.fwd.narrow_min_m"] = 64}, function()
        assert.are.equal("add_rmsnorm.fwd.blockrow", nl.resolve("add_rmsnorm.fwd.auto", add))
        -- RMSNorm's twin of row_min_n is RMSNorm's alone
        with_settings({["rmsnorm.fwd.many_row_min_n"] = 1024}, function()
          assert.are.equal("add_rmsnorm.fwd.blockrow", nl.resolve("add_rmsnorm.fwd.auto", add))
          assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
        end)
      end)
    end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["add_rmsnorm.fwd.blockrow_max_n"] = 512,
      ["rmsnorm.fwd.blockrow_max_m"] = 64, ["rmsnorm.fwd.blockrow_min_m"] = 1}, function()
        assert.are.equal("add_rmsnorm.fwd.row", nl.resolve("add_rmsnorm.fwd.auto", add))
        assert.are.equal("rmsnorm.fwd.blockrow", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    with_settings({["add_rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 64,
      ["rmsnorm.fwd.blockrow_min_m"] = 1}, function()
        assert.are.equal("add_rmsnorm.fwd.blockrow", nl.resolve("add_rmsnorm.fwd.auto", add))
      end)
    free(res, ro)
    local xw, yw = cuda:empty({2, 1048576}, "fp32"), cuda:empty({2, 1048576}, "fp32")
    with_settings({["rmsnorm.fwd.staged_min_n"] = 1024}, function()
      -- 4 MiB rows do not fit: row's looping kernel
      assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", {x = xw, y = yw, eps = 1e-6}))
    end)
    free(x, y, xw, yw)
  end)

  -- add_rmsnorm's auto forward takes staged where row's CTAs need more than one wave and at
  -- most add_rmsnorm.fwd.staged_max_waves while staged's need one (the resolver counts them as
  -- the variants' run info does), row elsewhere, with the setting at 0 and for an fp8 y;
  -- RMSNorm's never does. On an H100 or H200 (132 SMs) the shapes below fall on both sides,
  -- fp32's 512 x 8192 for staged's shared memory (docs/kernels.md, "One wave of CTAs").
  it_cuda("auto add_rmsnorm forward: staged between one and staged_max_waves waves of row's CTAs", function()
    local max_waves = nl.get("add_rmsnorm.fwd.staged_max_waves")
    local picked = {}
    for _, s in ipairs({{64, 3072}, {1024, 3072}, {1536, 3072}, {2048, 3072}, {4096, 3072},
      {1024, 5120}, {768, 8192}, {2048, 8192}, {512, 12288}, {512, 8192, "fp32"}}) do
      local M, N, dtype = s[1], s[2], s[3] or "bf16"
      local x, res = cuda:randn({M, N}, dtype, {seed = 5}), cuda:randn({M, N}, dtype, {seed = 6})
      local w, y, ro = cuda:randn({N}, dtype, {seed = 7}), cuda:empty({M, N}, dtype), cuda:empty({M, N}, dtype)
      local rstd = cuda:empty({M}, "fp32")
      local args = {x = x, w = w, y = y, rstd = rstd, residual = res, residual_out = ro, eps = 1e-6}
      local plain = {x = x, w = w, y = y, rstd = rstd, eps = 1e-6}
      local what = M .. " x " .. N .. " " .. dtype
      local row, staged = nl.run("add_rmsnorm.fwd.row", args), nl.run("add_rmsnorm.fwd.staged", args)
      assert.are.equal(M, row.grid, what)
      assert(row.waves > 0 and row.waves <= M, what .. ": waves " .. row.waves)
      assert(staged.waves > 0 and staged.waves <= M, what .. ": staged's waves " .. staged.waves)
      local function want(max)
        return (row.waves > 1 and row.waves <= max and staged.waves <= 1) and "staged" or "row"
      end
      picked[want(max_waves)] = true
      assert.are.equal("add_rmsnorm.fwd." .. want(max_waves), nl.resolve("add_rmsnorm.fwd.auto", args),
        what .. ": row takes " .. row.waves .. " waves, staged " .. staged.waves)
      assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", plain), what)
      with_settings({["add_rmsnorm.fwd.staged_max_waves"] = 0}, function()
        assert.are.equal("add_rmsnorm.fwd.row", nl.resolve("add_rmsnorm.fwd.auto", args), what)
      end)
      with_settings({["add_rmsnorm.fwd.staged_max_waves"] = 64}, function()
        assert.are.equal("add_rmsnorm.fwd." .. want(64), nl.resolve("add_rmsnorm.fwd.auto", args), what)
      end)
      local y8, scale = cuda:empty({M, N}, "fp8e4m3"), cuda:full({1}, 1)
      local fp8 = {x = x, w = w, y = y8, scale = scale, residual = res, residual_out = ro, eps = 1e-6}
      assert.are.equal("add_rmsnorm.fwd.row", nl.resolve("add_rmsnorm.fwd.auto", fp8), what .. " fp8 y")
      free(x, res, w, y, ro, rstd, y8, scale)
    end
    if cuda.info.name:match("H[12]00") then
      assert(picked.row and picked.staged, "the shapes should fall on both sides of the rule")
    end
  end)

  -- LayerNorm's auto forward takes staged, below rmsnorm.fwd.staged_min_n columns and past
  -- blockrow's bands, where row's CTAs need at least layernorm.fwd.staged_min_waves waves (the
  -- resolver counts them as row's run info does), row below, with the setting at 0 and for an
  -- fp8 y; 3 waves falls between these shapes on a GPU of 132 SMs (docs/kernels.md,
  -- "LayerNorm's dispatch twins").
  it_cuda("auto layernorm forward: staged from staged_min_waves waves of row's CTAs", function()
    local picked = {}
    for _, s in ipairs({{128, 4096}, {1024, 3072}, {1024, 12288}, {1024, 16384}, {4096, 3072},
      {16384, 4096}, {16384, 8192}}) do
      local M, N = s[1], s[2]
      local x, w, b = cuda:randn({M, N}, "bf16", {seed = 5}), cuda:randn({N}, "bf16", {seed = 6}),
        cuda:randn({N}, "bf16", {seed = 7})
      local y, mean, rstd = cuda:empty({M, N}, "bf16"), cuda:empty({M}, "fp32"), cuda:empty({M}, "fp32")
      local args = {x = x, w = w, b = b, y = y, mean = mean, rstd = rstd, eps = 1e-5}
      local what = M .. " x " .. N
      local row = nl.run("layernorm.fwd.row", args)
      assert(row.waves > 0 and row.waves <= M, what .. ": waves " .. row.waves)
      for _, min_waves in ipairs({nl.get("layernorm.fwd.staged_min_waves"), 3, 0}) do
        local want = (min_waves > 0 and row.waves >= min_waves) and "staged" or "row"
        if min_waves == 3 then picked[want] = true end
        with_settings({["layernorm.fwd.staged_min_waves"] = min_waves}, function()
          assert.are.equal("layernorm.fwd." .. want, nl.resolve("layernorm.fwd.auto", args),
            what .. ": row takes " .. row.waves .. " waves, staged_min_waves " .. min_waves)
        end)
      end
      local y8, scale = cuda:empty({M, N}, "fp8e4m3"), cuda:full({1}, 1)
      local fp8 = {x = x, w = w, b = b, y = y8, scale = scale, mean = mean, rstd = rstd, eps = 1e-5}
      with_settings({["layernorm.fwd.staged_min_waves"] = 3}, function()
        assert.are.equal("layernorm.fwd.row", nl.resolve("layernorm.fwd.auto", fp8), what .. " fp8 y")
      end)
      free(x, w, b, y, mean, rstd, y8, scale)
    end
    if cuda.info.name:match("H[12]00") then
      assert(picked.row and picked.staged, "the shapes should fall on both sides of the rule")
    end
  end)

  it_cuda("auto backward: row_max_n, blockrow and narrow bands, fp32 partials up to fp32_partials_max_n (16-byte rows), reductions steer it, LayerNorm's twins", function()
    -- what the op's auto backward (RMSNorm's unless op says) picks at M x N
    local function pick(M, N, dtype, reduce, op)
      op = op or "rmsnorm"
      local dy, x = cuda:empty({M, N}, dtype), cuda:empty({M, N}, dtype)
      local rstd, dx = cuda:empty({M}, "fp32"), cuda:empty({M, N}, dtype)
      local w, dw = cuda:empty({N}, dtype), cuda:empty({N}, dtype)
      local args = {dy = dy, x = x, w = w, rstd = rstd, dx = dx, dw = dw, reduce = reduce}
      if op == "layernorm" then
        args.mean, args.b, args.db = cuda:empty({M}, "fp32"), cuda:empty({N}, dtype), cuda:empty({N}, dtype)
      elseif op == "add_rmsnorm" then
        args.dres = dy
      end
      local got = nl.resolve(op .. ".bwd.auto", args)
      free(dy, x, rstd, dx, w, dw, args.mean, args.b, args.db)
      return got
    end
    with_settings({["rmsnorm.bwd.persistent_min_m"] = 64, ["rmsnorm.bwd.partials_min_m"] = 8,
      ["rmsnorm.bwd.fp32_partials_max_n"] = 1024, ["rmsnorm.bwd.blockrow_max_n"] = 0}, function()
      assert.are.equal("rmsnorm.bwd.partials", pick(64, 1024, "fp32"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 2048, "fp32"))
      -- rows of single fp32 elements: persistent whatever the width
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 1023, "fp32"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 1024, "bf16"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 1024, "fp32", "atomic"))
      assert.are.equal("rmsnorm.bwd.partials", pick(8, 1024, "bf16"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(8, 1024, "bf16", "atomic"))
      assert.are.equal("rmsnorm.bwd.row", pick(64, 1024, "bf16", "temp"))
      assert.are.equal("rmsnorm.bwd.row", pick(4, 1024, "bf16"))
      assert.are.equal("rmsnorm.bwd.partials", pick(4, 1024, "bf16", "partials"))
      assert.are.equal("rmsnorm.bwd.row", pick(4, 1024, "bf16", "atomic"))
    end)
    -- blockrow up to blockrow_max_n columns and blockrow_max_m rows
    with_settings({["rmsnorm.bwd.blockrow_max_n"] = 256, ["rmsnorm.bwd.blockrow_max_m"] = 64,
      ["rmsnorm.bwd.persistent_min_m"] = 64, ["rmsnorm.bwd.partials_min_m"] = 16,
      ["rmsnorm.bwd.narrow_max_n"] = 0}, function()
      assert.are.equal("rmsnorm.bwd.row", pick(15, 256, "bf16"))
      assert.are.equal("rmsnorm.bwd.blockrow", pick(64, 256, "bf16"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(65, 256, "bf16"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 512, "bf16"))
      -- and up to narrow_max_n columns for at most narrow_max_m rows
      with_settings({["rmsnorm.bwd.narrow_max_n"] = 512, ["rmsnorm.bwd.narrow_max_m"] = 64}, function()
        assert.are.equal("rmsnorm.bwd.blockrow", pick(64, 512, "bf16"))
        assert.are.equal("rmsnorm.bwd.persistent", pick(65, 512, "bf16"))
        assert.are.equal("rmsnorm.bwd.persistent", pick(64, 768, "bf16"))
      end)
    end)
    -- few rows take row only up to row_max_n columns, partials beyond
    with_settings({["rmsnorm.bwd.partials_min_m"] = 16, ["rmsnorm.bwd.row_max_n"] = 1024,
      ["rmsnorm.bwd.persistent_min_m"] = 64}, function()
      assert.are.equal("rmsnorm.bwd.row", pick(15, 1024, "bf16"))
      assert.are.equal("rmsnorm.bwd.partials", pick(15, 2048, "bf16"))
      assert.are.equal("rmsnorm.bwd.row", pick(15, 2048, "bf16", "temp"))
    end)
    -- LayerNorm follows its twins of row_max_n, blockrow_max_n and narrow_max_m, LayerNorm and
    -- add_rmsnorm their twins of blockrow_max_n and narrow_max_n, RMSNorm none
    with_settings({["rmsnorm.bwd.partials_min_m"] = 16, ["rmsnorm.bwd.row_max_n"] = 2048,
      ["layernorm.bwd.row_max_n"] = 1024, ["rmsnorm.bwd.persistent_min_m"] = 8,
      ["rmsnorm.bwd.blockrow_max_n"] = 256,
      ["layernorm.bwd.blockrow_max_n"] = 128, ["rmsnorm.bwd.blockrow_max_m"] = 64,
      ["rmsnorm.bwd.narrow_max_n"] = 0, ["layernorm.bwd.narrow_max_n"] = 0,
      ["layernorm.bwd.partials_max_n"] = 0}, function()
      assert.are.equal("layernorm.bwd.row", pick(15, 1024, "bf16", nil, "layernorm"))
      assert.are.equal("layernorm.bwd.persistent", pick(15, 2048, "bf16", nil, "layernorm"))
      assert.are.equal("rmsnorm.bwd.row", pick(15, 2048, "bf16"))
      assert.are.equal("layernorm.bwd.blockrow", pick(64, 128, "bf16", nil, "layernorm"))
      assert.are.equal("layernorm.bwd.persistent", pick(64, 256, "bf16", nil, "layernorm"))
      assert.are.equal("rmsnorm.bwd.blockrow", pick(64, 256, "bf16"))
      -- the narrow band's rows: add_rmsnorm takes RMSNorm's narrow_max_m, LayerNorm its twin
      -- (RMSNorm's own band here: 512 columns for at most 16 rows)
      for op, rows in pairs({add_rmsnorm = "rmsnorm", layernorm = "layernorm"}) do
        local set = {[op .. ".bwd.blockrow_max_n"] = 0, ["rmsnorm.bwd.narrow_max_n"] = 512,
          [op .. ".bwd.narrow_max_n"] = 128, ["rmsnorm.bwd.narrow_max_m"] = 16}
        set[rows .. ".bwd.narrow_max_m"] = 32
        with_settings(set, function()
          assert.are.equal(op .. ".bwd.persistent", pick(64, 128, "bf16", nil, op))
          assert.are.equal(op .. ".bwd.blockrow", pick(32, 128, "bf16", nil, op))
          assert.are.equal(op .. ".bwd.persistent", pick(32, 256, "bf16", nil, op))
          assert.are.equal("rmsnorm.bwd.blockrow", pick(16, 512, "bf16"))
          assert.are.equal(op == "layernorm" and "rmsnorm.bwd.persistent" or "rmsnorm.bwd.blockrow",
            pick(32, 512, "bf16"))
        end)
      end
      -- LayerNorm's narrow rows take partials up to partials_max_n columns past the blockrow
      -- bands, unless an atomic dW asks for persistent; RMSNorm's do not
      with_settings({["layernorm.bwd.partials_max_n"] = 2048, ["layernorm.bwd.narrow_max_m"] = 32},
        function()
          assert.are.equal("layernorm.bwd.blockrow", pick(32, 128, "bf16", nil, "layernorm"))
          assert.are.equal("layernorm.bwd.partials", pick(32, 2048, "bf16", nil, "layernorm"))
          assert.are.equal("layernorm.bwd.persistent", pick(32, 2048, "bf16", "atomic", "layernorm"))
          assert.are.equal("layernorm.bwd.persistent", pick(32, 4096, "bf16", nil, "layernorm"))
          assert.are.equal("layernorm.bwd.persistent", pick(33, 2048, "bf16", nil, "layernorm"))
          assert.are.equal("rmsnorm.bwd.persistent", pick(32, 2048, "bf16"))
        end)
    end)
  end)

  it_cuda("row strides wider than the row, with and without 16-byte alignment", function()
    for _, pad in ipairs({8, 3}) do
      local p = problem(37, 1024, "bf16", {stride = pad})
      reference(p)
      check_all(p)
      release(p)
    end
  end)

  it_cuda("NaN and Inf inputs flow through to NaN rows", function()
    local x = cuda:randn({4, 256}, "bf16", {seed = 5})
    x:set(2, 3, 1 / 0)
    x:set(3, 7, NaN)
    for _, v in ipairs(variants("rmsnorm", "fwd")) do
      -- every strategy takes rows of 256 (a warp holds them; they fit shared memory)
      local y, rstd = nl.rmsnorm(x, nil, {variant = v})
      local vals = rstd:totable()
      assert.is_true(vals[1] == vals[1] and vals[4] == vals[4])
      assert.is_true(vals[3] ~= vals[3])
      assert.is_true(y:get(3, 1) ~= y:get(3, 1))
      free(y, rstd)
    end
    x:free()
  end)

  it_cuda("bad input on the GPU: the same clear errors as on the CPU", function()
    local x = cuda:randn({8, 64}, "bf16", {seed = 1})
    local wc = cpu:randn({64}, "fp32", {seed = 2})
    local ok, err = pcall(nl.rmsnorm, x, wc, {variant = "persistent"})
    assert.is_false(ok)
    assert.matches("argument 'w' is on cpu but x is on cuda:0", err, 1, true)
    ok, err = pcall(cuda.empty, cuda, {4, 4}, "fp64")
    assert.is_false(ok)
    assert.matches("fp64 buffers live on the CPU only", err, 1, true)
    local wide = cuda:randn({2, 4096}, "bf16", {seed = 3})
    ok, err = nl.supports("rmsnorm.fwd.blockrow", {x = wide, y = wide:to(cuda), eps = 1e-6})
    assert.is_false(ok)
    assert.matches("too wide for a warp per row", err, 1, true)
    local huge = cuda:randn({2, 2 ^ 17}, "bf16", {seed = 4})
    ok, err = nl.supports("rmsnorm.fwd.staged", {x = huge, y = huge:to(cuda), eps = 1e-6})
    assert.is_false(ok)
    assert.matches("does not fit one CTA's shared memory", err, 1, true)
    free(x, wc, wide, huge)
  end)

  ---- layernorm ----

  it_ln("layernorm: every weight kind x bias kind x offset on a few shapes", function()
    for _, dtype in ipairs({"bf16", "fp16", "fp32"}) do
      check_ln(dtype, {{37, 1025}, {199, 4096}, {7, 65536}, {4099, 512}}, LN_FULL)
    end
  end)

  -- Two runs of a backward variant with reduction r into fresh poisoned outputs: the run
  -- info names r and says whether it is deterministic (every reduction but atomic), and a
  -- deterministic one gives bitwise the same dx, dw and db twice.
  local function check_repeat(p, v, r)
    local runs = {}
    for i = 1, 2 do
      local o = {dx = poisoned({p.M, p.N}, p.dtype), dw = p.w and poisoned({p.N}, p.w.dtype),
        db = p.b and poisoned({p.N}, p.b.dtype)}
      local info = nl.run(p.op .. ".bwd." .. v, bwd_args(p, p.gdy, o.dx, o.dw, o.db, {reduce = r}))
      assert.are.equal(r, info.reduce)
      assert.are.equal(r ~= "atomic", info.deterministic, label(p, v, "bwd") .. " reduce=" .. r)
      runs[i] = o
    end
    for _, name in ipairs({"dx", "dw", "db"}) do
      local a, b = runs[1][name], runs[2][name]
      if a and r ~= "atomic" then
        assert_same_bits(a, b, string.format("%s reduce=%s: %s differs between two runs",
          label(p, v, "bwd"), r, name))
      end
      free(a, b)
    end
  end

  it_ln("layernorm: dx in place over dy, every dW/dB reduction each variant offers", function()
    -- dW and dB together, each alone, with and without an offset; shapes from one row per
    -- CTA to rows wider than the registers hold, many rows per SM, M = 4099 (> SMs x CTAs)
    local cases = {{199, 1024, "bf16", "fp32", "x", 0}, {4099, 4096, "bf16", "x", "x", 1},
      {37, 65536, "fp16", "none", "fp32", 0}, {7, 1023, "fp32", "x", "none", 1},
      {1, 7, "fp16", "x", "fp32", 1}}
    local offered, REDUCES = {}, {"temp", "partials", "atomic"}
    for _, c in ipairs(cases) do
      local p = problem(c[1], c[2], c[3], {op = "layernorm", weight = c[4], bias = c[5],
        offset = c[6]})
      reference(p)
      for _, v in ipairs(bwd_entries("layernorm")) do
        local ran = check_bwd(p, v.strategy)
        assert.are.equal(ran, check_bwd(p, v.strategy, {inplace = true}))
        for _, r in ipairs(v.reduces) do
          offered[r] = true
          -- a shape the variant takes, it takes with each reduction it offers
          assert.are.equal(ran, check_bwd(p, v.strategy, {reduce = r}), v.name .. " " .. r)
          if ran then
            check_bwd(p, v.strategy, {reduce = r, inplace = true})
            check_repeat(p, v.strategy, r)
          end
        end
      end
      -- auto with each reduction some variant offers, where it finds one
      for _, r in ipairs(REDUCES) do
        if offered[r] then
          check_bwd(p, "auto", {reduce = r})
        end
      end
      assert.is_true(check_bwd(p, "auto", {inplace = true}))
      release(p)
    end
  end)

  it_ln("layernorm: row strides wider than the row, with and without 16-byte alignment",
    function()
      for _, pad in ipairs({8, 3}) do
        local p = problem(37, 1024, "bf16", {op = "layernorm", weight = "x", bias = "fp32",
          offset = LN_OFFSET, stride = pad})
        reference(p)
        check_all(p)
        for _, v in ipairs(variants("layernorm", "bwd")) do
          check_bwd(p, v, {inplace = true})
        end
        release(p)
      end
    end)

  it_ln("layernorm: one-element rows get dx exactly 0 from every backward variant", function()
    -- x - mean and dy W - mean(dy W) both vanish in a one-element row, while rstd is
    -- 1 / sqrt(eps): any rounding of dy W that the mean does not share would show, times 316
    local M = 16411
    for _, dtype in ipairs({"fp32", "bf16"}) do
      local x, dy = cuda:randn({M, 1}, dtype, {seed = 11}), cuda:randn({M, 1}, dtype, {seed = 12, std = 4})
      local w = cuda:randn({1}, "fp32", {seed = 13, mean = 1, std = 0.5})
      local b = cuda:randn({1}, "fp32", {seed = 14})
      local y, mean, rstd = nl.layernorm(x, w, b)
      for _, v in ipairs(variants("layernorm", "bwd")) do
        local dx, dw, db = nl.layernorm_bwd(dy, x, w, b, mean, rstd, {variant = v, offset = 0.97})
        local zeros = cuda:full({M, 1}, 0, dtype)
        assert_same_bits(dx, zeros, v .. " " .. dtype .. " dx")
        free(dx, dw, db, zeros)
      end
      free(x, dy, w, b, y, mean, rstd)
    end
  end)

  -- the CPU twin is dtype_spec's "a -0 weight at offset 0"
  it_cuda("a -0 weight at offset 0 keeps the sign of x times -0 in every forward variant", function()
    local x = cuda:randn({4, 256}, "bf16", {seed = 8})
    local xs = x:read(0, 4 * 256)
    for _, wdt in ipairs({"bf16", "fp32"}) do
      local wt = {}
      for j = 1, 256 do
        wt[j] = j % 2 == 0 and -0.0 or 1
      end
      local w = cuda:from_table(wt, wdt)
      local ran = 0
      for _, v in ipairs(variants("rmsnorm", "fwd")) do
        local y = cuda:empty({4, 256}, "bf16")
        if nl.supports("rmsnorm.fwd." .. v, {x = x, w = w, y = y, eps = 1e-6}) then
          local _, rstd = nl.rmsnorm(x, w, {variant = v, out = y})
          local ys, bad = y:read(0, 4 * 256), 0
          for k = 2, #ys, 2 do
            -- y is a zero whose sign is x's flipped (x is never 0 here)
            if ys[k] ~= 0 or (1 / ys[k] > 0) == (xs[k] > 0) then
              bad = bad + 1
            end
          end
          assert.are.equal(0, bad, v .. " with a " .. wdt .. " weight: zeros of the wrong sign")
          rstd:free()
          ran = ran + 1
        end
        y:free()
      end
      assert.is_true(ran > 0)
      w:free()
    end
    x:free()
  end)

  it_ln("layernorm: NaN and Inf inputs flow through to NaN rows", function()
    local x = cuda:randn({4, 256}, "bf16", {seed = 5})
    local w, b = cuda:randn({256}, "bf16", {seed = 6}), cuda:randn({256}, "fp32", {seed = 7})
    x:set(2, 3, 1 / 0)
    x:set(3, 7, NaN)
    local function finite(v)
      return v == v and v ~= 1 / 0 and v ~= -1 / 0
    end
    local ran = 0
    for _, v in ipairs(variants("layernorm", "fwd")) do
      local y = cuda:empty({4, 256}, "bf16")
      if nl.supports("layernorm.fwd." .. v, {x = x, w = w, b = b, y = y, eps = 1e-5}) then
        local _, mean, rstd = nl.layernorm(x, w, b, {variant = v, out = y})
        local m, r = mean:totable(), rstd:totable()
        -- the finite rows keep finite statistics; the row with a NaN gets NaN ones and a
        -- NaN output, the one with an Inf a non-finite output where the Inf was
        assert.is_true(finite(m[1]) and finite(r[1]) and finite(m[4]) and finite(r[4]), v)
        assert.is_true(m[3] ~= m[3] and r[3] ~= r[3], v)
        assert.is_true(y:get(3, 1) ~= y:get(3, 1), v)
        assert.is_false(finite(y:get(2, 3)), v)
        assert.is_true(finite(y:get(1, 1)) and finite(y:get(4, 256)), v)
        free(mean, rstd)
        ran = ran + 1
      end
      y:free()
    end
    assert.is_true(ran > 0)
    free(x, w, b)
  end)

  it_cuda("layernorm: bad input on the GPU gets the CPU's errors and changes nothing", function()
    -- Validation comes before the variant's kernels, so this runs before any CUDA layernorm
    -- variant is registered (auto then); afterwards on each registered one.
    local raises = helper.raises
    local bufs = {}
    local function keep(b)
      bufs[#bufs + 1] = b
      return b
    end
    local function sentinel(dev, shape, dtype)
      return keep(dev:full(shape, 7, dtype))
    end
    local function untouched(...)
      for i = 1, select("#", ...) do
        for _, v in ipairs(helper.flat(select(i, ...))) do
          if v ~= 7 then
            return false
          end
        end
      end
      return true
    end
    local function strategies(pass)
      local list = variants("layernorm", pass)
      return #list > 0 and list or {"auto"}
    end
    local on = cuda.name
    local x = keep(cuda:randn({4, 8}, "bf16", {seed = 11}))
    local w = keep(cuda:randn({8}, "fp32", {seed = 12, mean = 1, std = 0.1}))
    local b = keep(cuda:randn({8}, "bf16", {seed = 13}))
    local y, mean, rstd = sentinel(cuda, {4, 8}, "bf16"), sentinel(cuda, {4}, "fp32"),
      sentinel(cuda, {4}, "fp32")
    local cy, cm = sentinel(cpu, {4, 8}, "bf16"), sentinel(cpu, {4}, "fp32")
    for _, v in ipairs(strategies("fwd")) do
      local n = "layernorm.fwd." .. v .. ": "
      local o = {variant = v, out = y, mean = mean, rstd = rstd}
      local function with(k, val)
        local t = {}
        for key, value in pairs(o) do
          t[key] = value
        end
        t[k] = val
        return t
      end
      raises(n .. "argument 'w' has 7 elements, x has rows of 8", nl.layernorm, x,
        keep(cuda:full({7}, 1, "fp32")), b, o)
      raises(n .. "argument 'b' has 7 elements, x has rows of 8", nl.layernorm, x, w,
        keep(cuda:full({7}, 0, "bf16")), o)
      raises(n .. "argument 'w' is fp16; weights are fp32 or x's dtype (bf16)", nl.layernorm, x,
        keep(cuda:full({8}, 1, "fp16")), b, o)
      raises(n .. "argument 'b' is fp16; weights are fp32 or x's dtype (bf16)", nl.layernorm, x,
        w, keep(cuda:full({8}, 0, "fp16")), o)
      raises(n .. "argument 'y' is fp16 but x is bf16 (y is x's dtype, or fp8e4m3 / fp8e5m2 from a forward pass)",
        nl.layernorm, x, w, b, with("out", keep(cuda:full({4, 8}, 7, "fp16"))))
      raises(n .. "argument 'y' is [4, 9] but x is [4, 8]", nl.layernorm, x, w, b,
        with("out", keep(cuda:full({4, 9}, 7, "bf16"))))
      raises(n .. "argument 'mean' must be a 1-D buffer of 4 elements (one per row)",
        nl.layernorm, x, w, b, with("mean", keep(cuda:full({5}, 7, "fp32"))))
      raises(n .. "argument 'rstd' is bf16; rstd and mean are always fp32", nl.layernorm, x, w,
        b, with("rstd", keep(cuda:full({4}, 7, "bf16"))))
      raises(n .. "offset 1 needs a weight (w is absent)", nl.layernorm, x, nil, b,
        with("offset", 1))
      raises(n .. "output 'y' is the same buffer as 'x' (outputs must be distinct buffers)",
        nl.layernorm, x, w, b, with("out", x))
      raises(n .. "output 'rstd' is the same buffer as 'mean' (outputs must be distinct buffers)",
        nl.layernorm, x, w, b, with("rstd", mean))
      -- mixed devices: an input or an output on the CPU
      raises(n .. "argument 'w' is on cpu but x is on " .. on, nl.layernorm, x,
        keep(w:to(cpu)), b, o)
      raises(n .. "argument 'b' is on cpu but x is on " .. on, nl.layernorm, x, w,
        keep(b:to(cpu)), o)
      raises(n .. "argument 'y' is on cpu but x is on " .. on, nl.layernorm, x, w, b,
        with("out", cy))
      raises(n .. "argument 'mean' is on cpu but x is on " .. on, nl.layernorm, x, w, b,
        with("mean", cm))
      assert.is_true(untouched(y, mean, rstd, cy, cm))
    end

    local dy = keep(cuda:randn({4, 8}, "bf16", {seed = 14}))
    local m, r = keep(cuda:full({4}, 0, "fp32")), keep(cuda:full({4}, 1, "fp32"))
    local dx, dw, db = sentinel(cuda, {4, 8}, "bf16"), sentinel(cuda, {8}, "fp32"),
      sentinel(cuda, {8}, "bf16")
    local cdw = sentinel(cpu, {8}, "fp32")
    local bwd = nl.layernorm_bwd
    for _, v in ipairs(strategies("bwd")) do
      local n = "layernorm.bwd." .. v .. ": "
      local o = {variant = v, dx = dx, dw = dw, db = db}
      raises(n .. "argument 'dy' is [4, 9] but x is [4, 8]", bwd,
        keep(cuda:randn({4, 9}, "bf16", {seed = 15})), x, w, b, m, r, o)
      raises(n .. "argument 'dy' is fp16 but x is bf16 (activations share one dtype)", bwd,
        keep(cuda:randn({4, 8}, "fp16", {seed = 16})), x, w, b, m, r, o)
      raises("layernorm_bwd: argument 'mean' is required", bwd, dy, x, w, b, nil, r, o)
      raises("layernorm_bwd: argument 'rstd' is required", bwd, dy, x, w, b, m, nil, o)
      raises(n .. "argument 'mean' is required", nl.run, "layernorm.bwd." .. v,
        {dy = dy, x = x, w = w, b = b, rstd = r, dx = dx, dw = dw, db = db})
      raises(n .. "argument 'rstd' is required", nl.run, "layernorm.bwd." .. v,
        {dy = dy, x = x, w = w, b = b, mean = m, dx = dx, dw = dw, db = db})
      raises(n .. "argument 'mean' must be a 1-D buffer of 4 elements (one per row)", bwd, dy,
        x, w, b, keep(cuda:full({8}, 0, "fp32")), r, o)
      raises(n .. "argument 'rstd' is fp16; rstd and mean are always fp32", bwd, dy, x, w, b,
        m, keep(cuda:full({4}, 1, "fp16")), o)
      raises(n .. "argument 'dw' is bf16 but w is fp32", bwd, dy, x, w, b, m, r,
        {variant = v, dx = dx, dw = keep(cuda:full({8}, 7, "bf16")), db = db})
      raises(n .. "argument 'db' is fp32 but b is bf16", bwd, dy, x, w, b, m, r,
        {variant = v, dx = dx, dw = dw, db = keep(cuda:full({8}, 7, "fp32"))})
      raises("layernorm_bwd: option 'db' is given but there is no bias b", bwd, dy, x, w, nil,
        m, r, o)
      raises(n .. "output 'dx' is the same buffer as 'x'", bwd, dy, x, w, b, m, r,
        {variant = v, dx = x, dw = dw, db = db})
      raises(n .. "argument 'mean' is on cpu but x is on " .. on, bwd, dy, x, w, b,
        keep(m:to(cpu)), r, o)
      raises(n .. "argument 'dw' is on cpu but x is on " .. on, bwd, dy, x, w, b, m, r,
        {variant = v, dx = dx, dw = cdw, db = db})
      assert.is_true(untouched(dx, dw, db, cdw))
    end
    -- a reduction a variant lacks is refused with the ones it has
    for _, e in ipairs(bwd_entries("layernorm")) do
      local has = {}
      for _, red in ipairs(e.reduces) do
        has[red] = true
      end
      for _, red in ipairs({"temp", "partials", "atomic"}) do
        if not has[red] then
          raises(string.format("%s: no '%s' reduction of dW (it supports: %s)", e.name, red,
            table.concat(e.reduces, ", ")), bwd, dy, x, w, b, m, r,
            {variant = e.strategy, reduce = red, dx = dx, dw = dw, db = db})
        end
      end
    end
    assert.is_true(untouched(dx, dw, db))
    for _, buf in ipairs(bufs) do
      buf:free()
    end
  end)
end)

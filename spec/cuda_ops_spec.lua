-- Every CUDA variant of the ops spec/drivers.lua lists for CUDA (rmsnorm and add_rmsnorm)
-- against the fp64 reference on the CPU. The variants come from the registry, so a new
-- strategy is tested without editing this file; a new op needs its driver here (the problem
-- and reference below, and check_fwd / check_bwd), which spec/coverage_spec.lua asks for.
--
-- Every output buffer is filled with NaN before each launch, so an element a kernel forgets
-- to write fails the comparison. The reference runs on CPU copies of the same inputs, and
-- the backward pass of both sides reads the same saved rstd (the reference's). Tolerances
-- come from nl.tolerance; dW's grows with sqrt(M). Runs only where a GPU is present (#cuda).
local nl = require("normlab")
local helper = require("spec.helper")
local drivers = require("spec.drivers")

local cuda = helper.cuda
local cpu = nl.device("cpu")
local it_cuda = cuda and it or pending
local NaN = 0 / 0

local OPS = drivers.cuda.ops
local function variants(op, pass)
  return drivers.strategies("cuda", op, pass)
end
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

local function poisoned(shape, dtype)
  return cuda:full(shape, NaN, dtype)
end

-- One problem: inputs on the CPU and their copies on the GPU.
local function problem(M, N, dtype, o)
  o = o or {}
  local seed = 1000 * M + N
  local p = {M = M, N = N, dtype = dtype, seed = seed, cast = o.cast or "llama",
    offset = o.offset or 0, add = o.add}
  local wdt = o.weight == "x" and dtype or o.weight == "none" and nil or "fp32"
  local stride = o.stride and N + o.stride or nil
  p.x = cpu:randn({M, N}, dtype, {seed = seed})
  p.dy = cpu:randn({M, N}, dtype, {seed = seed + 1})
  if wdt then
    p.w = cpu:randn({N}, wdt, {seed = seed + 2, mean = 1, std = 0.25})
  end
  if o.add then
    p.res = cpu:randn({M, N}, dtype, {seed = seed + 3})
    p.dres = cpu:randn({M, N}, dtype, {seed = seed + 4})
  end
  p.gx = cuda:empty({M, N}, dtype, {stride = stride})
  p.gx:copy_(p.x)
  p.gdy = cuda:empty({M, N}, dtype, {stride = stride})
  p.gdy:copy_(p.dy)
  p.gw = p.w and p.w:to(cuda)
  p.gres = p.res and p.res:to(cuda)
  p.gdres = p.dres and p.dres:to(cuda)
  return p
end

local function release(p)
  free(p.x, p.dy, p.w, p.res, p.dres, p.gx, p.gdy, p.gw, p.gres, p.gdres, p.ry, p.rr, p.rh,
    p.rdx, p.rdw, p.grstd, p.gh)
end

local function fwd_opts(p, variant, extra)
  local o = {variant = variant, cast = p.cast, offset = p.offset, eps = 1e-6}
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return o
end

-- The reference forward and backward, computed once per problem. For add_rmsnorm the
-- backward's input is the forward's residual_out h.
local function reference(p)
  if p.add then
    p.ry, p.rh, p.rr = nl.add_rmsnorm(p.x, p.res, p.w, fwd_opts(p, "ref"))
    p.rdx, p.rdw = nl.add_rmsnorm_bwd(p.dy, p.rh, p.w, p.rr,
      {variant = "ref", cast = p.cast, offset = p.offset, dres = p.dres})
    p.gh = p.rh:to(cuda)
  else
    p.ry, p.rr = nl.rmsnorm(p.x, p.w, fwd_opts(p, "ref"))
    p.rdx, p.rdw = nl.rmsnorm_bwd(p.dy, p.x, p.w, p.rr,
      {variant = "ref", cast = p.cast, offset = p.offset})
  end
  p.grstd = p.rr:to(cuda)
end

local function label(p, variant, pass)
  return string.format("%s.%s.%s M=%d N=%d %s w=%s cast=%s offset=%g", p.add and "add_rmsnorm"
    or "rmsnorm", pass, variant, p.M, p.N, p.dtype, p.w and p.w.dtype or "none", p.cast, p.offset)
end

local function fwd_args(p)
  local args = {x = p.gx, w = p.gw, eps = 1e-6, cast = p.cast, offset = p.offset}
  if p.add then
    args.residual = p.gres
  end
  return args
end

-- Runs a forward variant into poisoned outputs and compares. false, reason when the
-- variant does not take this shape.
local function check_fwd(p, variant)
  local op = p.add and "add_rmsnorm" or "rmsnorm"
  local y, rstd = poisoned({p.M, p.N}, p.dtype), poisoned({p.M}, "fp32")
  local probe = fwd_args(p)
  probe.y, probe.rstd = y, rstd
  if p.add then
    probe.residual_out = y:to(cuda)
  end
  local ok, why = nl.supports(op .. ".fwd." .. variant, probe)
  free(probe.residual_out)
  if not ok then
    free(y, rstd)
    return false, why
  end
  local what = label(p, variant, "fwd")
  if p.add then
    local h = poisoned({p.M, p.N}, p.dtype)
    nl.add_rmsnorm(p.gx, p.gres, p.gw, fwd_opts(p, variant, {out = y, rstd = rstd, residual_out = h}))
    assert.allclose(h, p.rh, {output = "residual_out", seed = what})
    h:free()
  else
    nl.rmsnorm(p.gx, p.gw, fwd_opts(p, variant, {out = y, rstd = rstd}))
  end
  assert.allclose(y, p.ry, {output = "y", seed = what})
  assert.allclose(rstd, p.rr, {output = "rstd", dtype = p.dtype, seed = what})
  free(y, rstd)
  return true
end

local function check_bwd(p, variant, o)
  o = o or {}
  local op = p.add and "add_rmsnorm" or "rmsnorm"
  local x = p.add and p.gh or p.gx
  local what = label(p, variant, "bwd") .. (o.reduce and (" reduce=" .. o.reduce) or "")
    .. (o.inplace and " inplace" or "")
  local dy = o.inplace and p.gdy:to(cuda) or p.gdy
  local dx = o.inplace and dy or poisoned({p.M, p.N}, p.dtype)
  local dw = p.w and poisoned({p.N}, p.w.dtype) or nil
  local ok, why = nl.supports(op .. ".bwd." .. variant, {dy = dy, x = x, w = p.gw,
    rstd = p.grstd, dres = p.gdres, dx = dx, dw = dw, cast = p.cast, offset = p.offset,
    reduce = o.reduce})
  if not ok then
    free(dx, dw)
    return false, why
  end
  if o.inplace then
    dx = nil
  end
  local opts = {variant = variant, cast = p.cast, offset = p.offset, reduce = o.reduce,
    dx = dx, dw = dw, inplace = o.inplace}
  local rdx, rdw
  if p.add then
    opts.dres = p.gdres
    rdx, rdw = nl.add_rmsnorm_bwd(dy, x, p.gw, p.grstd, opts)
  else
    rdx, rdw = nl.rmsnorm_bwd(dy, x, p.gw, p.grstd, opts)
  end
  if o.inplace then
    assert.are.equal(dy, rdx)
  end
  assert.allclose(rdx, p.rdx, {output = "dx", seed = what})
  if p.w then
    assert.allclose(rdw, p.rdw, {output = "dw", dtype = p.dtype, M = p.M, seed = what})
  end
  free(rdx, rdw)
  return true
end

local function op_of(p)
  return p.add and "add_rmsnorm" or "rmsnorm"
end

-- Every forward and backward variant of p's op; returns how many of them refused its shape.
local function check_all(p)
  local skipped = 0
  for _, v in ipairs(variants(op_of(p), "fwd")) do
    if not check_fwd(p, v) then
      skipped = skipped + 1
    end
  end
  for _, v in ipairs(variants(op_of(p), "bwd")) do
    if not check_bwd(p, v) then
      skipped = skipped + 1
    end
  end
  return skipped
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

describe("CUDA ops #cuda", function()
  for _, op in ipairs(OPS) do
    for _, dtype in ipairs({"bf16", "fp16", "fp32"}) do
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

  it_cuda("weights, casting modes and offset on every variant", function()
    check_weight_grid({"bf16", "fp16", "fp32"}, {{37, 1025}, {199, 4096}, {7, 65536}, {4099, 512}},
      {"fp32", "x", "none"}, {"llama", "gemma", "none"})
  end)

  it_cuda("the weight loaded with x in the one-row forward kernels (early_weight_max_n)", function()
    with_settings({["rmsnorm.fwd.early_weight_max_n"] = 2 ^ 24}, function()
      check_weight_grid({"bf16", "fp16", "fp32"}, {{37, 1024}, {199, 4096}, {4099, 512}, {7, 1023}},
        {"x", "fp32", "none"}, {"llama", "gemma"}, function(s) return s[1] == 199 end)
    end)
  end)

  it_cuda("x read twice in the one-row forward kernels (reload_min_n)", function()
    with_settings({["rmsnorm.fwd.reload_min_n"] = 1}, function()
      check_weight_grid({"bf16", "fp16", "fp32"}, {{37, 1024}, {199, 8192}, {4099, 512}, {7, 1023}},
        {"x", "fp32", "none"}, {"llama", "gemma", "none"}, function(s) return s[1] == 37 end)
    end)
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

  it_cuda("in-place backward, fp32-atomic reductions, the fused in-kernel reduction, clusters",
    function()
      for _, s in ipairs({{199, 1024}, {4099, 4096}, {37, 65536}}) do
        local p = problem(s[1], s[2], "bf16")
        reference(p)
        for _, v in ipairs(variants("rmsnorm", "bwd")) do
          check_bwd(p, v, {inplace = true})
          check_bwd(p, v, {reduce = "atomic"})
        end
        with_settings({["rmsnorm.bwd.fused_reduce"] = 1}, function()
          check_bwd(p, "persistent")
        end)
        -- clusters summing dW through distributed shared memory (sm_90; elsewhere the plan
        -- falls back to a partial row per CTA), CTAs past the last row included
        for _, c in ipairs({2, 4, 8}) do
          with_settings({["rmsnorm.bwd.cluster"] = c}, function()
            check_bwd(p, "persistent")
            check_bwd(p, "partials")
            check_bwd(p, "persistent", {inplace = true})
          end)
        end
        release(p)
      end
    end)

  it_cuda("rows shared by a thread-block cluster (rmsnorm.bwd.share_n, share_max)", function()
    -- share_n = 512 (clusters of up to 8) shares rows of 1024 among 2 CTAs and wider ones
    -- among 8; 2048 (at most 2) shares 4096 and 16384 among 2, and 65536 among 4 or 8, as 2
    -- CTAs' registers do not hold the slice; 8192 (at most 4: an H100's defaults) shares
    -- 16384 among 2 and 65536 among 4 (fp32: 8). 1025 columns do not divide, so the plan falls
    -- back to unshared rows; M = 1 and 7 leave clusters without rows; 128-thread CTAs hold
    -- several rows each. Before sm_90 every plan falls back.
    local sm90 = cuda.info.cc_major >= 9
    local shapes = {{1, 1024}, {7, 65536}, {37, 1025}, {199, 4096}, {4099, 1024}, {37, 16384}}
    local weights = {"fp32", "x", "none"}
    local settings = {{512, 8}, {2048, 2}, {8192, 4}}
    local shared = 0
    for _, dtype in ipairs({"bf16", "fp16", "fp32"}) do
      for i, s in ipairs(shapes) do
        local weight, cast = weights[i % 3 + 1], i % 2 == 0 and "gemma" or "llama"
        local p = problem(s[1], s[2], dtype, {weight = weight, cast = cast,
          offset = cast == "gemma" and weight ~= "none" and 1 or 0, add = i == 4})
        reference(p)
        for j, set in ipairs(settings) do
          local share_n, share_max = set[1], set[2]
          with_settings({["rmsnorm.bwd.share_n"] = share_n,
            ["rmsnorm.bwd.fp32_share_n"] = share_n, ["rmsnorm.bwd.share_max"] = share_max,
            ["rmsnorm.bwd.stages"] = j + 1, ["rmsnorm.bwd.block"] = j == 1 and 128 or 512},
            function()
              for _, v in ipairs({"partials", "persistent"}) do
                check_bwd(p, v)
                local dx, dw = poisoned({p.M, p.N}, p.dtype), p.w and poisoned({p.N}, p.w.dtype)
                local info = nl.run((p.add and "add_rmsnorm" or "rmsnorm") .. ".bwd." .. v,
                  {dy = p.gdy, x = p.add and p.gh or p.gx, w = p.gw, rstd = p.grstd,
                    dres = p.gdres, dx = dx, dw = dw, cast = p.cast, offset = p.offset})
                free(dx, dw)
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
    if sm90 then
      assert.is_true(shared > 0)
    end
  end)

  it_cuda("every register layout and CTA size the settings can ask for", function()
    for _, s in ipairs({{199, 1024}, {37, 4096}, {7, 16384}}) do
      local p = problem(s[1], s[2], "bf16")
      reference(p)
      for _, items in ipairs({1, 2, 4, 8}) do
        for _, block in ipairs({32, 128, 1024}) do
          with_settings({["rmsnorm.fwd.items"] = items, ["rmsnorm.bwd.items"] = items,
            ["rmsnorm.fwd.block"] = block, ["rmsnorm.bwd.block"] = block,
            ["rmsnorm.fwd.stages"] = 2 + (items + block) % 3,
            ["rmsnorm.bwd.stages"] = 2 + (items + block + 1) % 3,
            ["rmsnorm.bwd.fused_reduce"] = (items + block) % 2,
            ["rmsnorm.bwd.cluster"] = 2 ^ ((items + block / 32) % 4),
            ["rmsnorm.bwd.grid_sms"] = (items + block) % 3 * 7,
            ["rmsnorm.fwd.early_weight_max_n"] = (items + block + 1) % 2 * 2 ^ 24,
            ["rmsnorm.fwd.staged_items"] = block == 1024 and 64 or items,
            ["rmsnorm.fwd.reload_min_n"] = (items + block / 32) % 2,
            ["rmsnorm.fwd.ctas_per_sm"] = 1, ["rmsnorm.bwd.ctas_per_sm"] = 2,
            ["rmsnorm.fwd.blockrow_block"] = block, ["rmsnorm.bwd.blockrow_block"] = 1024 / block * 32,
            ["cuda.pdl"] = (items + block / 32) % 2}, function()
            check_all(p)
          end)
        end
      end
      release(p)
    end
  end)

  it_cuda("the looping kernels at every CTA count per SM the settings can ask for", function()
    for _, s in ipairs({{37, 4096}, {7, 65536}}) do
      local p = problem(s[1], s[2], "bf16")
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
  end)

  it_cuda("the split backward (row kernel, then column kernel) where the looping one would run",
    function()
      -- 32-thread CTAs leave 4096 columns too wide for registers (row chunks of 21 rows);
      -- fp32 rows split where their dW row outgrows shared memory (N = 65536)
      for _, s in ipairs({{4099, 4096, "bf16"}, {37, 65536, "bf16"}, {7, 65536, "fp32", true}}) do
        local p = problem(s[1], s[2], s[3], {add = s[4], cast = s[4] and "gemma" or nil,
          offset = s[4] and 1 or nil})
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
    local x, y = cuda:randn({64, 2048}, "bf16", {seed = 3}), cuda:empty({64, 2048}, "bf16")
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

  it_cuda("auto forward follows blockrow_max_n, blockrow_max_m and persistent_min_*", function()
    local x, y = cuda:randn({64, 1024}, "bf16", {seed = 3}), cuda:empty({64, 1024}, "bf16")
    local args = {x = x, y = y, eps = 1e-6}
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 64},
      function()
        assert.are.equal("rmsnorm.fwd.blockrow", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 1024, ["rmsnorm.fwd.blockrow_max_m"] = 63},
      function()
        assert.are.equal("rmsnorm.fwd.row", nl.resolve("rmsnorm.fwd.auto", args))
      end)
    with_settings({["rmsnorm.fwd.blockrow_max_n"] = 512, ["rmsnorm.fwd.persistent_min_m"] = 64,
      ["rmsnorm.fwd.persistent_min_n"] = 1024}, function()
      assert.are.equal("rmsnorm.fwd.persistent", nl.resolve("rmsnorm.fwd.auto", args))
    end)
    free(x, y)
  end)

  it_cuda("auto backward: fp32 partials up to fp32_partials_max_n, reductions steer it", function()
    local function pick(M, N, dtype, reduce)
      local dy, x = cuda:empty({M, N}, dtype), cuda:empty({M, N}, dtype)
      local rstd, dx = cuda:empty({M}, "fp32"), cuda:empty({M, N}, dtype)
      local w, dw = cuda:empty({N}, dtype), cuda:empty({N}, dtype)
      local got = nl.resolve("rmsnorm.bwd.auto",
        {dy = dy, x = x, w = w, rstd = rstd, dx = dx, dw = dw, reduce = reduce})
      free(dy, x, rstd, dx, w, dw)
      return got
    end
    with_settings({["rmsnorm.bwd.persistent_min_m"] = 64, ["rmsnorm.bwd.partials_min_m"] = 8,
      ["rmsnorm.bwd.fp32_partials_max_n"] = 1024, ["rmsnorm.bwd.blockrow_max_n"] = 0}, function()
      assert.are.equal("rmsnorm.bwd.partials", pick(64, 1024, "fp32"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 2048, "fp32"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 1024, "bf16"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(64, 1024, "fp32", "atomic"))
      assert.are.equal("rmsnorm.bwd.partials", pick(8, 1024, "bf16"))
      assert.are.equal("rmsnorm.bwd.persistent", pick(8, 1024, "bf16", "atomic"))
      assert.are.equal("rmsnorm.bwd.row", pick(64, 1024, "bf16", "temp"))
      assert.are.equal("rmsnorm.bwd.row", pick(4, 1024, "bf16"))
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
end)

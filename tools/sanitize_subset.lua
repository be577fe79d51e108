-- A representative subset of the CUDA kernels for compute-sanitizer (memcheck, racecheck):
-- every registered CUDA strategy of rmsnorm, add_rmsnorm and layernorm (auto aside: it runs one
-- of the others), forward and backward, on shapes that reach each code path (vector and scalar
-- packs (held in registers by the pipelined backward, and shared by a cluster past 4096 of
-- them; the forward's row cut into a head, 16-byte packs and a tail), one and several rows per
-- CTA, rows of 8 to 32 threads compiled in, the looping kernels, the backward's split path with
-- several rows per chunk (64 x 40000 bf16), the fused grid reduction, clusters summing dW in
-- distributed shared memory or sharing rows, the cp.async pipelines, atomics, in place), and
-- the transpose op (every CUDA strategy: copies, fp8 casts with amax, current scaling's amax
-- pass, odd and strided shapes that take the element path, small and large tiles) with a norm's
-- external transposed copy, the norms' fp8 y and strided yt (every forward strategy, both
-- scalings), and the chunked transposed copy (launches of rows and tiles chained by PDL).
-- Small shapes: the tools slow kernels down a lot.
--   compute-sanitizer --tool memcheck build/normlab tools/sanitize_subset.lua [part ...]
-- Parts (none named: all): norms (or one pass of it, norms1 .. norms4), fp8, transpose, chunked.
-- `--list` prints the parts that together make the whole, one a line, and opens no device
-- (tools/gpu.sh runs racecheck over them one at a time).
local nl = require("normlab")
local dev -- the CUDA device, opened once the arguments are known

-- The registered CUDA strategies of an op and pass, auto aside.
local function strategies(op, pass)
  local list = {}
  for _, v in ipairs(nl.variants{op = op, pass = pass, backend = "cuda"}) do
    if v.strategy ~= "auto" then
      list[#list + 1] = v.strategy
    end
  end
  return list
end
-- Every shape, then two of them again with programmatic dependent launch (cuda.pdl), then
-- two with RMSNorm's one-row kernels reading x twice (fwd_reload; by default only from 4096
-- columns and rows on an H200, never on an H100), then two whose pipelined backward rows take
-- CTAs of whole warps that are not a power of two (rmsnorm.bwd.whole_warps, on by default,
-- and add_rmsnorm's twin, off by default). The pipelined backward's rstd (mean) staged by one
-- lane a warp or by every lane (rmsnorm.bwd.scalar_lead): the GPU's default first, then 0 and 2;
-- its weights at 1 or 2 packs held as fp32 or as packs (rmsnorm.bwd.float_weights): the GPU's
-- default, then 0 and 1.
local passes = {{pdl = 0, shapes = {{3, 7}, {37, 64}, {37, 1024}, {5, 1025}, {9, 4096}, {3, 8191}, {3, 40000}}},
  {pdl = 1, lead = 0, float_weights = 0, shapes = {{37, 1024}, {9, 4096}, {64, 40000}}},
  {pdl = 0, reload = true, float_weights = 1, shapes = {{37, 1024}, {9, 4096}}},
  {pdl = 0, lead = 2, whole_warps = true, shapes = {{37, 5120}, {5, 1280}}}}
-- a pass's value of a setting, or the GPU's default where the pass names none
local function set_or_default(key, value)
  if value then
    nl.set(key, value)
  else
    nl.reset(key)
  end
end
local runs = 0
-- One pass of the norms: its settings, every shape; the GPU's defaults again after it
local function norms(pass)
  nl.set("cuda.pdl", pass.pdl)
  if pass.reload then
    nl.set("rmsnorm.fwd.reload_min_n", 1)
    nl.set("rmsnorm.fwd.reload_min_m", 1)
  end
  set_or_default("rmsnorm.bwd.scalar_lead", pass.lead)
  set_or_default("rmsnorm.bwd.float_weights", pass.float_weights)
  if pass.whole_warps then
    nl.set("rmsnorm.bwd.whole_warps", 1)
    nl.set("add_rmsnorm.bwd.whole_warps", 1)
  end
  for _, s in ipairs(pass.shapes) do
    local M, N = s[1], s[2]
    -- bf16 with weights of its own dtype (held in registers by the pipelined kernels) and
    -- with fp32 weights (read from L1, or held as fp32 where rmsnorm.bwd.float_weights says),
    -- fp32 with fp32 weights
    for _, case in ipairs({{"bf16", "bf16"}, {"bf16", "fp32"}, {"fp32", "fp32"}}) do
      local dtype = case[1]
      local x = dev:randn({M, N}, dtype, {seed = 1})
      local res = dev:randn({M, N}, dtype, {seed = 2})
      local dy = dev:randn({M, N}, dtype, {seed = 3})
      local w = dev:randn({N}, case[2], {seed = 4, mean = 1, std = 0.1})
      for _, v in ipairs(strategies("rmsnorm", "fwd")) do
        if nl.supports("rmsnorm.fwd." .. v, {x = x, w = w, y = dy, eps = 1e-6}) then
          local y, r = nl.rmsnorm(x, w, {variant = v})
          y:free(); r:free()
          runs = runs + 1
        end
        local h = dev:empty({M, N}, dtype)
        local add_ok = nl.supports("add_rmsnorm.fwd." .. v,
          {x = x, residual = res, w = w, y = dy, residual_out = h, eps = 1e-6})
        h:free()
        if add_ok then
          local y2, h, r2 = nl.add_rmsnorm(x, res, w, {variant = v})
          y2:free(); h:free(); r2:free()
          runs = runs + 1
        end
      end
      local _, rstd = nl.rmsnorm(x, w, {variant = "row"})
      for _, v in ipairs(strategies("rmsnorm", "bwd")) do
        for _, reduce in ipairs({"default", "atomic"}) do
          local args = {dy = dy, x = x, w = w, rstd = rstd, dx = res, dw = w:to(dev), reduce = reduce}
          if nl.supports("rmsnorm.bwd." .. v, args) then
            local dx, dw = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = v, reduce = reduce})
            local dx2, dw2 = nl.add_rmsnorm_bwd(dy, x, w, rstd, {variant = v, reduce = reduce, dres = res})
            dx:free(); dw:free(); dx2:free(); dw2:free()
            runs = runs + 2
          end
          args.dw:free()
        end
      end
      local dyc = dy:to(dev)
      local _, dw = nl.rmsnorm_bwd(dyc, x, w, rstd, {variant = "persistent", inplace = true})
      nl.set("rmsnorm.bwd.fused_reduce", 1)
      local dx3, dw3 = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = "persistent"})
      nl.set("rmsnorm.bwd.fused_reduce", 0)
      nl.set("rmsnorm.bwd.cluster", 4)
      local dx4, dw4 = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = "persistent"})
      local dx5, dw5 = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = "partials"})
      nl.set("rmsnorm.bwd.cluster", 1)
      -- the reduce kernel as an ordinary launch (by default under programmatic dependent launch)
      nl.set("rmsnorm.bwd.reduce_pdl", 0)
      for _, v in ipairs({"persistent", "partials", "row"}) do
        local dxp, dwp = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = v})
        dxp:free(); dwp:free()
        runs = runs + 1
      end
      nl.reset("rmsnorm.bwd.reduce_pdl")
      -- rows shared by clusters: of 2 at N = 1024 (128-thread CTAs of several rows) and of 8 at
      -- 4096; 40000 columns by 4 (bf16) or 8 (fp32, whose slice of 10000 registers do not hold)
      -- by default
      nl.set("rmsnorm.bwd.share_n", 512)
      nl.set("rmsnorm.bwd.fp32_share_n", 512)
      nl.set("rmsnorm.bwd.share_max", 8)
      nl.set("rmsnorm.bwd.block", 128)
      local dx6, dw6 = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = "persistent"})
      local dx7, dw7 = nl.add_rmsnorm_bwd(dy, x, w, rstd, {variant = "partials", dres = res})
      nl.set("rmsnorm.bwd.block", 512)
      local dx8, dw8 = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = "persistent", reduce = "atomic"})
      nl.reset("rmsnorm.bwd.share_n")
      nl.reset("rmsnorm.bwd.fp32_share_n")
      nl.reset("rmsnorm.bwd.share_max")
      dev:sync()
      for _, b in ipairs({dyc, dw, dx3, dw3, dx4, dw4, dx5, dw5, dx6, dw6, dx7, dw7, dx8, dw8, rstd,
        x, res, dy, w}) do
        b:free()
      end
      runs = runs + 7
      -- LayerNorm: every strategy with weight and bias, weight alone, bias alone (dB beside dW
      -- in the partial rows, or alone), each reduction; then the settings-steered paths once
      local lx = dev:randn({M, N}, dtype, {seed = 5})
      local ldy = dev:randn({M, N}, dtype, {seed = 6})
      local lw = dev:randn({N}, case[2], {seed = 7, mean = 1, std = 0.1})
      local lb = dev:randn({N}, case[2], {seed = 8})
      local ldx = dev:empty({M, N}, dtype)
      local _, mean, lrstd = nl.layernorm(lx, lw, lb, {variant = "row"})
      for _, affine in ipairs({{lw, lb}, {lw, nil}, {nil, lb}}) do
        local aw, bias = affine[1], affine[2]
        for _, v in ipairs(strategies("layernorm", "fwd")) do
          if nl.supports("layernorm.fwd." .. v, {x = lx, w = aw, b = bias, y = ldy, eps = 1e-5}) then
            local y, m, r = nl.layernorm(lx, aw, bias, {variant = v})
            y:free(); m:free(); r:free()
            runs = runs + 1
          end
        end
        for _, v in ipairs(strategies("layernorm", "bwd")) do
          for _, reduce in ipairs({"default", "atomic"}) do
            local args = {dy = ldy, x = lx, w = aw, b = bias, mean = mean, rstd = lrstd, dx = ldx,
              dw = aw and aw:to(dev), db = bias and bias:to(dev), reduce = reduce}
            if nl.supports("layernorm.bwd." .. v, args) then
              local dx, dw, db = nl.layernorm_bwd(ldy, lx, aw, bias, mean, lrstd, {variant = v, reduce = reduce})
              dx:free(); if dw then dw:free() end; if db then db:free() end
              runs = runs + 1
            end
            if args.dw then args.dw:free() end
            if args.db then args.db:free() end
          end
        end
      end
      local ldyc = ldy:to(dev)
      local outs = {ldyc}
      local function keep(...)
        for i = 1, select("#", ...) do
          outs[#outs + 1] = select(i, ...)
        end
        runs = runs + 1
      end
      keep(select(2, nl.layernorm_bwd(ldyc, lx, lw, lb, mean, lrstd, {variant = "persistent", inplace = true})))
      nl.set("rmsnorm.bwd.fused_reduce", 1)
      keep(nl.layernorm_bwd(ldy, lx, lw, lb, mean, lrstd, {variant = "persistent"}))
      nl.set("rmsnorm.bwd.fused_reduce", 0)
      nl.set("rmsnorm.bwd.cluster", 4)
      keep(nl.layernorm_bwd(ldy, lx, lw, lb, mean, lrstd, {variant = "persistent"}))
      nl.set("rmsnorm.bwd.cluster", 1)
      -- at 4 packs a thread LayerNorm sums dB in shared memory past the staging (unshared rows
      -- here, shared ones below), with and without a weight
      nl.set("layernorm.bwd.items", 4)
      keep(nl.layernorm_bwd(ldy, lx, lw, lb, mean, lrstd, {variant = "persistent"}))
      keep(nl.layernorm_bwd(ldy, lx, nil, lb, mean, lrstd, {variant = "persistent", reduce = "atomic"}))
      nl.set("layernorm.bwd.share_n", 512)
      nl.set("layernorm.bwd.w32_share_n", 512)
      nl.set("rmsnorm.bwd.fp32_share_n", 512)
      nl.set("rmsnorm.bwd.share_max", 8)
      keep(nl.layernorm_bwd(ldy, lx, lw, lb, mean, lrstd, {variant = "persistent"}))
      nl.reset("layernorm.bwd.items")
      keep(nl.layernorm_bwd(ldy, lx, lw, lb, mean, lrstd, {variant = "persistent"}))
      keep(nl.layernorm_bwd(ldy, lx, nil, lb, mean, lrstd, {variant = "partials", reduce = "default"}))
      nl.reset("layernorm.bwd.share_n")
      nl.reset("layernorm.bwd.w32_share_n")
      nl.reset("rmsnorm.bwd.fp32_share_n")
      nl.reset("rmsnorm.bwd.share_max")
      dev:sync()
      for _, b in ipairs(outs) do
        b:free()
      end
      for _, b in ipairs({lx, ldy, lw, lb, ldx, mean, lrstd}) do
        b:free()
      end
    end
  end
  for _, key in ipairs({"cuda.pdl", "rmsnorm.fwd.reload_min_n", "rmsnorm.fwd.reload_min_m",
    "rmsnorm.bwd.scalar_lead", "rmsnorm.bwd.float_weights", "rmsnorm.bwd.whole_warps",
    "add_rmsnorm.bwd.whole_warps"}) do
    nl.reset(key)
  end
end
-- The forwards' fp8 y (delayed with amax, current: the amax launch, then y) and the
-- strategy's own yt (strided, or the slab's fused tile; fp8 and x's dtype), every strategy of
-- every op, on shapes of each kernel: sub-warp rows, one-row CTAs, the element path, the
-- looping kernel (70000 columns).
local function fp8_outputs()
  -- RMSNorm's one-row kernels reading x twice, as in the norms' third pass
  nl.set("rmsnorm.fwd.reload_min_n", 1)
  nl.set("rmsnorm.fwd.reload_min_m", 1)
  for _, s in ipairs({{3, 7}, {37, 1024}, {5, 1025}, {9, 4096}, {2, 70000}}) do
    local x = dev:randn(s, "bf16", {seed = 11})
    local res = dev:randn(s, "bf16", {seed = 12})
    local w = dev:randn({s[2]}, "bf16", {seed = 13, mean = 1, std = 0.1})
    for _, op in ipairs({"rmsnorm", "add_rmsnorm", "layernorm"}) do
      for _, v in ipairs(strategies(op, "fwd")) do
        local probe = {x = x, w = w, y = dev:empty(s, "fp8e4m3"), eps = 1e-6}
        if op == "add_rmsnorm" then
          probe.residual, probe.residual_out = res, dev:empty(s, "bf16")
        end
        local ok = nl.supports(op .. ".fwd." .. v, probe)
        probe.y:free()
        if probe.residual_out then probe.residual_out:free() end
        -- the strategy's own transposed copy: strided, or the slab's fused tile
        local way
        for _, t in ipairs(nl.variants{op = op, pass = "fwd", backend = "cuda"}) do
          if t.strategy == v then
            for _, w in ipairs(t.transposes) do
              if w == "strided" or (w == "fused_tiled" and not way) then way = w end
            end
          end
        end
        for _, o in ipairs(ok and {{out_dtype = "fp8e4m3", amax = true, scale = 2},
            {out_dtype = "fp8e5m2", scaling = "current", amax = true, transpose = way},
            {transpose = way}} or {}) do
          o.variant = v
          -- the outputs, nil where not asked for (yt without a transpose)
          local function free(...)
            for i = 1, select("#", ...) do
              local b = select(i, ...)
              if b then b:free() end
            end
          end
          if op == "rmsnorm" then
            free(nl.rmsnorm(x, w, o))
          elseif op == "add_rmsnorm" then
            free(nl.add_rmsnorm(x, res, w, o))
          else
            free(nl.layernorm(x, w, nil, o))
          end
          runs = runs + 1
        end
      end
    end
    for _, b in ipairs({x, res, w}) do b:free() end
  end
  nl.reset("rmsnorm.fwd.reload_min_n")
  nl.reset("rmsnorm.fwd.reload_min_m")
end
-- The transpose op: dense (16-byte accesses) and strided odd shapes (the element path), x of
-- each dtype copied and cast to fp8 (y and yt, amax), current scaling (the amax pass first),
-- tiles from the smallest to the defaults (128 x 128, the H100's 64 x 128); then a norm's
-- external transposed copy.
local function transposes()
  for _, tile in ipairs({{16, 16}, {64, 128}, {128, 128}}) do
    nl.set("transpose.tile_m", tile[1])
    nl.set("transpose.tile_n", tile[2])
    for _, s in ipairs({{3, 7}, {64, 256}, {37, 1029}}) do
      for _, pad in ipairs({0, 3}) do
        for _, dtype in ipairs({"fp32", "bf16", "fp8e4m3"}) do
          local x = dev:empty(s, dtype, {stride = s[2] + pad})
          x:randn({seed = 9})
          for _, v in ipairs(strategies("transpose", "fwd")) do
            local outs = {nl.transpose(x, {variant = v})}
            for _, scaling in ipairs({"delayed", "current"}) do
              local y, yt, amax = nl.cast_transpose(x, {variant = v, dtype = "fp8e5m2",
                scaling = scaling, amax = true})
              outs[#outs + 1], outs[#outs + 2], outs[#outs + 3] = y, yt, amax
            end
            for _, b in ipairs(outs) do b:free() end
            runs = runs + 3
          end
          x:free()
        end
      end
    end
  end
  nl.reset("transpose.tile_m")
  nl.reset("transpose.tile_n")
  local x = dev:randn({37, 1024}, "bf16", {seed = 10})
  local y, rstd, yt = nl.rmsnorm(x, nil, {variant = "row", transpose = "external"})
  dev:sync()
  for _, b in ipairs({x, y, rstd, yt}) do b:free() end
  runs = runs + 1
end
-- The chunked transposed copy: chunks of one tile of rows (launches of rows and the tiles of
-- the chunk before, a last one of tiles only), 16-byte tiles and the element path (111
-- columns), both scalings, rows of a CTA and of a warp, with and without cuda.pdl.
local function chunked()
  nl.set("transpose.chunk_kb", 1)
  nl.set("transpose.tile_m", 16)
  nl.set("transpose.tile_n", 64)
  for _, s in ipairs({{83, 1040}, {133, 111}}) do
    local cx = dev:randn(s, "bf16", {seed = 14})
    for _, pdl in ipairs({0, 1}) do
      nl.set("cuda.pdl", pdl)
      for _, v in ipairs({"row", "blockrow"}) do
        for _, scaling in ipairs({"delayed", "current"}) do
          local o = {variant = v, out_dtype = "fp8e4m3", transpose = "chunked", scaling = scaling,
            amax = true}
          local probe = {x = cx, y = dev:empty(s, "fp8e4m3"), yt = dev:empty({s[2], s[1]}, "fp8e4m3"),
            transpose = "chunked", eps = 1e-6}
          if nl.supports("rmsnorm.fwd." .. v, probe) then
            local outs = {nl.rmsnorm(cx, nil, o)}
            for _, b in ipairs(outs) do b:free() end
            runs = runs + 1
          end
          probe.y:free()
          probe.yt:free()
        end
      end
    end
    cx:free()
  end
  dev:sync()
  nl.reset("cuda.pdl")
  nl.reset("transpose.chunk_kb")
  nl.reset("transpose.tile_m")
  nl.reset("transpose.tile_n")
end

-- The parts the arguments name (norms, norms1 .. norms4, fp8, transpose, chunked), or all:
-- racecheck over the whole subset takes minutes, a part at a time fits a shorter run. A name
-- that is no part is an error: it would run nothing and leave the tool's summary clean.
local parts = {{"fp8", fp8_outputs}, {"transpose", transposes}, {"chunked", chunked}}
local names = {"norms"}
for i = 1, #passes do
  names[#names + 1] = "norms" .. i
end
for _, part in ipairs(parts) do
  names[#names + 1] = part[1]
end
if arg and arg[1] == "--list" then
  print(table.concat(names, "\n", 2)) -- norms1 onwards: "norms" is the sum of its passes
  return
end
local known = {}
for _, name in ipairs(names) do
  known[name] = true
end
local asked = {}
for _, a in ipairs(arg or {}) do
  if not known[a] then
    error(string.format("sanitize_subset: no part %q (parts: %s)", a, table.concat(names, ", ")), 0)
  end
  asked[a] = true
end
dev = nl.device("cuda")
local function want(part)
  return next(asked) == nil or asked[part]
end
for i, pass in ipairs(passes) do
  if want("norms") or want("norms" .. i) then
    norms(pass)
  end
end
for _, part in ipairs(parts) do
  if want(part[1]) then
    part[2]()
  end
end
print(string.format("sanitize subset: %d launches of CUDA variants completed", runs))

-- normlab.bench: nl.bench{...} -> Result, the sweep harness of docs/lua-api.md.
--
-- For each cell (dtype, M, N) the inputs are allocated once on the device (seeded randn) and
-- shared by every variant, so variants are compared on the same data. Each variant is then
-- asked whether it supports the cell (no: a "skip" row with the core's reason), checked
-- against the CPU fp64 reference when check=true (its outputs are first filled with NaN so
-- that a variant writing nothing cannot pass; out of tolerance: a "fail" row) and finally
-- timed by the core's nl_bench. A cell that runs out of memory, or that a variant turns down
-- at run time, becomes "skip" rows too; any other error stops the sweep. Every buffer of a
-- cell is freed before the next cell, whatever happened.
local core = require("normlab.binding")
local buffer = require("normlab.buffer")
local check = require("normlab.check")
local compare = require("normlab.compare")
local enums = require("normlab.enums")
local ops = require("normlab.ops")
local settings = require("normlab.settings")
local sweeps = require("normlab.sweep")
local tolerance = require("normlab.tolerance")
local tune = require("normlab.tune")
local util = require("normlab.util")

local KEYS = {"op", "variants", "M", "N", "dtype", "device", "weight", "bias", "cast", "offset",
  "eps", "reduce", "check", "mode", "outputs", "graph", "batches", "reps", "warmup_ms", "batch_ms",
  "progress", "seed", "stats", "tolerance", "shard", "out_dtype", "scaling", "transpose", "rowwise"}

-- Activations each op and pass reads, the activations it writes, its per-row statistics
-- (outputs of a forward pass, inputs of a backward one, which takes them from `fwd` run on
-- the same x) and whether it has a bias. Backward passes also write dw (and db) when w (and
-- b) are given. add_rmsnorm.bwd reads x = h, the forward's residual_out: any randn tensor
-- with its rstd serves. The transpose op writes yt (and y with rowwise); a forward writes yt
-- too when `transpose` is given, and with an fp8 out_dtype also amax (and, under current
-- scaling, the scale), reading a scale of 1 under delayed scaling.
local OPS = {
  ["rmsnorm.fwd"] = {acts = {"x"}, outs = {"y"}, stats = {"rstd"}, rms = true},
  ["layernorm.fwd"] = {acts = {"x"}, outs = {"y"}, stats = {"mean", "rstd"}, bias = true},
  ["add_rmsnorm.fwd"] = {acts = {"x", "residual"}, outs = {"y", "residual_out"}, stats = {"rstd"},
    rms = true},
  ["rmsnorm.bwd"] = {acts = {"dy", "x"}, outs = {"dx"}, stats = {"rstd"}, rms = true,
    fwd = "rmsnorm.fwd"},
  ["layernorm.bwd"] = {acts = {"dy", "x"}, outs = {"dx"}, stats = {"mean", "rstd"}, bias = true,
    fwd = "layernorm.fwd"},
  ["add_rmsnorm.bwd"] = {acts = {"dy", "dres", "x"}, outs = {"dx"}, stats = {"rstd"}, rms = true,
    fwd = "rmsnorm.fwd"},
  ["transpose.fwd"] = {acts = {"x"}, outs = {}, stats = {}, transpose_op = true},
}
local FP8 = {fp8e4m3 = true, fp8e5m2 = true}

---- the spec ----

-- A scalar or a non-empty list, as a list.
local function list(key, v, default)
  if v == nil then
    v = default
  end
  if type(v) ~= "table" then
    v = {v}
  end
  if #v == 0 then
    util.failf("bench: option '%s' must not be empty", key)
  end
  return v
end

local function sizes(key, v)
  local l = list(key, v)
  for _, n in ipairs(l) do
    if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then
      util.failf("bench: option '%s' must hold positive integers, got %s", key, util.show(v))
    end
  end
  return l
end

-- Strategies of op.pass on a backend, without the oracle and without auto.
local function default_variants(op, pass, backend)
  local l = {}
  for _, v in ipairs(ops.variants({op = op, pass = pass, backend = backend})) do
    if v.strategy ~= "ref" and v.strategy ~= "auto" then
      l[#l + 1] = v.strategy
    end
  end
  return l
end

-- A flag of nl_bench_opts: true and false as 1 and 0, anything else for check.struct.
local function flag(v)
  if type(v) == "boolean" then
    return v and 1 or 0
  end
  return v
end

local function parse(spec)
  if type(spec) ~= "table" then
    util.failf("bench: expected a table of options, got %s", type(spec))
  end
  local s = util.options("bench", spec, KEYS)
  local p = {}
  if type(s.op) ~= "string" then
    util.fail("bench: option 'op' is required: '<op>.<pass>' such as 'rmsnorm.bwd'")
  end
  p.opname = s.op:find(".", 1, true) and s.op or (s.op .. ".fwd")
  p.shape = OPS[p.opname]
  if p.shape == nil then
    util.failf("bench: unknown op %s (expected rmsnorm, layernorm or add_rmsnorm, .fwd or .bwd, "
      .. "or transpose)", util.show(s.op))
  end
  p.op, p.pass = p.opname:match("^(.-)%.(.*)$")
  p.device = buffer.device(s.device)
  local defaults = default_variants(p.op, p.pass, p.device.kind)
  if s.variants == nil and #defaults == 0 then
    util.failf("bench: %s has no %s variants besides ref and auto; name some in 'variants'",
      p.device.name, p.opname)
  end
  p.variants = list("variants", s.variants, defaults)
  for _, v in ipairs(p.variants) do
    ops.variant_name("bench", p.op, p.pass, v)
  end
  p.Ms, p.Ns = sizes("M", s.M), sizes("N", s.N)
  p.dtypes = list("dtype", s.dtype, "bf16")
  for _, dt in ipairs(p.dtypes) do
    buffer.dtype("bench", dt)
  end
  p.weight = s.weight or (p.shape.transpose_op and "none" or "fp32")
  if p.weight ~= "fp32" and p.weight ~= "x" and p.weight ~= "none" then
    util.failf("bench: option 'weight' must be fp32, x or none, got %s", util.show(s.weight))
  end
  if p.weight ~= "none" and p.shape.transpose_op then
    util.failf("bench: option 'weight' applies to the norms, not %s", p.opname)
  end
  -- The bias (layernorm) is of the weight's kind unless given; other ops take none.
  if s.bias ~= nil and s.bias ~= "fp32" and s.bias ~= "x" and s.bias ~= "none" then
    util.failf("bench: option 'bias' must be fp32, x or none, got %s", util.show(s.bias))
  end
  if s.bias ~= nil and s.bias ~= "none" and not p.shape.bias then
    util.failf("bench: option 'bias' applies to layernorm, not %s", p.op)
  end
  p.bias = p.shape.bias and (s.bias or p.weight) or "none"
  if s.cast ~= nil and not p.shape.rms then
    util.failf("bench: option 'cast' applies to rmsnorm and add_rmsnorm, not %s", p.op)
  end
  p.cast = util.choice("bench", "cast", s.cast, enums.cast, "llama")
  p.reduce = util.choice("bench", "reduce", s.reduce, enums.reduce, "default")
  p.offset = ops.offset_opt("bench", s.offset)
  p.eps = ops.eps_opt("bench", s.eps, p.op == "layernorm" and 1e-5 or 1e-6)
  p.check = s.check ~= false
  -- stats = false: the forward runs as in inference, writing no per-row statistics (how
  -- torch.compile's forward under no_grad runs); a backward always reads them.
  p.stats = s.stats ~= false
  if not p.stats and p.pass ~= "fwd" then
    util.failf("bench: option 'stats' = false applies to forward passes only (%s reads them)",
      p.opname)
  end
  p.seed = s.seed
  -- the fp8 output and the transposed copy
  if s.out_dtype ~= nil and not FP8[s.out_dtype] then
    util.failf("bench: option 'out_dtype' must be fp8e4m3 or fp8e5m2 (the default is x's dtype), got %s",
      util.show(s.out_dtype))
  end
  if s.out_dtype ~= nil and p.pass ~= "fwd" then
    util.failf("bench: option 'out_dtype' applies to forward passes, not %s", p.opname)
  end
  p.out_dtype = s.out_dtype
  if s.scaling ~= nil and not p.out_dtype then
    util.fail("bench: option 'scaling' comes with an fp8 out_dtype")
  end
  p.scaling = util.choice("bench", "scaling", s.scaling, enums.scaling, "delayed")
  if s.transpose ~= nil and (p.pass ~= "fwd" or p.shape.transpose_op) then
    util.failf("bench: option 'transpose' (the transposed copy of a norm's y) applies to norm "
      .. "forwards, not %s", p.opname)
  end
  p.transpose = s.transpose ~= nil and util.choice("bench", "transpose", s.transpose, enums.transpose)
  if s.rowwise ~= nil and not p.shape.transpose_op then
    util.failf("bench: option 'rowwise' (the transpose op's row-major copy y) applies to "
      .. "transpose, not %s", p.opname)
  end
  p.rowwise = s.rowwise == true
  if s.outputs ~= nil and s.outputs ~= "rotate" and s.outputs ~= "shared" then
    util.failf("bench: option 'outputs' must be rotate or shared, got %s", util.show(s.outputs))
  end
  p.opts = check.struct("opts", "nl_bench_opts", {
    mode = util.choice("bench", "mode", s.mode, enums.mode, "rotate"), graph = flag(s.graph),
    batches = s.batches, reps = s.reps, warmup_ms = s.warmup_ms, batch_ms = s.batch_ms,
    share_outputs = s.outputs == "shared" and 1 or 0})
  p.progress = s.progress
  if s.tolerance ~= nil and type(s.tolerance) ~= "function" then
    util.fail("bench: option 'tolerance' must be a function(dtype, output, M, variant) -> atol, rtol")
  end
  p.tolerance = s.tolerance or tolerance
  p.shard = sweeps.check_shard("bench", s.shard, util.fail)
  p.spec = s
  return p
end

---- progress on stderr ----

local function reporter(progress)
  if progress == false then
    return function() end
  elseif type(progress) == "function" then
    return progress
  end
  local width = 0
  return function(done, total, label)
    local line = string.format("[%d/%d] %s", done, total, label)
    io.stderr:write("\r", line, string.rep(" ", width - #line), done == total and "\n" or "")
    io.stderr:flush()
    width = #line
  end
end

---- cells ----

-- Inputs and outputs of one (dtype, M, N) on the device, as an nl_norm_args table (`args`),
-- plus the names of the outputs to check and every buffer to free.
local function make_cell(p, M, N, dt, bufs)
  local dev = p.device
  local n = 0
  local function keep(b)
    bufs[#bufs + 1] = b
    return b
  end
  local function rand(shape, dtype, mean, std)
    n = n + 1
    return keep(dev:randn(shape, dtype, {seed = p.seed and p.seed + n - 1, mean = mean, std = std}))
  end
  local tr = p.shape.transpose_op
  local a = {eps = not tr and p.eps or nil, offset = not tr and p.offset or nil,
    reduce = not tr and p.reduce or nil, cast = p.shape.rms and p.cast or nil}
  local outs = {}
  for _, f in ipairs(p.shape.acts) do
    a[f] = rand({M, N}, dt)
  end
  -- y (the transpose op: with rowwise) in out_dtype, yt, and with fp8 amax and the scale (an
  -- input of 1 under delayed scaling, an output under current scaling)
  local ydt = p.out_dtype or dt
  if tr and p.rowwise then
    a.y = keep(dev:empty({M, N}, ydt))
    outs[#outs + 1] = "y"
  end
  if tr or p.transpose then
    a.yt = keep(dev:empty({N, M}, ydt))
    outs[#outs + 1] = "yt"
    a.transpose = not tr and p.transpose or nil
  end
  if p.out_dtype then
    a.scaling = p.scaling
    a.amax = keep(dev:empty({1}, "fp32"))
    outs[#outs + 1] = "amax"
    a.scale = keep(dev:full({1}, 1, "fp32"))
    if p.scaling == enums.scaling.value.current then
      outs[#outs + 1] = "scale"
    end
  end
  -- Weights near 1 (near 0 under an offset, which adds the 1), biases near 0; "x": in the
  -- activations' dtype.
  if p.weight ~= "none" then
    a.w = rand({N}, p.weight == "x" and dt or p.weight, p.offset == 0 and 1 or 0, 0.1)
  end
  if p.bias ~= "none" then
    a.b = rand({N}, p.bias == "x" and dt or p.bias, 0, 0.1)
  end
  for _, f in ipairs(p.shape.outs) do
    a[f] = keep(dev:empty({M, N}, f == "y" and ydt or dt))
    outs[#outs + 1] = f
  end
  -- the per-row statistics: none for an inference forward (a backward always has them)
  local stats = p.stats and p.shape.stats or {}
  for _, f in ipairs(stats) do
    a[f] = keep(dev:empty({M}, "fp32"))
  end
  if p.pass == "fwd" then
    for _, f in ipairs(stats) do
      outs[#outs + 1] = f
    end
  else
    local s = {x = a.x, y = keep(dev:empty({M, N}, dt)), eps = p.eps}
    for _, f in ipairs(stats) do
      s[f] = a[f]
    end
    core.run(p.shape.fwd .. ".auto", s)
    if a.w then
      a.dw = keep(dev:empty({N}, a.w.dtype))
      outs[#outs + 1] = "dw"
    end
    if a.b then
      a.db = keep(dev:empty({N}, a.b.dtype))
      outs[#outs + 1] = "db"
    end
  end
  return {M = M, N = N, dtype = dt, args = a, outs = outs}
end

-- What the reference keeps of a buffer's dtype: the fp32 scalars (statistics, scale, amax) and
-- fp8 outputs (their rounding and saturation are the result), fp64 for the rest.
local KEEP_FP32 = {rstd = true, mean = true, scale = true, amax = true}
local function ref_dtype(f, b)
  if KEEP_FP32[f] then
    return "fp32"
  end
  return FP8[b.dtype] and (f == "y" or f == "yt") and b.dtype or "fp64"
end

-- The oracle's outputs for a cell: its inputs copied to the CPU in fp64 (statistics stay
-- fp32, as the ops take them), run through <op>.<pass>.ref, which writes yt its own way (the
-- way is the measured variant's: every way gives the same bits, some only on the GPU).
local function reference(p, cell, bufs)
  local cpu = buffer.device("cpu")
  local r = {}
  local is_out = {}
  for _, f in ipairs(cell.outs) do
    is_out[f] = true
  end
  for k, v in pairs(cell.args) do
    if not core.is_buffer(v) then
      if k ~= "transpose" then
        r[k] = v
      end
    elseif not is_out[k] then
      r[k] = v:to(cpu, ref_dtype(k, v))
      bufs[#bufs + 1] = r[k]
    end
  end
  for _, f in ipairs(cell.outs) do
    local like = cell.args[f]
    r[f] = cpu:empty(like.shape, ref_dtype(f, like))
    bufs[#bufs + 1] = r[f]
  end
  core.run(p.opname .. ".ref", r)
  return r
end

local function strip_position(msg)
  return (tostring(msg):gsub("^[^\n]-:%d+: ", "", 1))
end

-- One row: skip, fail or ok with the timing, for the concrete variant name.
local function measure_as(p, cell, variant, bufs, row, name)
  local a = cell.args
  local ok, why = core.supports(name, a)
  if not ok then
    row.status, row.reason = "skip", why
    return row
  end
  row.resolved = core.resolve(name, a)
  if p.check then
    cell.ref = cell.ref or reference(p, cell, bufs)
    for _, f in ipairs(cell.outs) do
      a[f]:fill(0 / 0)
    end
    core.run(name, a)
    row.check = {}
    for _, f in ipairs(cell.outs) do
      -- an fp8 y or yt is held to its own dtype's bound
      local fp8 = (f == "y" or f == "yt") and FP8[a[f].dtype]
      local atol, rtol = p.tolerance(fp8 and a[f].dtype or cell.dtype, f, cell.M, name)
      local c = compare(a[f], cell.ref[f], {atol = atol, rtol = rtol})
      row.check[f] = {max_abs = c.max_abs, max_rel = c.max_rel, ulp_max = c.ulp_max,
        n_bad = c.n_bad, ok = c.ok}
      if not c.ok and row.status == nil then
        row.status, row.reason = "fail", f .. ": " .. tostring(c)
      end
    end
    if row.status == "fail" then
      return row
    end
  end
  local b = core.bench(name, a, p.opts)
  local info = ops.info_table(b.run)
  local roof = p.device:roofline()
  row.status = "ok"
  row.resolved = info.variant
  row.ms, row.min_ms, row.max_ms = b.median_ms, b.min_ms, b.max_ms
  row.gbps, row.extra_gbps = b.gbps, b.extra_gbps
  row.bytes, row.extra_bytes = info.bytes, info.extra_bytes
  row.pct = roof > 0 and 100 * b.gbps / roof or nil
  row.deterministic, row.reduce = info.deterministic, info.reduce
  row.grid, row.block, row.cluster, row.waves = info.grid, info.block, info.cluster, info.waves
  if info.transpose ~= "none" then
    row.transpose = info.transpose
  end
  if info.scaling ~= "" then
    row.scaling = info.scaling
  end
  row.sets, row.footprint_bytes = b.sets, b.footprint_bytes
  if b.target_bytes > 0 then
    row.target_bytes = b.target_bytes
  end
  return row
end

-- One row; `auto` is resolved by the tuning cache first (normlab.tune), whose settings hold
-- for the check and the timing alike; the row says how (dispatch, bucket).
local function measure(p, cell, variant, bufs)
  local row = {op = p.op, pass = p.pass, variant = variant, M = cell.M, N = cell.N,
    dtype = cell.dtype}
  local d = tune.dispatch(ops.variant_name("bench", p.op, p.pass, variant), cell.args)
  row.dispatch, row.bucket = d.dispatch, d.bucket
  return settings.with(d.settings, measure_as, p, cell, variant, bufs, row, d.name)
end

-- pcall(fn, ...) that lets only the core's refusals (ops.refused: out of memory, unsupported)
-- through, which a sweep reports as skipped cells: true and fn's result, or false and the
-- error. Anything else (bad options, a CUDA error, Ctrl-C) stops the sweep.
local function attempt(fn, ...)
  local ok, res = pcall(fn, ...)
  if not ok and not ops.refused(res) then
    error(res, 0)
  end
  return ok, res
end

-- The rows of one cell, appended to rows; the cell's buffers go into bufs.
local function cell_rows(p, M, N, dt, bufs, rows, progress)
  local made, cell = attempt(make_cell, p, M, N, dt, bufs)
  for _, v in ipairs(p.variants) do
    progress(string.format("%s %s M=%d N=%d %s", p.opname, v, M, N, dt))
    local ok, res = false, cell
    if made then
      ok, res = attempt(measure, p, cell, v, bufs)
    end
    rows[#rows + 1] = ok and res or {op = p.op, pass = p.pass, variant = v, M = M, N = N,
      dtype = dt, status = "skip", reason = strip_position(res)}
  end
end

-- The cells of the sweep (dtype, then M, then N) that p.shard holds, all without a shard.
local function sweep(p)
  local rows = {}
  local cells = sweeps.cells(p.dtypes, p.Ms, p.Ns)
  local mine = sweeps.shard_cells(#cells, p.shard)
  local total = #mine * #p.variants
  local report = reporter(p.progress)
  local function progress(label)
    report(#rows, total, label)
  end
  for _, k in ipairs(mine) do
    local c = cells[k]
    local bufs = {}
    local ok, err = pcall(cell_rows, p, c.M, c.N, c.dtype, bufs, rows, progress)
    for _, b in ipairs(bufs) do
      b:free()
    end
    if not ok then
      error(err, 0)
    end
  end
  report(total, total, "done")
  return rows, #cells, mine
end

-- meta.sweep: what makes two runs parts of one sweep (normlab.sweep lists the fields).
local function identity(p, ncells)
  local function copy(l)
    local t = {}
    for i, v in ipairs(l) do t[i] = v end
    return t
  end
  local s = p.spec
  return sweeps.rehash({op = p.opname, variants = copy(p.variants), dtypes = copy(p.dtypes),
    M = copy(p.Ms), N = copy(p.Ns),
    device = {kind = p.device.kind, model = p.device.info and p.device.info.name or nil},
    weight = p.weight, bias = p.bias, cast = p.shape.rms and enums.cast.name[p.cast] or nil,
    offset = p.offset, eps = p.eps, reduce = enums.reduce.name[p.reduce], check = p.check,
    stats = p.stats, mode = enums.mode.name[p.opts.mode],
    outputs = p.opts.share_outputs ~= 0 and "shared" or "rotate", graph = (p.opts.graph or 0) ~= 0,
    batches = s.batches, reps = s.reps, warmup_ms = s.warmup_ms, batch_ms = s.batch_ms,
    seed = s.seed, version = core.version(), out_dtype = p.out_dtype,
    scaling = p.out_dtype and enums.scaling.name[p.scaling] or nil,
    transpose = p.transpose and enums.transpose.name[p.transpose] or nil,
    rowwise = p.shape.transpose_op and p.rowwise or nil, cells = ncells})
end

return function(spec)
  local p = parse(spec)
  local values = {}
  for _, s in ipairs(settings.list(p.device)) do
    values[s.key] = s.value
  end
  local meta = {device = p.device.name, device_info = p.device.info,
    roofline_gbps = p.device:roofline(), mode = enums.mode.name[p.opts.mode],
    outputs = p.opts.share_outputs ~= 0 and "shared" or "rotate",
    graph = (p.opts.graph or 0) ~= 0, weight = p.weight, bias = p.bias,
    date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
    version = core.version(), binding = core.binding, settings = values}
  local rows, ncells, mine = sweep(p)
  meta.sweep = identity(p, ncells)
  if p.shard then
    meta.shard = {index = p.shard[1], count = p.shard[2], cells = mine}
  end
  return require("normlab.report").new(rows, meta)
end

-- fuzz.lua: a seeded randomized differential tester of the norm kernels. Each case draws an
-- op (rmsnorm, layernorm, add_rmsnorm) and pass, one of the strategies the device registers
-- for it (auto included, ref not), a dtype, N log-uniform in [1, 70000] (or often a multiple
-- of 8, a power of two, one off one, or below 1024) and M log-uniform in [1, 70000] within
-- --max-elems / N, the weight and bias kinds, offset, cast, the row stride of every 2-D
-- buffer, the backward's dW reduction, dx over dy, add_rmsnorm's residual gradient or its
-- residual_out over residual; with --settings a few runtime settings of nl.settings(dev),
-- values within their ranges, for that case only; with --fp8 (forwards) an fp8 y with amax
-- and a transposed copy yt. The case runs into NaN-poisoned outputs, and every output is
-- compared with the fp64 reference (`ref` on CPU copies of the inputs; the backward passes of
-- both read the reference's saved statistics) under nl.tolerance, as spec/cuda_ops_spec.lua
-- does on its fixed grid. An fp8 y is bit-equal or one fp8 ulp off (in at most 1% of its
-- elements, or one), as in spec/cuda_fp8_spec.lua, give or take the fp32 y's own rounding
-- times the scale near zero; yt is y transposed bit for bit. A variant that refuses a case
-- (nl.supports, or EUNSUPPORTED / ENOMEM at run time) is a skip, counted by reason; any other
-- error is a failure.
--
--   build/normlab tools/fuzz.lua --device cuda --cases 2000 --seed 7 [--ops rmsnorm,layernorm]
--       [--passes fwd,bwd] [--max-elems 4e6] [--settings] [--fp8] [--time-s 240] [--verbose]
--
-- Case K of seed S depends on S, K, the options that shape the draw (--ops, --passes,
-- --max-elems, --settings, --fp8) and the device's registry only, never on the cases before
-- it, and draws the same under both bindings. The summary (after a progress line on stderr
-- every 10 s) gives the counts, the commonest skip reasons, the passes per variant and a line
-- per failure with the command that runs it alone (`--seed S --case K ...`, which prints the
-- case and each output's comparison). The status is 0 when no case failed, else 1. `auto`
-- takes the built-in thresholds (no tuning cache), so that a case reproduces on any machine
-- with the same GPU model. spec/fuzz_spec.lua requires this file as a module
-- (require("tools.fuzz"): fuzz.space, fuzz.case, fuzz.check, fuzz.run).
-- Shared Lua, 5.1-compatible.
local nl = require("normlab")
local ops = require("normlab.ops")
local settings = require("normlab.settings")
local member = require("normlab.util").member

local fuzz = {}

fuzz.OPS = {"rmsnorm", "layernorm", "add_rmsnorm"}
fuzz.PASSES = {"fwd", "bwd"}
fuzz.DTYPES = {"fp32", "fp16", "bf16"}
fuzz.MAX_SIZE = 70000                -- the largest M and N drawn
fuzz.DEFAULTS = {seed = 1, cases = 1000, max_elems = 4e6}

local NAN = 0 / 0
local format = string.format

---- the random stream ----

-- L'Ecuyer's combined multiplicative generator (1988): exact in doubles and in Lua 5.4's
-- integers alike, so a case draws the same under both bindings. Each case has its own stream,
-- seeded from (seed, index) and stirred so that neighbouring indices part at once.
local M1, A1, M2, A2 = 2147483563, 40014, 2147483399, 40692

local Rng = {}
Rng.__index = Rng

function fuzz.rng(seed, index)
  local s1, s2 = seed % (M1 - 1) + 1, index % (M2 - 1) + 1
  for _ = 1, 16 do
    s1 = (s1 * A1 + s2 % 65536) % M1
    s2 = (s2 * A2 + math.floor(s1 / 65536)) % M2
  end
  return setmetatable({s1 = math.max(s1, 1), s2 = math.max(s2, 1)}, Rng)
end

-- A number in (0, 1).
function Rng:float()
  self.s1 = self.s1 * A1 % M1
  self.s2 = self.s2 * A2 % M2
  local z = (self.s1 - self.s2) % (M1 - 1)
  return (z + 0.5) / (M1 - 1)
end

function Rng:int(lo, hi)
  return math.min(hi, lo + math.floor(self:float() * (hi - lo + 1)))
end

function Rng:chance(p)
  return self:float() < p
end

function Rng:pick(list)
  return list[self:int(1, #list)]
end

-- log2(n) rounded down, for n >= 1.
local function log2_floor(n)
  local k = 0
  while 2 ^ (k + 1) <= n do
    k = k + 1
  end
  return k
end

-- An integer in [lo, hi] (lo >= 1), log-uniform by octave: an octave [a, 2a) picked with its
-- share of log(hi / lo) (the last one, cut at hi, with its part of an octave), then uniform
-- in it.
function Rng:log_int(lo, hi)
  local octaves = log2_floor(hi / lo)
  local top = lo * 2 ^ octaves
  local part = (hi - top + 1) / top      -- the cut octave's share of a whole one
  local t = self:float() * (octaves + part)
  local k = math.min(math.floor(t), octaves)
  local a = lo * 2 ^ k
  return math.floor(self:int(a, math.min(2 * a - 1, hi)))
end

---- the space of cases on a device ----

-- The settings a case may draw on dev: the harness's (bench.*) never, the CPU's (cpu.*) on
-- the CPU only, and there only those that its kernels read (their docs do not start "CUDA").
local function tunable(s, dev)
  local section = s.key:match("^[^.]+")
  if section == "bench" then return false end
  if dev.kind == "cpu" then return not s.doc:find("^CUDA") end
  return section ~= "cpu"
end

-- Everything the draw depends on but the seed and index: the (op, pass) pairs and their
-- variants on dev (registry entries; ref aside), the settings pool, the size caps, the
-- options. opts: ops, passes (lists), max_elems, settings, fp8 (booleans).
function fuzz.space(dev, opts)
  opts = opts or {}
  local sp = {ops = opts.ops or fuzz.OPS, passes = opts.passes or fuzz.PASSES,
    max_elems = opts.max_elems or fuzz.DEFAULTS.max_elems, settings = opts.settings or false,
    fp8 = opts.fp8 or false, pairs = {}, variants = {}, reduces = {}, pool = {}}
  if not (sp.max_elems >= 1) then
    error(format("fuzz: max_elems must be >= 1, got %s", tostring(sp.max_elems)), 2)
  end
  for _, op in ipairs(sp.ops) do
    for _, pass in ipairs(sp.passes) do
      local key, list, reduces = op .. "." .. pass, {}, {"default"}
      for _, v in ipairs(nl.variants{op = op, pass = pass, backend = dev.kind}) do
        if v.strategy ~= "ref" then list[#list + 1] = v end
        for _, r in ipairs(v.reduces) do
          if not member(reduces, r) then reduces[#reduces + 1] = r end
        end
      end
      if #list > 0 then
        sp.pairs[#sp.pairs + 1] = {op, pass}
        sp.variants[key], sp.reduces[key] = list, reduces
      end
    end
  end
  if #sp.pairs == 0 then
    error(format("fuzz: %s registers no variant of %s (%s)", dev.name, table.concat(sp.ops, ", "),
      table.concat(sp.passes, ", ")), 2)
  end
  for _, s in ipairs(sp.settings and nl.settings(dev) or {}) do
    if tunable(s, dev) then sp.pool[#sp.pool + 1] = s end
  end
  return sp
end

---- drawing a case ----

-- N up to cap: log-uniform half of the time, else a multiple of 8, a power of two, a power of
-- two plus or minus one, or a small N below 1024.
local function draw_n(rng, cap)
  local kind = rng:int(1, 6)
  if kind == 3 and cap >= 8 then
    return 8 * rng:log_int(1, math.floor(cap / 8))
  elseif kind == 4 or kind == 5 then
    local n = math.floor(2 ^ rng:int(0, log2_floor(cap)))
    n = kind == 5 and n + rng:pick({-1, 1}) or n
    return math.max(1, math.min(cap, n))
  elseif kind == 6 then
    return rng:int(1, math.min(1023, cap))
  end
  return rng:log_int(1, cap)
end

-- The 2-D buffers of a case, each with its own row stride (N + pad elements; yt: M + pad).
local ROLES = {"x", "residual", "dy", "dres", "y", "residual_out", "dx", "yt"}

-- Every buffer dense; or all padded alike; or each dense or padded on its own (so that a
-- kernel reading one buffer with another's stride fails). A pad is a multiple of 8 (16-byte
-- rows in 16-bit dtypes) half of the time, else anything in 1..64.
local function draw_pads(rng)
  local function pad()
    return rng:chance(0.5) and 8 * rng:int(1, 8) or rng:int(1, 64)
  end
  local layout, pads = rng:int(1, 10), {}
  local common = layout > 4 and layout <= 7 and pad() or 0
  for _, role in ipairs(ROLES) do
    pads[role] = layout > 7 and (rng:chance(0.5) and pad() or 0) or common
  end
  return pads
end

local function powers_of_two(lo, hi)
  local list = {}
  for k = 0, log2_floor(math.max(hi, 1)) do
    if 2 ^ k >= lo then list[#list + 1] = math.floor(2 ^ k) end
  end
  return list
end

-- A value of setting s (an nl.settings entry) in [s.min, s.max]. Small integer ranges: any
-- value, or the minimum or a power of two (layouts take those); wide ones (thresholds, sizes):
-- either end ("always", "never"), the case's M or N or one off it (where auto changes its
-- mind), a power of two or a log-uniform value up to 2^24.
local function draw_value(rng, s, M, N)
  local lo, hi = s.min, s.max
  if not s.integer then
    return lo + rng:float() * (hi - lo)
  end
  if hi - lo <= 64 then
    if rng:chance(0.5) then return rng:int(lo, hi) end
    local list = powers_of_two(lo, hi)
    list[#list + 1] = lo
    return rng:pick(list)
  end
  local cap = math.min(hi, 2 ^ 24)
  local kind = rng:int(1, 5)
  if kind == 1 then
    return lo
  elseif kind == 2 then
    return hi
  elseif kind == 3 then
    return math.max(lo, math.min(hi, rng:pick({M, N}) + rng:int(-1, 1)))
  elseif kind == 4 then
    return rng:pick(powers_of_two(lo, cap))
  end
  return rng:log_int(math.max(lo, 1), cap)
end

-- Up to four distinct keys of the pool, each with a value: a list of {key, value}.
local function draw_settings(rng, pool, M, N)
  local left, list = {}, {}
  for i, s in ipairs(pool) do left[i] = s end
  for _ = 1, math.min(rng:int(0, 4), #left) do
    local s = table.remove(left, rng:int(1, #left))
    list[#list + 1] = {s.key, draw_value(rng, s, M, N)}
  end
  return list
end

-- The forward's output (--fp8): y in x's dtype or in fp8 (with amax, under a scaling the
-- variant offers, delayed with a scale of 1, one in [1/16, 16] or a saturating 1e4), and a
-- transposed copy yt by one of the ways the variant writes it, or none.
local function draw_output(rng, c, v)
  local kind = rng:int(1, 3)
  if kind > 1 and #v.fp8 > 0 then
    c.out_dtype = kind == 2 and "fp8e4m3" or "fp8e5m2"
    c.scaling = rng:pick(v.fp8)
    if c.scaling == "delayed" then
      local r = rng:float()
      c.scale = r < 0.4 and 1 or r < 0.8 and 1 / 16 + rng:float() * (16 - 1 / 16) or 1e4
    end
  end
  local ways = {"none"}
  for _, w in ipairs(v.transposes) do ways[#ways + 1] = w end
  local way = rng:pick(ways)
  c.transpose = way ~= "none" and way or nil
end

-- Case `index` of `seed` in space sp: a table of plain values (fuzz.describe prints it).
function fuzz.case(sp, seed, index)
  local rng = fuzz.rng(seed, index)
  local pair = rng:pick(sp.pairs)
  local c = {seed = seed, index = index, op = pair[1], pass = pair[2]}
  local key = c.op .. "." .. c.pass
  local v = rng:pick(sp.variants[key])
  c.variant = v.strategy
  c.dtype = rng:pick(fuzz.DTYPES)
  c.N = draw_n(rng, math.min(fuzz.MAX_SIZE, math.floor(sp.max_elems)))
  c.M = rng:log_int(1, math.min(fuzz.MAX_SIZE, math.floor(sp.max_elems / c.N)))
  c.weight = rng:pick({"fp32", "x", "none"})
  c.bias = c.op == "layernorm" and rng:pick({"fp32", "x", "none"}) or "none"
  c.offset = 0
  if c.weight ~= "none" then
    local r = rng:float()
    c.offset = r < 0.5 and 0 or r < 0.75 and 1 or math.floor(200 * rng:float() - 100 + 0.5) / 100
  end
  c.cast = c.op ~= "layernorm" and rng:pick({"llama", "gemma", "none"}) or nil
  c.eps = c.op == "layernorm" and 1e-5 or 1e-6
  -- inputs: randn of the case's seed; x mostly N(0, 1), else scaled by 0.1 to 10 (and shifted
  -- by up to twice its spread, which keeps LayerNorm's variance well conditioned); weights
  -- around 1. Draws take no libm function, so that every machine draws the same inputs.
  c.data_seed = rng:int(0, M1 - 2)
  c.x_std = rng:chance(0.7) and 1 or rng:chance(0.5) and 0.1 + 0.9 * rng:float()
    or 1 + 9 * rng:float()
  c.x_mean = rng:chance(0.8) and 0 or c.x_std * (4 * rng:float() - 2)
  c.w_std = rng:pick({0.1, 0.25, 0.5})
  c.pads = draw_pads(rng)
  if c.pass == "bwd" then
    local reduces = {"default"}
    for _, r in ipairs(c.variant == "auto" and sp.reduces[key] or v.reduces) do
      if not member(reduces, r) then reduces[#reduces + 1] = r end
    end
    c.reduce = rng:pick(reduces)
    c.inplace = rng:chance(0.25)
    c.dres = c.op == "add_rmsnorm" and rng:chance(0.5)
  else
    c.inplace = c.op == "add_rmsnorm" and rng:chance(0.25)
    if sp.fp8 then draw_output(rng, c, v) end
  end
  c.settings = sp.settings and draw_settings(rng, sp.pool, c.M, c.N) or {}
  return c
end

local function fp8(c)
  return c.out_dtype ~= nil
end

-- The variant's full name, "<op>.<pass>.<strategy>".
local function full_name(c)
  return c.op .. "." .. c.pass .. "." .. c.variant
end

-- The 2-D buffers case c has, of ROLES (dx is dy, residual_out residual, when in place).
local function roles(c)
  local add = c.op == "add_rmsnorm"
  local has = c.pass == "bwd" and {x = true, dy = true, dres = c.dres, dx = not c.inplace}
    or {x = true, residual = add, y = true, residual_out = add and not c.inplace,
      yt = c.transpose ~= nil}
  local used = {}
  for _, role in ipairs(ROLES) do
    if has[role] then used[#used + 1] = role end
  end
  return used
end

-- One line: what the case runs, on what, with which options and settings.
function fuzz.describe(c)
  local parts = {format("%s.%s.%s %s M=%d N=%d w=%s", c.op, c.pass, c.variant, c.dtype, c.M, c.N,
    c.weight)}
  local function add(...) parts[#parts + 1] = format(...) end
  if c.op == "layernorm" then add("b=%s", c.bias) else add("cast=%s", c.cast) end
  if c.offset ~= 0 then add("offset=%g", c.offset) end
  if c.x_std ~= 1 or c.x_mean ~= 0 then add("x~N(%.3g,%.3g)", c.x_mean, c.x_std) end
  local pads = {}
  for _, role in ipairs(roles(c)) do
    if c.pads[role] > 0 then pads[#pads + 1] = role .. "+" .. c.pads[role] end
  end
  if #pads > 0 then add("pad{%s}", table.concat(pads, ",")) end
  if c.pass == "bwd" then
    add("reduce=%s", c.reduce)
    if c.inplace then add("inplace") end
    if c.op == "add_rmsnorm" then add(c.dres and "dres" or "no-dres") end
  else
    if c.inplace then add("inplace") end
    if fp8(c) then
      add("->%s %s%s", c.out_dtype, c.scaling, c.scale and format(" scale=%.4g", c.scale) or "")
    end
    if c.transpose then add("yt=%s", c.transpose) end
  end
  if #c.settings > 0 then
    local s = {}
    for i, kv in ipairs(c.settings) do s[i] = format("%s=%.10g", kv[1], kv[2]) end
    add("[%s]", table.concat(s, " "))
  end
  return table.concat(parts, " ")
end

---- checking a case ----

-- The fp8 rule of spec/cuda_fp8_spec.lua: one ulp, an eighth (e4m3) or a quarter (e5m2) of
-- the value, or the subnormal quantum.
local FP8_ULP = {fp8e4m3 = {2 ^ -9, 2 ^ -3}, fp8e5m2 = {2 ^ -16, 2 ^ -2}}

local function strip_position(msg)
  return (tostring(msg):gsub("^[^\n:]+:%d+: ", ""))
end

-- The buffers of one case, freed together whatever happens.
local function buffer_pool()
  local list = {}
  local function keep(...)
    for i = 1, select("#", ...) do
      local b = select(i, ...)
      if b ~= nil then list[#list + 1] = b end
    end
    return ...
  end
  local function release()
    for _, b in ipairs(list) do b:free() end
  end
  return keep, release
end

local function kind_dtype(kind, dtype)
  return kind == "x" and dtype or kind
end

-- The case's inputs on the CPU, dense: x, w, b, residual (add_rmsnorm), dy and dres
-- (backward).
local function inputs(c, cpu, keep)
  local s, shape = c.data_seed, {c.M, c.N}
  local t = {x = keep(cpu:randn(shape, c.dtype, {seed = s, mean = c.x_mean, std = c.x_std}))}
  if c.weight ~= "none" then
    t.w = keep(cpu:randn({c.N}, kind_dtype(c.weight, c.dtype), {seed = s + 2, mean = 1,
      std = c.w_std}))
  end
  if c.bias ~= "none" then
    t.b = keep(cpu:randn({c.N}, kind_dtype(c.bias, c.dtype), {seed = s + 5, std = 0.5}))
  end
  if c.op == "add_rmsnorm" then
    t.residual = keep(cpu:randn(shape, c.dtype, {seed = s + 3}))
  end
  if c.pass == "bwd" then
    t.dy = keep(cpu:randn(shape, c.dtype, {seed = s + 1}))
    if c.dres then t.dres = keep(cpu:randn(shape, c.dtype, {seed = s + 4})) end
  end
  return t
end

-- The reference forward on the CPU inputs: {y, rstd, mean, residual_out, amax, scale}, with
-- the case's fp8 output when with_fp8.
local function ref_forward(c, t, cpu, keep, with_fp8)
  local o = {variant = "ref", eps = c.eps, offset = c.offset, cast = c.cast}
  local r = {}
  if with_fp8 and fp8(c) then
    o.out_dtype, o.scaling, o.amax = c.out_dtype, c.scaling, true
    o.scale = c.scaling == "current" and keep(cpu:empty({1}, "fp32")) or c.scale
    r.scale = c.scaling == "current" and o.scale or nil
  end
  -- each forward returns its outputs, then yt (none asked for here) and amax
  if c.op == "rmsnorm" then
    local y, rstd, _, amax = keep(nl.rmsnorm(t.x, t.w, o))
    r.y, r.rstd, r.amax = y, rstd, amax
  elseif c.op == "layernorm" then
    local y, mean, rstd, _, amax = keep(nl.layernorm(t.x, t.w, t.b, o))
    r.y, r.mean, r.rstd, r.amax = y, mean, rstd, amax
  else
    local y, h, rstd, _, amax = keep(nl.add_rmsnorm(t.x, t.residual, t.w, o))
    r.y, r.residual_out, r.rstd, r.amax = y, h, rstd, amax
  end
  return r
end

-- The reference backward, from the reference forward's statistics (f): {dx, dw, db}.
local function ref_backward(c, t, f, keep)
  local r = {}
  if c.op == "rmsnorm" then
    r.dx, r.dw = keep(nl.rmsnorm_bwd(t.dy, t.x, t.w, f.rstd,
      {variant = "ref", cast = c.cast, offset = c.offset}))
  elseif c.op == "layernorm" then
    r.dx, r.dw, r.db = keep(nl.layernorm_bwd(t.dy, t.x, t.w, t.b, f.mean, f.rstd,
      {variant = "ref", offset = c.offset}))
  else
    r.dx, r.dw = keep(nl.add_rmsnorm_bwd(t.dy, f.residual_out, t.w, f.rstd,
      {variant = "ref", cast = c.cast, offset = c.offset, dres = t.dres}))
  end
  return r
end

-- Buffers on the device: `placed` copies a CPU input into one with the role's row stride,
-- `poisoned` makes an output full of NaN (2-D ones with the role's stride).
local function device_buffers(c, dev, keep)
  local d = {}
  local function opts(role, cols)
    return role and c.pads[role] > 0 and {stride = cols + c.pads[role]} or nil
  end
  function d.placed(src, role)
    if src == nil then return nil end
    if src.ndim == 1 then return keep(src:to(dev)) end
    return keep(dev:empty(src.shape, src.dtype, opts(role, src.shape[2]))):copy_(src)
  end
  function d.poisoned(shape, dtype, role)
    return keep(dev:empty(shape, dtype, opts(role, shape[2]))):fill(NAN)
  end
  return d
end

-- The arguments of nl.run for the forward on the device, and the names of its outputs (the
-- fields of the arguments and of the reference's table alike; yt has no reference).
local function forward_args(c, t, ref, dev, keep)
  local d = device_buffers(c, dev, keep)
  local M, N, ydt = c.M, c.N, c.out_dtype or c.dtype
  local a = {x = d.placed(t.x, "x"), w = d.placed(t.w), b = d.placed(t.b),
    residual = d.placed(t.residual, "residual"), eps = c.eps, offset = c.offset, cast = c.cast,
    y = d.poisoned({M, N}, ydt, "y"), rstd = d.poisoned({M}, "fp32")}
  local names = {"y", "rstd"}
  if c.op == "layernorm" then
    a.mean = d.poisoned({M}, "fp32")
    names[#names + 1] = "mean"
  elseif c.op == "add_rmsnorm" then
    a.residual_out = c.inplace and a.residual or d.poisoned({M, N}, c.dtype, "residual_out")
    names[#names + 1] = "residual_out"
  end
  if c.transpose then
    a.transpose, a.yt = c.transpose, d.poisoned({N, M}, ydt, "yt")
    names[#names + 1] = "yt"
  end
  if fp8(c) then
    a.scaling, a.amax = c.scaling, d.poisoned({1}, "fp32")
    a.scale = c.scaling == "current" and d.poisoned({1}, "fp32")
      or keep(dev:full({1}, c.scale, "fp32"))
    names[#names + 1] = "amax"
    if c.scaling == "current" then names[#names + 1] = "scale" end
  end
  return a, names
end

-- The same for the backward: it reads the reference forward's statistics (f) and, for
-- add_rmsnorm, its residual_out h as the input.
local function backward_args(c, t, f, dev, keep)
  local d = device_buffers(c, dev, keep)
  local M, N = c.M, c.N
  local a = {dy = d.placed(t.dy, "dy"),
    x = d.placed(c.op == "add_rmsnorm" and f.residual_out or t.x, "x"),
    w = d.placed(t.w), b = d.placed(t.b), rstd = d.placed(f.rstd), mean = d.placed(f.mean),
    dres = d.placed(t.dres, "dres"), cast = c.cast, offset = c.offset, reduce = c.reduce}
  a.dx = c.inplace and a.dy or d.poisoned({M, N}, c.dtype, "dx")
  local names = {"dx"}
  if a.w then
    a.dw = d.poisoned({N}, a.w.dtype)
    names[#names + 1] = "dw"
  end
  if a.b then
    a.db = d.poisoned({N}, a.b.dtype)
    names[#names + 1] = "db"
  end
  return a, names
end

-- Output `name` of the run (a, its arguments) against the reference (ref): the Cmp and, for
-- an fp8 y with too many elements one ulp off, why.
local function compare(c, name, a, ref, cpu, keep, tolerance)
  if name == "yt" then
    -- y transposed, bit for bit (y itself is compared with the reference)
    local want = keep(nl.transpose(keep(a.y:to(cpu)), {variant = "ref"}))
    return nl.compare(a.yt, want, {atol = 0, rtol = 0})
  end
  if name == "y" and fp8(c) then
    -- one fp8 ulp, and near zero the fp32 y's own error times the scale: a few fp32 ulps of
    -- the terms that LayerNorm's x - mean, or its bias, cancel down to a tiny y
    local u, scale = FP8_ULP[c.out_dtype], c.scale or ref.scale:get(1)
    local cmp = nl.compare(a.y, ref.y, {atol = u[1] + scale * 2 ^ -17, rtol = u[2]})
    local exact = nl.compare(a.y, ref.y, {atol = 0, rtol = 0})
    if cmp.ok and exact.n_bad > math.max(1, exact.n / 100) then
      return exact, format("%d of %d elements one fp8 ulp off (at most 1%% or one)", exact.n_bad,
        exact.n)
    end
    return cmp
  end
  local atol, rtol = tolerance(c.dtype, name, c.M)
  return nl.compare(a[name], ref[name], {atol = atol, rtol = rtol})
end

-- nl.supports, then nl.run, under the case's settings: the run info, or nil and the reason the
-- variant refused the case.
local function launch(name, args, list)
  return settings.with(list, function()
    local ok, why = nl.supports(name, args)
    if not ok then return nil, why end
    local ran, info = pcall(nl.run, name, args)
    if ran then return info end
    if ops.refused(info) then return nil, "at run time: " .. strip_position(info) end
    error(info, 0)
  end)
end

local function check_case(c, dev, keep, o)
  local cpu = nl.device("cpu")
  local t = inputs(c, cpu, keep)
  local args, names, ref
  if c.pass == "fwd" then
    ref = ref_forward(c, t, cpu, keep, true)
    args, names = forward_args(c, t, ref, dev, keep)
  else
    local f = ref_forward(c, t, cpu, keep, false)
    ref = ref_backward(c, t, f, keep)
    args, names = backward_args(c, t, f, dev, keep)
  end
  local info, why = launch(full_name(c), args, c.settings)
  if not info then
    return {status = "skip", reason = strip_position(why)}
  end
  local res = {status = "pass", resolved = info.variant, outputs = {}}
  for _, name in ipairs(names) do
    local cmp, note = compare(c, name, args, ref, cpu, keep, o.tolerance or nl.tolerance)
    res.outputs[#res.outputs + 1] = {name = name, cmp = cmp, note = note}
    if not cmp.ok and res.status == "pass" then
      res.status = "fail"
      res.reason = name .. ": " .. (note and note .. "; " or "") .. tostring(cmp)
    end
  end
  return res
end

-- Runs case c on dev against the reference: {status = "pass" | "skip" | "fail", reason (skip:
-- the variant's refusal; fail: the first output off, with its Cmp, or the error), resolved
-- (the variant that ran: auto's pick), outputs (each compared: name, cmp, note), error (true
-- when the case raised one)}. opts.tolerance(dtype, output, M) replaces nl.tolerance.
function fuzz.check(c, dev, opts)
  local keep, release = buffer_pool()
  local ok, res = pcall(check_case, c, dev, keep, opts or {})
  release()
  if not ok then
    return {status = "fail", reason = "error: " .. strip_position(res), error = true}
  end
  return res
end

---- a run ----

-- A skip reason, after the variant drawn (auto's reason names its pick) and with its numbers
-- taken out, so that one refusal at many shapes counts once.
local function reason_key(c, reason)
  local name = full_name(c)
  if reason:sub(1, #name) ~= name then reason = name .. ": " .. reason end
  return (reason:gsub("%f[%w]%d[%d.]*", "#"))
end

-- Runs cases first .. first + cases - 1 of opts.seed on dev (opts: those of fuzz.space, and
-- seed, first, cases, time_s (no case starts after that many seconds), tolerance, and the
-- callbacks progress(summary) (every 10 s) and each(case, result)). Returns the summary:
-- {device, seed, ran, passed, skipped, failed, elapsed, skips = {{reason, count, first}, ...}
-- (most first), failures = {{case, result}, ...}, passes = {["<op>.<pass>"] = {[strategy] =
-- cases passed}}, stopped (why the run ended early, or nil)}.
function fuzz.run(dev, opts)
  opts = opts or {}
  local sp = fuzz.space(dev, opts)
  local seed = opts.seed or fuzz.DEFAULTS.seed
  local first, count = opts.first or 1, opts.cases or fuzz.DEFAULTS.cases
  local s = {device = dev.name, seed = seed, ran = 0, passed = 0, skipped = 0, failed = 0,
    skips = {}, failures = {}, passes = {}}
  local by_reason, start, last = {}, os.time(), os.time()
  require("normlab.tune").with_cache(false, function()
    for index = first, first + count - 1 do
      if opts.time_s and os.difftime(os.time(), start) >= opts.time_s then
        s.stopped = format("stopped after %g s (--time-s)", opts.time_s)
        break
      end
      local c = fuzz.case(sp, seed, index)
      local r = fuzz.check(c, dev, opts)
      s.ran = s.ran + 1
      if r.status == "pass" then
        s.passed = s.passed + 1
        local key = c.op .. "." .. c.pass
        s.passes[key] = s.passes[key] or {}
        s.passes[key][c.variant] = (s.passes[key][c.variant] or 0) + 1
      elseif r.status == "skip" then
        s.skipped = s.skipped + 1
        local key = reason_key(c, r.reason)
        if not by_reason[key] then
          by_reason[key] = {reason = key, count = 0, first = index}
          s.skips[#s.skips + 1] = by_reason[key]
        end
        by_reason[key].count = by_reason[key].count + 1
      else
        s.failed = s.failed + 1
        s.failures[#s.failures + 1] = {case = c, result = r}
      end
      if opts.each then opts.each(c, r) end
      -- a CUDA error is latched: once the device fails, every later case would too
      if r.error and not pcall(dev.sync, dev) then
        s.stopped = format("stopped: %s failed after case %d", dev.name, index)
        break
      end
      if opts.progress and os.difftime(os.time(), last) >= 10 then
        last = os.time()
        s.elapsed = os.difftime(last, start)
        opts.progress(s)
      end
    end
  end)
  table.sort(s.skips, function(a, b)
    return a.count > b.count or (a.count == b.count and a.first < b.first)
  end)
  s.elapsed = os.difftime(os.time(), start)
  return s
end

---- the command line ----

-- The command that runs case `index` alone: prefix (the interpreter and the script) and the
-- options that shape the draw.
function fuzz.command(prefix, device, opts, index)
  local parts = {prefix, "--device", device, "--seed", format("%d", opts.seed), "--case",
    format("%d", index)}
  local function add(...) for i = 1, select("#", ...) do parts[#parts + 1] = select(i, ...) end end
  if opts.ops then add("--ops", table.concat(opts.ops, ",")) end
  if opts.passes then add("--passes", table.concat(opts.passes, ",")) end
  if opts.max_elems and opts.max_elems ~= fuzz.DEFAULTS.max_elems then
    add("--max-elems", format("%d", opts.max_elems))
  end
  if opts.settings then add("--settings") end
  if opts.fp8 then add("--fp8") end
  return table.concat(parts, " ")
end

-- " (ran <variant>)" where auto picked one.
local function ran_as(c, r)
  return c.variant == "auto" and r.resolved and " (ran " .. r.resolved .. ")" or ""
end

local function progress_line(s)
  return format("fuzz: %d cases on %s in %d s: %d passed, %d skipped, %d failed", s.ran, s.device,
    s.elapsed, s.passed, s.skipped, s.failed)
end

-- The summary: counts, the commonest skip reasons, the passes per variant, a line per failure.
function fuzz.report(s, opts, prefix, out)
  out = out or io.stdout
  out:write(progress_line(s), format(" (seed %d)\n", s.seed))
  if s.stopped then out:write(s.stopped, "\n") end
  for i, k in ipairs(s.skips) do
    if i > 5 then
      out:write(format("  ... and %d other skip reasons\n", #s.skips - 5))
      break
    end
    out:write(format("  skip x%d (first: case %d): %s\n", k.count, k.first, k.reason))
  end
  local function sorted(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    table.sort(keys)
    return keys
  end
  for _, key in ipairs(sorted(s.passes)) do
    local counts = {}
    for i, v in ipairs(sorted(s.passes[key])) do
      counts[i] = format("%s %d", v, s.passes[key][v])
    end
    out:write(format("  passed %s: %s\n", key, table.concat(counts, ", ")))
  end
  for _, f in ipairs(s.failures) do
    local c, r = f.case, f.result
    out:write(format("FAIL case %d: %s%s: %s -- reproduce: %s\n", c.index, fuzz.describe(c),
      ran_as(c, r), r.reason, fuzz.command(prefix, s.device, opts, c.index)))
  end
end

local function parser()
  local argparse = require("argparse")
  local cli = require("normlab.cli")
  local p = argparse("fuzz.lua", "Random cases of the norm ops, each against the fp64 "
    .. "reference; the summary, and a reproduction command per failure."):add_help(false)
  local function list_of(allowed, what)
    return function(s) return cli.name_list(s, what, allowed) end
  end
  local function seconds(s)
    local n = tonumber(s)
    if not n or n < 0 then
      return nil, format("--time-s: expected a number >= 0, got '%s'", s)
    end
    return n
  end
  p:flag("-h --help", "Show this help and exit.")
  p:option("--device", "Device: cpu, cuda, cuda:N or auto (default: normlab's default).")
    :argname("<dev>")
  p:option("--cases", "Cases to run.", tostring(fuzz.DEFAULTS.cases)):argname("<n>")
    :convert(cli.integer(1, "--cases"))
  p:option("--seed", "Seed of the run.", tostring(fuzz.DEFAULTS.seed)):argname("<n>")
    :convert(cli.integer(0, "--seed"))
  p:option("--case", "Run case K of the seed alone, and print it and each comparison.")
    :argname("<K>"):convert(cli.integer(1, "--case"))
  p:option("--ops", "Ops, comma list (default: " .. table.concat(fuzz.OPS, ",") .. ").")
    :argname("<list>"):convert(list_of(fuzz.OPS, "--ops"))
  p:option("--passes", "Passes, comma list (default: fwd,bwd).")
    :argname("<list>"):convert(list_of(fuzz.PASSES, "--passes"))
  p:option("--max-elems", "The most elements of a case (M x N).", "4e6"):argname("<n>")
    :convert(cli.integer(1, "--max-elems"))
  p:flag("--settings", "Also draw runtime settings (a few keys of nl.settings) per case.")
  p:flag("--fp8", "Forwards also write fp8 y with amax, and transposed copies yt.")
  p:option("--time-s", "Start no case after this many seconds."):argname("<s>")
    :convert(seconds)
  p:flag("--verbose", "A line per case.")
  return p, cli
end

-- The script: parses argv, runs, prints; returns the exit status.
function fuzz.main(argv)
  local p, cli = parser()
  local args = cli.parse(p, argv, {devices = false})
  local dev = nl.device(args.device)
  local g = rawget(_G, "arg") or {}
  local lo = 0
  while g[lo - 1] ~= nil do lo = lo - 1 end
  local prefix = format("%s %s", g[lo] or "normlab", g[0] or "tools/fuzz.lua")
  local opts = {seed = args.seed, cases = args.case and 1 or args.cases, first = args.case,
    ops = args.ops, passes = args.passes, max_elems = args.max_elems, settings = args.settings,
    fp8 = args.fp8, time_s = args.time_s}
  opts.progress = function(s) io.stderr:write(progress_line(s), "\n") end
  if args.verbose or args.case then
    opts.each = function(c, r)
      print(format("case %d %s: %s%s%s", c.index, r.status, fuzz.describe(c), ran_as(c, r),
        r.reason and ": " .. r.reason or ""))
      for _, o in ipairs(args.case and r.outputs or {}) do
        print(format("  %-12s %s%s", o.name, tostring(o.cmp),
          o.note and " (" .. o.note .. ")" or ""))
      end
    end
  end
  local s = fuzz.run(dev, opts)
  fuzz.report(s, opts, prefix)
  return s.failed == 0 and 0 or 1
end

-- Run as a script (build/normlab tools/fuzz.lua ...): the command line. Required
-- (require("tools.fuzz")): the module.
if (...) ~= "tools.fuzz" then
  os.exit(fuzz.main(rawget(_G, "arg") or {}), true)
end
return fuzz

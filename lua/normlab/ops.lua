-- normlab.ops: the norm ops (rmsnorm, layernorm, add_rmsnorm, forward and backward, a
-- forward's fp8 output and transposed copy), the transpose op (transpose, cast_transpose), the
-- low-level run/supports/resolve, and the variant registry as Lua tables.
--
-- Lua checks what only Lua knows (argument types, freed buffers, option keys and values,
-- variant names) before allocating anything; the core validates shapes, dtypes, devices and
-- aliasing before writing anything. Outputs allocated here are freed again when the call
-- fails, so bad input leaves no trace.
local core = require("normlab.binding")
local buffer = require("normlab.buffer")
local check = require("normlab.check")
local enums = require("normlab.enums")
local settings = require("normlab.settings")
local tune = require("normlab.tune")
local util = require("normlab.util")

local K = core.constants
local arg = buffer.arg
local M = {}

---- the registry ----

local registry  -- core.variants(), read once: the registry is static

local function variants_raw()
  registry = registry or core.variants()
  return registry
end

-- Names of the enum values whose bits (1 << value) are set in mask; arithmetic, not bit ops,
-- so that the code runs on Lua 5.1/LuaJIT as on 5.4.
local function bit_names(enum, mask)
  local list = {}
  for _, name in ipairs(enum.names) do
    if math.floor(mask / 2 ^ enum.value[name]) % 2 == 1 then
      list[#list + 1] = name
    end
  end
  return list
end

-- Each entry is the binding's nl_variant_desc with the enum-valued fields as names: reduces,
-- fp8 (the scalings it offers with an fp8 y) and transposes (the ways it writes yt) as lists.
function M.variants(filter)
  local f = util.options("variants", filter, {"op", "pass", "backend"})
  local list = {}
  for _, v in ipairs(variants_raw()) do
    local e = util.copy(v)
    e.backend = enums.backend.name[v.backend]
    e.fp8 = bit_names(enums.scaling, v.fp8)
    e.transposes = bit_names(enums.transpose, v.transposes)
    e.reduces = bit_names(enums.reduce, v.reduces)
    e.default_reduce = enums.reduce.name[v.default_reduce]
    if (f.op == nil or f.op == e.op) and (f.pass == nil or f.pass == e.pass)
        and (f.backend == nil or f.backend == e.backend) then
      list[#list + 1] = e
    end
  end
  return list
end

-- Strategies of op.pass over all backends, in registry order, without repeats.
local function strategies(op, pass)
  local list, seen = {}, {}
  for _, v in ipairs(variants_raw()) do
    if v.op == op and v.pass == pass and not seen[v.strategy] then
      seen[v.strategy] = true
      list[#list + 1] = v.strategy
    end
  end
  return list, seen
end

-- The full registry name of option `variant` (a strategy or a full name) for op.pass.
function M.variant_name(who, op, pass, variant)
  variant = variant or "auto"
  if type(variant) ~= "string" then
    util.failf("%s: option 'variant' must be a string, got %s", who, type(variant))
  end
  local name = variant:find(".", 1, true) and variant or (op .. "." .. pass .. "." .. variant)
  local o, p, s = name:match("^([^.]+)%.([^.]+)%.([^.]+)$")
  if o ~= op or p ~= pass then
    util.failf("%s: variant %s is not a %s.%s variant", who, util.show(variant), op, pass)
  end
  local list, known = strategies(op, pass)
  if not known[s] then
    util.failf("%s: unknown variant %s (%s.%s strategies: %s)", who, util.show(variant), op, pass,
      table.concat(list, ", "))
  end
  return name
end

---- low level ----

-- A checked copy of a user's args table (the fields of nl_norm_args), with cast and reduce
-- given by name turned into values.
local function low_args(who, args)
  if type(args) ~= "table" then
    util.failf("%s: args must be a table, got %s", who, type(args))
  end
  local a = util.copy(args)
  -- the enum fields given by name
  for _, k in ipairs({"cast", "reduce", "scaling", "transpose"}) do
    if type(a[k]) == "string" then
      a[k] = util.choice(who, k, a[k], enums[k])
    end
  end
  return check.struct("args", "nl_norm_args", a)
end

-- The binding's nl_run_info with the enum-valued fields as names (transpose "none" when no yt
-- was written) and deterministic as a boolean; every other field as it is.
function M.info_table(i)
  local t = util.copy(i)
  t.backend = enums.backend.name[i.backend]
  t.reduce = enums.reduce.name[i.reduce]
  t.deterministic = i.deterministic ~= 0
  -- how yt was written ("none": there was none); scaling stays "" without an fp8 output
  t.transpose = i.transpose ~= 0 and enums.transpose.name[i.transpose] or "none"
  return t
end

-- Runs variant name on args, `auto` resolved by the tuning cache first (normlab.tune): the
-- run info, with dispatch ("tuned" or "default", for auto) and bucket (the cache entry's).
local function dispatched_run(name, args)
  local d = tune.dispatch(name, args)
  local info = M.info_table(settings.with(d.settings, core.run, d.name, args))
  info.dispatch, info.bucket = d.dispatch, d.bucket
  return info
end

function M.run(name, args)
  args = low_args("run", args)
  return dispatched_run(check.string(name, "variant"), args)
end

function M.supports(name, args)
  args = low_args("supports", args)
  return core.supports(check.string(name, "variant"), args)
end

-- The concrete variant, then how auto was resolved ("tuned" or "default"; nil for another
-- name) and the cache bucket it came from.
function M.resolve(name, args)
  args = low_args("resolve", args)
  local d = tune.dispatch(check.string(name, "variant"), args)
  return settings.with(d.settings, core.resolve, d.name, args), d.dispatch, d.bucket
end

-- Whether err, just raised by a call into the core, is the core refusing it (unsupported, or
-- out of memory) rather than a failure: a sweep skips such a cell, the fuzzer such a case.
function M.refused(err)
  local st, msg = core.last_failure()
  return msg == err and (st == K.NL_EUNSUPPORTED or st == K.NL_ENOMEM)
end

---- option helpers ----

function M.eps_opt(who, v, default)
  if v == nil then
    return default
  end
  if type(v) ~= "number" or not (v > 0) or v == math.huge then
    util.failf("%s: option 'eps' must be a finite number > 0, got %s", who, tostring(v))
  end
  return v
end

function M.offset_opt(who, v)
  if v == nil then
    return 0
  end
  if type(v) ~= "number" or v ~= v or math.abs(v) == math.huge then
    util.failf("%s: option 'offset' must be a finite number, got %s", who, tostring(v))
  end
  return v
end

local function flag_opt(who, key, v)
  if v ~= nil and type(v) ~= "boolean" then
    util.failf("%s: option '%s' must be a boolean, got %s", who, key, type(v))
  end
  return v == true
end

-- An output: the buffer the caller passed in option `key`, else a new one, remembered in
-- `new`. kind: "act" (x's shape, and dtype unless `dtype` gives one), "trans" (x's shape
-- transposed, dtype `dtype`), "stat" (fp32, one per row of x), "one" (fp32, one element), or
-- a buffer whose shape and dtype to copy (w for dw).
local function output(who, key, given, new, x, kind, dtype)
  local b = arg(who, key, given, true)
  if b ~= nil then
    return b
  end
  local xd = x:desc()
  if core.is_buffer(kind) then
    b = core.buffer(xd.backend, xd.index, kind:desc().dtype, kind.shape)
  elseif kind == "act" then
    b = core.buffer(xd.backend, xd.index, dtype or xd.dtype, x.shape)
  elseif kind == "trans" then
    local shape = x.shape
    b = core.buffer(xd.backend, xd.index, dtype, {shape[2] or shape[1], shape[2] and shape[1] or 1})
  elseif kind == "one" then
    b = core.buffer(xd.backend, xd.index, K.NL_F32, {1})
  else
    b = core.buffer(xd.backend, xd.index, K.NL_F32, {xd.ndim == 1 and 1 or xd.rows})
  end
  new[#new + 1] = b
  return b
end

-- Runs outputs(new, temps), which puts the outputs into args (and any temporary inputs, such
-- as a scale given as a number, into temps), then the variant. When anything fails, the
-- buffers allocated so far are freed before the error goes on; temporaries always are.
local function run(name, args, outputs)
  local new, temps = {}, {}
  local ok, err = pcall(function()
    outputs(new, temps)
    dispatched_run(name, args)
  end)
  for _, b in ipairs(temps) do
    b:free()
  end
  if not ok then
    for _, b in ipairs(new) do
      b:free()
    end
    error(err, 0)
  end
end

---- the fp8 output and the transposed copy ----

local FP8 = {fp8e4m3 = true, fp8e5m2 = true}

-- The output dtype's value from option `key` (a dtype name) or the output buffer given;
-- nil: x's dtype.
local function out_dtype(who, key, name, given)
  if name ~= nil then
    local dt = buffer.dtype(who, name)
    if given ~= nil and core.is_buffer(given) and given:desc().dtype ~= dt then
      util.failf("%s: option '%s' is %s but the output buffer given is %s", who, key, name,
        given.dtype)
    end
    return dt
  end
end

-- Checks the fp8 options (scale, amax, scaling) against the output dtype's name and sets
-- args.scaling; returns the function that fills args.scale and args.amax (a number scale
-- becomes a 1-element buffer on x's device, freed after the call; amax = true allocates one).
local function fp8_args(who, o, a, x, ydt_name)
  local fp8 = FP8[ydt_name]
  for _, key in ipairs({"scale", "amax", "scaling"}) do
    if o[key] ~= nil and not fp8 then
      util.failf("%s: option '%s' comes with an fp8 output (out_dtype fp8e4m3 or fp8e5m2), but "
        .. "the output is %s", who, key, ydt_name)
    end
  end
  a.scaling = util.choice(who, "scaling", o.scaling, enums.scaling, "delayed")
  local sc = o.scale
  if sc ~= nil and type(sc) ~= "number" then
    arg(who, "scale", sc)
  elseif sc ~= nil and (sc ~= sc or a.scaling == enums.scaling.value.current) then
    util.failf("%s: option 'scale' must be a number (not NaN) or a buffer%s", who,
      a.scaling == enums.scaling.value.current
        and "; current scaling computes it: give a buffer to receive it" or "")
  end
  if o.amax ~= nil and o.amax ~= true then
    arg(who, "amax", o.amax)
  end
  return function(new, temps)
    if type(sc) == "number" then
      local xd = x:desc()
      a.scale = core.buffer(xd.backend, xd.index, K.NL_F32, {1})
      temps[#temps + 1] = a.scale
      a.scale:fill(sc)
    else
      a.scale = sc
    end
    if o.amax ~= nil then
      a.amax = output(who, "amax", o.amax ~= true and o.amax or nil, new, x, "one")
    end
  end
end

-- The forward options shared by the norms: out_dtype (or `out` given as an fp8 buffer), scale,
-- amax, scaling, transpose (a way or true) and yt. Returns the function that fills y, yt,
-- scale and amax into a.
local function fwd_outputs(who, o, a, x)
  local ydt = out_dtype(who, "out_dtype", o.out_dtype, o.out)
  if ydt == nil and o.out ~= nil then
    arg(who, "out", o.out)
    ydt = o.out:desc().dtype
  end
  local ydt_name = enums.dtype.name[ydt or x:desc().dtype]
  local fill8 = fp8_args(who, o, a, x, ydt_name)
  local tr = o.transpose
  if tr ~= nil and tr ~= true then
    a.transpose = util.choice(who, "transpose", tr, enums.transpose)
  end
  return function(new, temps)
    a.y = output(who, "out", o.out, new, x, "act", ydt)
    if tr ~= nil or o.yt ~= nil then
      a.yt = output(who, "yt", o.yt, new, x, "trans", a.y:desc().dtype)
    end
    fill8(new, temps)
  end
end

local FWD8_KEYS = {"out_dtype", "scale", "amax", "scaling", "transpose", "yt"}

local function keys(list, extra)
  local all = {}
  for _, k in ipairs(list) do all[#all + 1] = k end
  for _, k in ipairs(extra or {}) do all[#all + 1] = k end
  return all
end

---- forward ----

-- Each forward returns its outputs, then yt (when a transposed copy was asked for: option
-- transpose or yt) and amax (when asked for: amax = true or a buffer), nil where not asked.

function M.rmsnorm(x, w, opts)
  local who = "rmsnorm"
  local o = util.options(who, opts, keys({"eps", "variant", "cast", "offset", "out", "rstd"}, FWD8_KEYS))
  x, w = arg(who, "x", x), arg(who, "w", w, true)
  local a = {x = x, w = w, eps = M.eps_opt(who, o.eps, 1e-6),
    offset = M.offset_opt(who, o.offset),
    cast = util.choice(who, "cast", o.cast, enums.cast, "llama")}
  local outs = fwd_outputs(who, o, a, x)
  run(M.variant_name(who, "rmsnorm", "fwd", o.variant), a, function(new, temps)
    outs(new, temps)
    if o.rstd ~= false then
      a.rstd = output(who, "rstd", o.rstd, new, x, "stat")
    end
  end)
  return a.y, a.rstd, a.yt, a.amax
end

function M.layernorm(x, w, b, opts)
  local who = "layernorm"
  local o = util.options(who, opts, keys({"eps", "variant", "offset", "out", "mean", "rstd"}, FWD8_KEYS))
  x, w, b = arg(who, "x", x), arg(who, "w", w, true), arg(who, "b", b, true)
  local a = {x = x, w = w, b = b, eps = M.eps_opt(who, o.eps, 1e-5),
    offset = M.offset_opt(who, o.offset)}
  local outs = fwd_outputs(who, o, a, x)
  run(M.variant_name(who, "layernorm", "fwd", o.variant), a, function(new, temps)
    outs(new, temps)
    if o.mean ~= false then
      a.mean = output(who, "mean", o.mean, new, x, "stat")
    end
    if o.rstd ~= false then
      a.rstd = output(who, "rstd", o.rstd, new, x, "stat")
    end
  end)
  return a.y, a.mean, a.rstd, a.yt, a.amax
end

function M.add_rmsnorm(x, residual, w, opts)
  local who = "add_rmsnorm"
  local o = util.options(who, opts,
    keys({"eps", "variant", "cast", "offset", "out", "residual_out", "rstd", "inplace"}, FWD8_KEYS))
  x, residual, w = arg(who, "x", x), arg(who, "residual", residual), arg(who, "w", w, true)
  local a = {x = x, residual = residual, w = w, eps = M.eps_opt(who, o.eps, 1e-6),
    offset = M.offset_opt(who, o.offset),
    cast = util.choice(who, "cast", o.cast, enums.cast, "llama")}
  if flag_opt(who, "inplace", o.inplace) and o.residual_out ~= nil then
    util.failf("%s: give either inplace=true or residual_out, not both", who)
  end
  local outs = fwd_outputs(who, o, a, x)
  run(M.variant_name(who, "add_rmsnorm", "fwd", o.variant), a, function(new, temps)
    outs(new, temps)
    a.residual_out = o.inplace and residual
      or output(who, "residual_out", o.residual_out, new, x, "act")
    if o.rstd ~= false then
      a.rstd = output(who, "rstd", o.rstd, new, x, "stat")
    end
  end)
  return a.y, a.residual_out, a.rstd, a.yt, a.amax
end

---- the transpose op ----

-- transpose.fwd: yt (x transposed, in `dtype`: x's or fp8 with scale) and, when y_too, the
-- row-major cast copy y. o.out names the buffer of the op's main output.
local function transpose_op(who, x, o, y_too)
  x = arg(who, "x", x)
  local main = y_too and o.yt or o.out
  local dt = out_dtype(who, "dtype", o.dtype, main)
  if dt == nil and main ~= nil then
    dt = arg(who, y_too and "yt" or "out", main):desc().dtype
  end
  local dt_name = enums.dtype.name[dt or x:desc().dtype]
  local a = {x = x}
  local fill8 = fp8_args(who, o, a, x, dt_name)
  run(M.variant_name(who, "transpose", "fwd", o.variant), a, function(new, temps)
    if y_too then
      a.y = output(who, "out", o.out, new, x, "act", dt)
    end
    a.yt = output(who, y_too and "yt" or "out", main, new, x, "trans", dt or x:desc().dtype)
    fill8(new, temps)
  end)
  return a
end

-- nl.transpose(x, opts) -> yt [, amax]
function M.transpose(x, opts)
  local who = "transpose"
  local o = util.options(who, opts, {"variant", "dtype", "scale", "amax", "scaling", "out"})
  local a = transpose_op(who, x, o, false)
  return a.yt, a.amax
end

-- nl.cast_transpose(x, opts) -> y, yt [, amax]
function M.cast_transpose(x, opts)
  local who = "cast_transpose"
  local o = util.options(who, opts, {"variant", "dtype", "scale", "amax", "scaling", "out", "yt"})
  local a = transpose_op(who, x, o, true)
  return a.y, a.yt, a.amax
end

---- backward ----

-- Checks the options of a backward pass's gradients, and returns the function that fills
-- dx (dy itself when inplace), dw when w is given and db when b is given.
local function grads(who, o, a)
  if flag_opt(who, "inplace", o.inplace) and o.dx ~= nil then
    util.failf("%s: give either inplace=true or dx, not both", who)
  end
  if a.w == nil and o.dw ~= nil then
    util.failf("%s: option 'dw' is given but there is no weight w", who)
  end
  if a.b == nil and o.db ~= nil then
    util.failf("%s: option 'db' is given but there is no bias b", who)
  end
  return function(new)
    a.dx = o.inplace and a.dy or output(who, "dx", o.dx, new, a.x, "act")
    if a.w ~= nil then
      a.dw = output(who, "dw", o.dw, new, a.x, a.w)
    end
    if a.b ~= nil then
      a.db = output(who, "db", o.db, new, a.x, a.b)
    end
  end
end

local BWD_KEYS = {"variant", "reduce", "inplace", "cast", "offset", "eps", "dx", "dw"}

function M.rmsnorm_bwd(dy, x, w, rstd, opts)
  local who = "rmsnorm_bwd"
  local o = util.options(who, opts, BWD_KEYS)
  local a = {dy = arg(who, "dy", dy), x = arg(who, "x", x), w = arg(who, "w", w, true),
    rstd = arg(who, "rstd", rstd), eps = M.eps_opt(who, o.eps, 1e-6),
    offset = M.offset_opt(who, o.offset),
    cast = util.choice(who, "cast", o.cast, enums.cast, "llama"),
    reduce = util.choice(who, "reduce", o.reduce, enums.reduce, "default")}
  run(M.variant_name(who, "rmsnorm", "bwd", o.variant), a, grads(who, o, a))
  return a.dx, a.dw
end

function M.layernorm_bwd(dy, x, w, b, mean, rstd, opts)
  local who = "layernorm_bwd"
  local o = util.options(who, opts,
    {"variant", "reduce", "inplace", "offset", "eps", "dx", "dw", "db"})
  local a = {dy = arg(who, "dy", dy), x = arg(who, "x", x), w = arg(who, "w", w, true),
    b = arg(who, "b", b, true), mean = arg(who, "mean", mean), rstd = arg(who, "rstd", rstd),
    eps = M.eps_opt(who, o.eps, 1e-5), offset = M.offset_opt(who, o.offset),
    reduce = util.choice(who, "reduce", o.reduce, enums.reduce, "default")}
  run(M.variant_name(who, "layernorm", "bwd", o.variant), a, grads(who, o, a))
  return a.dx, a.dw, a.db
end

-- h is the forward's residual_out (the core's field x); dres, the gradient arriving at
-- residual_out, is added into dx.
function M.add_rmsnorm_bwd(dy, h, w, rstd, opts)
  local who = "add_rmsnorm_bwd"
  local keys = {"dres"}
  for i, k in ipairs(BWD_KEYS) do
    keys[i + 1] = k
  end
  local o = util.options(who, opts, keys)
  local a = {dy = arg(who, "dy", dy), x = arg(who, "h", h), w = arg(who, "w", w, true),
    rstd = arg(who, "rstd", rstd), dres = arg(who, "dres", o.dres, true),
    eps = M.eps_opt(who, o.eps, 1e-6), offset = M.offset_opt(who, o.offset),
    cast = util.choice(who, "cast", o.cast, enums.cast, "llama"),
    reduce = util.choice(who, "reduce", o.reduce, enums.reduce, "default")}
  run(M.variant_name(who, "add_rmsnorm", "bwd", o.variant), a, grads(who, o, a))
  return a.dx, a.dw
end

return M

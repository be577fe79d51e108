-- normlab.cli: the command line of experiment scripts, on top of lua-argparse.
--
--   local cli = require("normlab.cli")
--   local p = cli.parser("Backward sweep: row vs persistent",
--                        {N = "1024..16384", variants = "row,persistent", dtypes = "bf16,fp16"})
--   p:option("--extra", "...")                  -- a script adds its own options as usual
--   local args = cli.parse(p)                    -- global `arg` unless given a list
--   local r = nl.bench(cli.bench_opts(args, {op = "rmsnorm.bwd"}))
--   cli.emit(r, args, {speedup = {"persistent", "row"}})  -- table on stdout, files as asked
--
-- Common options: --device, --M and --N (comma lists, "lo..hi" doubles from lo up to hi),
-- --dtypes, --variants, --weight, --bias, --csv/--json/--markdown/--svg PATH, --mode, --outputs,
-- --graph, --batches, --seed, --no-check, --no-stats, --shard I/N (run only shard I of N of
-- the sweep's cells; `normlab merge` puts the shards' JSON back together), --devices <list>
-- (a worker per device, each a shard; normlab.devices) and --compare-devices (each worker runs
-- the whole sweep, a column per device). cli.op_options(p, ...) adds --op (and
-- --pass) for scripts that run any op. Bad values stop the script with the usage and a
-- one-line reason (an error object whose message is all that the normlab executable prints:
-- no traceback).
-- Shared Lua, 5.1-compatible.

local argparse = require("argparse")
local sweep = require("normlab.sweep")
local member = require("normlab.util").member

local cli = {}

local format, concat = string.format, table.concat

cli.DTYPES = {"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp64"}
cli.MODES = {"rotate", "flush", "hot"}
cli.OPS = {"rmsnorm", "layernorm", "add_rmsnorm", "transpose"}
cli.PASSES = {"fwd", "bwd"}
cli.VECTOR_KINDS = {"fp32", "x", "none"}
cli.FP8 = {"fp8e4m3", "fp8e5m2"}
cli.SCALINGS = {"delayed", "current"}
cli.TRANSPOSES = {"default", "strided", "external", "fused_tiled", "chunked"}
-- The ops with a bias (the others refuse --bias other than none), and the op without a weight
-- (--weight does not apply to it) and without a backward pass.
local HAS_BIAS = {layernorm = true}
local NO_WEIGHT = {transpose = true}

-- Errors -------------------------------------------------------------------------------------

local UsageError = {}
UsageError.__index = UsageError
UsageError.__tostring = function(e) return e.message end

-- An error object for bad command lines: tostring gives the whole message, and the normlab
-- executable (like lua.c) prints such objects without a traceback.
function cli.usage_error(message)
  return setmetatable({message = message}, UsageError)
end

function cli.is_usage_error(e)
  return getmetatable(e) == UsageError
end

-- Lists --------------------------------------------------------------------------------------

local function parse_int(s, what)
  local n = tonumber(s)
  if not n or n ~= math.floor(n) then
    return nil, format("%s: '%s' is not an integer", what, s)
  end
  if n < 1 then return nil, format("%s: %s must be >= 1", what, s) end
  return n
end

-- "1024,2048" -> {1024, 2048}; "1024..8192" -> {1024, 2048, 4096, 8192} (doubling from lo
-- while <= hi); the forms combine: "1,7,1024..4096". Returns nil and a message when bad.
function cli.int_list(s, what)
  what = what or "list"
  if type(s) == "number" then s = tostring(s) end
  if type(s) ~= "string" or not s:find("%S") then
    return nil, format("%s: expected a comma list of integers, like 1024,2048", what)
  end
  local out = {}
  for item in (s .. ","):gmatch("([^,]*),") do
    item = item:match("^%s*(.-)%s*$")
    local lo, hi = item:match("^(.-)%.%.(.-)$")
    if lo then
      local a, err = parse_int(lo, what)
      if not a then return nil, err end
      local b, err2 = parse_int(hi, what)
      if not b then return nil, err2 end
      if b < a then return nil, format("%s: range %s is empty (%d > %d)", what, item, a, b) end
      while a <= b do
        out[#out + 1] = a
        a = a * 2
      end
    else
      local n, err = parse_int(item, what)
      if not n then return nil, err end
      out[#out + 1] = n
    end
  end
  return out
end

-- "bf16, fp16" -> {"bf16", "fp16"}, each checked against allowed when given.
function cli.name_list(s, what, allowed)
  what = what or "list"
  if type(s) ~= "string" or not s:find("%S") then
    return nil, format("%s: expected a comma list of names", what)
  end
  local out = {}
  for item in (s .. ","):gmatch("([^,]*),") do
    item = item:match("^%s*(.-)%s*$")
    if item == "" then return nil, format("%s: empty name in '%s'", what, s) end
    if allowed and not member(allowed, item) then
      return nil, format("%s: unknown '%s' (expected: %s)", what, item, concat(allowed, ", "))
    end
    out[#out + 1] = item
  end
  return out
end

local function valid_device(s)
  return s == "cpu" or s == "cuda" or s == "auto" or s:match("^cuda:%d+$") ~= nil
end

-- Parser -------------------------------------------------------------------------------------

-- argparse's convert hook: a function of the string returning the value, or nil and a message.
local function converter(fn, what, extra)
  return function(s)
    return fn(s, what, extra)
  end
end

local function count(lo)
  return function(s, what)
    local n = tonumber(s)
    if not n or n ~= math.floor(n) or n < lo then
      return nil, format("%s: expected an integer >= %d, got '%s'", what, lo, s)
    end
    return n
  end
end

-- The convert hook of an option `what` that takes an integer >= lo.
function cli.integer(lo, what)
  return converter(count(lo), what)
end

local function one_of(list)
  return function(s, what)
    if member(list, s) then return s end
    return nil, format("%s: unknown '%s' (expected: %s)", what, s, concat(list, ", "))
  end
end

local DEFAULTS = {M = "4096", N = "1024,2048,4096,8192", dtypes = "bf16", mode = "rotate"}

-- A parser with the common options. defaults (all strings, as typed on a command line) set
-- M, N, dtypes, variants, mode, batches and seed; variants has no default unless given (then
-- nl.bench runs its own set). name defaults to the script's name.
function cli.parser(description, defaults, name)
  defaults = defaults or {}
  for k in pairs(defaults) do
    if not member({"M", "N", "dtypes", "variants", "mode", "batches", "seed", "device", "weight",
        "bias"}, k) then
      error(format("cli.parser: no default for '%s' (M, N, dtypes, variants, mode, batches, " ..
        "seed, device, weight, bias)", tostring(k)), 2)
    end
  end
  local function def(k) return defaults[k] or DEFAULTS[k] end
  local script = name or (rawget(_G, "arg") and arg[0] and tostring(arg[0]):match("([^/]+)$"))
  local p = argparse(script or "experiment", description):add_help(false)
  p:flag("-h --help", "Show this help and exit.")
  p:option("--device", "Device: cpu, cuda, cuda:N or auto (default: normlab's default).")
    :argname("<dev>"):default(defaults.device)
    :convert(function(s)
      if valid_device(s) then return s end
      return nil, format("--device: '%s' is not cpu, cuda, cuda:N or auto", s)
    end)
  p:option("--M", "Rows: comma list; lo..hi doubles from lo to hi.")
    :argname("<list>"):default(def("M")):convert(converter(cli.int_list, "--M"))
  p:option("--N", "Columns (the normalized size): comma list; lo..hi doubles.")
    :argname("<list>"):default(def("N")):convert(converter(cli.int_list, "--N"))
  p:option("--dtypes", "Activation dtypes: " .. concat(cli.DTYPES, ", ") .. ".")
    :argname("<list>"):default(def("dtypes")):convert(converter(cli.name_list, "--dtypes", cli.DTYPES))
  p:option("--variants", "Variants (strategies or full names), comma list.")
    :argname("<list>"):default(defaults.variants):convert(converter(cli.name_list, "--variants"))
  p:option("--weight", "Weight dtype: fp32, x (the activation dtype) or none"
    .. (defaults.weight and "." or " (default: the script's, else fp32)."))
    :argname("<kind>"):default(defaults.weight)
    :convert(converter(one_of(cli.VECTOR_KINDS), "--weight"))
  p:option("--bias", "Bias dtype (layernorm): fp32, x or none (default: as the weight).")
    :argname("<kind>"):default(defaults.bias)
    :convert(converter(one_of(cli.VECTOR_KINDS), "--bias"))
  p:option("--mode", "Timing mode: rotate, flush or hot.")
    :argname("<mode>"):default(def("mode")):convert(converter(one_of(cli.MODES), "--mode"))
  p:option("--outputs", "rotate: outputs rotate with the inputs; shared: every buffer set "
    .. "writes the same outputs, which stay in L2 (how anchors.py times).")
    :argname("<how>"):convert(converter(one_of({"rotate", "shared"}), "--outputs"))
  p:flag("--graph", "Capture each timed batch in a CUDA graph.")
  p:option("--batches", "Timed batches (the median is reported).")
    :argname("<n>"):default(defaults.batches):convert(cli.integer(1, "--batches"))
  p:option("--seed", "Seed of the random inputs.")
    :argname("<n>"):default(defaults.seed):convert(cli.integer(0, "--seed"))
  p:flag("--no-check", "Skip the check against the fp64 reference.")
  p:flag("--no-stats", "Forward passes write no per-row statistics (rstd, mean), as in "
    .. "inference (torch.compile's forward under no_grad).")
  p:option("--shard", "Run shard I of N: every Nth cell (dtype, M, N) of the sweep from the "
    .. "Ith; write each shard's --json and put them together with `normlab merge`.")
    :argname("<I/N>"):convert(function(s) return sweep.parse_shard(s, "--shard") end)
  p:option("--devices", "Run on several devices at once: one worker process per device "
    .. "(cpu, cuda:N, comma list; a device may repeat) or all (every CUDA device, else cpu), "
    .. "each a --shard of the sweep; the results merge into the unsharded table.")
    :argname("<list>")
  p:flag("--compare-devices", "With --devices: every device runs the whole sweep; one column "
    .. "per variant and device (GB/s, % of that device's roofline).")
  p:option("--csv", "Also write the rows as CSV to this file."):argname("<path>")
  p:option("--json", "Also write the result as JSON to this file."):argname("<path>")
  p:option("--markdown", "Also write the table as markdown to this file."):argname("<path>")
  p:option("--svg", "Also write the chart as SVG to this file (GB/s bars; crossover.lua: its "
    .. "heat map)."):argname("<path>")
  return p
end

-- Ops and passes -----------------------------------------------------------------------------

-- The op options of parsers that have them (cli.op_options), by parser.
local op_setups = setmetatable({}, {__mode = "k"})

-- "layernorm" or "layernorm.bwd": the string when the op (and the pass) exist, else nil and
-- a message.
local function op_spec(s, what)
  local op, pass = s:match("^([%w_]+)%.([%w_]+)$")
  op = op or s
  if not member(cli.OPS, op) then
    return nil, format("%s: unknown op '%s' (expected: %s, or <op>.<pass>)", what, s,
      concat(cli.OPS, ", "))
  end
  if pass and not member(cli.PASSES, pass) then
    return nil, format("%s: unknown pass '%s' in '%s' (expected: %s)", what, pass, s,
      concat(cli.PASSES, ", "))
  end
  return s
end

-- Adds --set key=v1,v2,... (repeatable) to a parser, the settings axes of a sweep; cli.set_axes
-- reads them after cli.parse. help replaces the option's description (crossover.lua takes one
-- value per key). Returns p.
function cli.set_option(p, help)
  p:option("--set", help or "key=v1,v2,...: a setting and the values to try (repeatable).")
    :count("*"):argname("<key=values>")
  return p
end

-- The --set values (args.set) as a list of axes {key = k, values = {numbers}} in command-line
-- order; check(key) is called for each key (nl.get: an unknown key fails, naming close ones).
-- A malformed one raises a usage error.
function cli.set_axes(list, check)
  local axes = {}
  for _, spec in ipairs(list or {}) do
    local key, values = spec:match("^([%w_.]+)=(.+)$")
    if not key then
      error(cli.usage_error("--set: expected key=v1,v2,... got '" .. spec .. "'"))
    end
    check(key)
    local axis = {key = key, values = {}}
    for item in values:gmatch("[^,]+") do
      local v = tonumber(item)
      if not v then
        error(cli.usage_error("--set " .. key .. ": '" .. item .. "' is not a number"))
      end
      axis.values[#axis.values + 1] = v
    end
    axes[#axes + 1] = axis
  end
  return axes
end

-- Adds --fp8 <dtype> (y in fp8e4m3 or fp8e5m2, with its amax) and --scaling <how> (delayed or
-- current) to a parser, and with opts.transpose --transpose <way> (the transposed fp8 copy yt,
-- written strided, external, fused_tiled, chunked or the default way). opts.fp8: --fp8's
-- default, with --scaling's delayed (fp8_sweep.lua, always fp8); without it y stays in x's
-- dtype unless --fp8 is given, and cli.fp8_bench_opts refuses --scaling or --transpose
-- alone. Returns p.
function cli.fp8_options(p, opts)
  opts = opts or {}
  local fp8 = p:option("--fp8", "y in this fp8 dtype, with its amax: fp8e4m3 or fp8e5m2.")
    :argname("<dtype>"):convert(converter(one_of(cli.FP8), "--fp8"))
  local scaling = p:option("--scaling", "The fp8 scaling: delayed (a given scale) or current.")
    :argname("<how>"):convert(converter(one_of(cli.SCALINGS), "--scaling"))
  if opts.fp8 then
    fp8:default(opts.fp8)
    scaling:default("delayed")
  end
  if opts.transpose then
    p:option("--transpose", "With --fp8, the transposed fp8 copy yt, written this way: default, "
      .. "strided, external, fused_tiled or chunked."):argname("<way>")
      :convert(converter(one_of(cli.TRANSPOSES), "--transpose"))
  end
  return p
end

-- nl.bench's out_dtype, scaling and transpose from cli.fp8_options' flags, set in o (nothing
-- without --fp8; --scaling or --transpose without it is a usage error). Returns o.
function cli.fp8_bench_opts(args, o)
  if not args.fp8 then
    if args.scaling or args.transpose then
      error(cli.usage_error("--scaling and --transpose come with --fp8 (y in fp8)"))
    end
    return o
  end
  o.out_dtype, o.scaling, o.transpose = args.fp8, args.scaling, args.transpose
  return o
end

-- Adds --set key=value (repeatable) to a parser: settings held for the whole run, which
-- cli.held reads after cli.parse. Returns p.
function cli.hold_option(p)
  return cli.set_option(p, "key=value: a setting held for the whole run (repeatable), e.g. "
    .. "bench.max_sets=16.")
end

-- The --set values of cli.hold_option as a list of {key, value} (settings.with's), in
-- command-line order; check as for cli.set_axes. A key given several values raises a usage
-- error: such a run holds one combination (dispatch_sweep.lua sweeps several).
function cli.held(args, check)
  local held = {}
  for _, axis in ipairs(cli.set_axes(args.set, check)) do
    if #axis.values ~= 1 then
      error(cli.usage_error("--set " .. axis.key .. ": one value per key here (this run holds "
        .. "one combination of settings; dispatch_sweep.lua sweeps several)"))
    end
    held[#held + 1] = {axis.key, axis.values[1]}
  end
  return held
end

-- Adds --op to a parser from cli.parser: rmsnorm, layernorm or add_rmsnorm (default
-- opts.op, else rmsnorm), also written <op>.<pass>. opts.pass is the script's pass; with
-- opts.choose the script runs either and also gets --pass fwd|bwd (default opts.pass), which
-- --op <op>.<pass> may give instead; without it --op <op>.<other pass> is refused. cli.parse
-- then sets args.op (the op alone), args.pass and args.opname ("<op>.<pass>", nl.bench's op,
-- which cli.bench_opts passes on), and refuses --bias on an op without a bias. Returns p.
function cli.op_options(p, opts)
  opts = opts or {}
  if not member(cli.PASSES, opts.pass) then
    error(format("cli.op_options: pass must be fwd or bwd, got %s", tostring(opts.pass)), 2)
  end
  local op = opts.op or "rmsnorm"
  if not op_spec(op, "op") then
    error(format("cli.op_options: unknown op '%s'", tostring(op)), 2)
  end
  op_setups[p] = {pass = opts.pass, choose = opts.choose and true or false}
  if opts.choose then
    p:option("--op", format("Op: %s, or <op>.<pass> (e.g. %s.%s).", concat(cli.OPS, ", "), op,
      opts.pass)):argname("<op>"):default(op):convert(converter(op_spec, "--op"))
    p:option("--pass", format("Pass: fwd or bwd (default: the one --op names, else %s).",
      opts.pass)):argname("<pass>"):convert(converter(one_of(cli.PASSES), "--pass"))
  else
    p:option("--op", format("Op: %s (the %s pass; %s.%s also accepted).", concat(cli.OPS, ", "),
      opts.pass, op, opts.pass)):argname("<op>"):default(op):convert(converter(op_spec, "--op"))
  end
  return p
end

-- The strategies registered for args.op and args.pass (cli.op_options) on dev, in the
-- registry's order, without the oracle `ref`: what a script runs without --variants. A usage
-- error when there is none.
function cli.strategies(args, dev)
  local list = {}
  for _, v in ipairs(require("normlab.ops").variants{op = args.op, pass = args.pass,
      backend = dev.kind}) do
    if v.strategy ~= "ref" then list[#list + 1] = v.strategy end
  end
  if #list == 0 then
    error(cli.usage_error(format("%s has no variants for %s yet (normlab --list shows the "
      .. "registry)", args.opname, dev.name)))
  end
  return list
end

-- args.op as typed -> args.op, args.pass, args.opname; nil or a message for the usage error.
local function resolve_op(setup, args)
  local op, pass = args.op:match("^(.-)%.([%w_]+)$")
  op = op or args.op
  if pass and args.pass and pass ~= args.pass then
    return format("--op %s names the %s pass but --pass says %s", args.op, pass, args.pass)
  end
  pass = pass or args.pass or setup.pass
  if not setup.choose and pass ~= setup.pass then
    return format("--op %s: this script runs the %s pass only (%s.%s)", args.op, setup.pass,
      op, setup.pass)
  end
  if args.bias and args.bias ~= "none" and not HAS_BIAS[op] then
    return format("--bias %s: %s has no bias (layernorm has one)", args.bias, op)
  end
  if NO_WEIGHT[op] and pass ~= "fwd" then
    return format("--op %s: %s has a forward pass only", args.op, op)
  end
  args.op, args.pass, args.opname = op, pass, op .. "." .. pass
  return nil
end

-- Parses argv (default: the global arg) with a parser from cli.parser. Returns the options
-- with lists as tables, mode as a string, check = not --no-check, stats = not --no-stats (and
-- op, pass, opname with cli.op_options). A bad command line raises
-- cli.usage_error; -h prints the help and calls opts.on_help(text) when given, else ends the
-- script with os.exit(0, true) (closing the state first, so device buffers are released).
-- --devices <list> (normlab.devices) is handled here: the parser's process becomes the parent
-- of one worker per device, prints and writes the merged result and exits (status 1 when a
-- worker was lost), so the script's own code after cli.parse runs in the workers only;
-- with --compare-devices (refused without --devices) the workers run the whole sweep and the
-- result is their join. opts.devices = false refuses --devices (tune.lua),
-- opts.on_devices(args, argv) replaces the parent's run.
function cli.parse(parser, argv, opts)
  opts = opts or {}
  if argv == nil then
    argv = {}
    local a = rawget(_G, "arg") or {}
    for i = 1, #a do argv[i] = a[i] end
  end
  local ok, args = parser:pparse(argv)
  if not ok then
    error(cli.usage_error(format("%s\n\nError: %s", parser:get_usage(), args)))
  end
  if args.help then
    local text = parser:get_help()
    if opts.on_help then return opts.on_help(text) end
    print(text)
    os.exit(0, true)
  end
  local setup = op_setups[parser]
  if setup then
    local why = resolve_op(setup, args)
    if why then
      error(cli.usage_error(format("%s\n\nError: %s", parser:get_usage(), why)))
    end
  end
  local devices = require("normlab.devices")
  if args.compare_devices and not args.devices then
    error(cli.usage_error(format("%s\n\nError: --compare-devices needs --devices (the devices "
      .. "to compare)", parser:get_usage())))
  end
  if args.devices then
    local why
    if opts.devices == false then
      why = "--devices: this script's result is not a sweep's; it cannot run in workers"
    elseif os.getenv(devices.WORKER_ENV) then
      why = "--devices in a --devices worker"
    elseif args.shard then
      why = "--devices runs every shard itself: give --devices or --shard, not both"
    elseif args.device then
      why = "--devices names the devices: give --devices or --device, not both"
    end
    if why then error(cli.usage_error(format("%s\n\nError: %s", parser:get_usage(), why))) end
    local list, err = devices.parse(args.devices)
    if not list then error(cli.usage_error(format("%s\n\nError: %s", parser:get_usage(), err))) end
    if opts.on_devices then return opts.on_devices(args, argv) end
    -- the interpreter, its options and the script from the global arg; the arguments parsed
    local g, a = rawget(_G, "arg") or {}, {}
    local lo = 0
    while g[lo - 1] ~= nil do lo = lo - 1 end
    for i = lo, 0 do a[i] = g[i] end
    for i = 1, #argv do a[i] = argv[i] end
    os.exit(devices.main(args, a), true)
  end
  local kill, worker = os.getenv(devices.TEST_KILL_ENV), os.getenv(devices.WORKER_ENV)
  if kill and worker and tonumber(kill) == tonumber(worker:match("^%d+")) then
    io.stderr:write("test hook: worker ", kill, " exits 9\n")
    os.exit(9)
  end
  args.check = not args.no_check
  args.no_check = nil
  args.stats = not args.no_stats
  args.no_stats = nil
  args.help = nil
  return args
end

-- The nl.bench options these args set, merged over base (the script's fixed choices, such as
-- op; args.opname, from cli.op_options, replaces base.op). Options left at nil keep nl.bench's
-- defaults (bias: the weight's kind).
function cli.bench_opts(args, base)
  local o = {}
  for k, v in pairs(base or {}) do o[k] = v end
  o.op = args.opname or o.op
  o.device = args.device or o.device
  o.M = args.M or o.M
  o.N = args.N or o.N
  o.dtype = args.dtypes or o.dtype
  o.variants = args.variants or o.variants
  o.mode = args.mode or o.mode
  o.outputs = args.outputs or o.outputs
  o.weight = args.weight or o.weight
  o.bias = args.bias or o.bias
  if NO_WEIGHT[args.op] then
    o.weight, o.bias = "none", nil
  end
  if args.graph then o.graph = true end
  o.batches = args.batches or o.batches
  o.seed = args.seed or o.seed
  if args.check == false then o.check = false end
  if args.stats == false then o.stats = false end
  o.shard = args.shard or o.shard
  return o
end

-- The table printed and the files written, from view (a Result, or another view of one with
-- the same methods: normlab.crossover), each file named on stderr.
local function write_view(view, args, print_opts)
  view:print(print_opts)
  local function wrote(path) io.stderr:write("wrote ", path, "\n") end
  if args.csv then
    view:csv(args.csv)
    wrote(args.csv)
  end
  if args.json then
    view:json(args.json)
    wrote(args.json)
  end
  if args.markdown then
    local mopts = {path = args.markdown}
    for k, v in pairs(print_opts or {}) do
      if k ~= "file" then mopts[k] = v end
    end
    view:markdown(mopts)
    wrote(args.markdown)
  end
  if args.svg then
    view:svg(args.svg)
    wrote(args.svg)
  end
end

-- Prints the result's table (print_opts go to r:print) and writes the files the command line
-- asked for, naming each on stderr. A script's speedup pair ({"persistent", "row"}: strategies)
-- is left out when the result lacks either variant (--variants left it out, or the device has
-- no such strategy for the op), and names the result's columns when they are full names
-- (--variants rmsnorm.fwd.auto,...). The variants are the sweep's (meta.sweep), so that every
-- shard of a sweep, an empty one too, keeps the same pairs; the pairs kept go into
-- r.meta.print, so that the JSON written (and `normlab merge` of shards) prints them too.
-- print_opts.crossover = true (print_opts.file the only other option) prints and writes the
-- crossover view instead (normlab.crossover: a line per cell; --svg its heat map, --csv a line
-- per cell, --json the Result with meta.crossover) and records meta.print = {crossover = true}
-- alike. Returns r.
function cli.emit(r, args, print_opts)
  if print_opts and print_opts.crossover then
    if type(r.meta) == "table" then r.meta.print = {crossover = true} end
    write_view(require("normlab.crossover").new(r), args, {file = print_opts.file})
    return r
  end
  local sp = print_opts and print_opts.speedup
  if sp then
    -- the result's variants, by name as asked and by strategy
    local names = {}
    local s = type(r.meta) == "table" and r.meta.sweep
    if type(s) == "table" and type(s.variants) == "table" then
      for i, v in ipairs(s.variants) do names[i] = tostring(v) end
    end
    for _, row in ipairs(r.rows or {}) do names[#names + 1] = tostring(row.variant) end
    local by_name = {}
    for _, v in ipairs(names) do
      by_name[v] = v
      local strategy = v:match("([^.]+)$")
      if by_name[strategy] == nil then by_name[strategy] = v end
    end
    local pairs_ = type(sp[1]) == "table" and sp or {sp}
    local kept = {}
    for _, pair in ipairs(pairs_) do
      local a, b = by_name[pair[1]], by_name[pair[2]]
      if a and b then kept[#kept + 1] = {a, b} end
    end
    local o = {}
    for k, v in pairs(print_opts) do o[k] = v end
    o.speedup = #kept > 0 and kept or nil
    print_opts = o
  end
  if type(r.meta) == "table" then
    r.meta.print = print_opts and print_opts.speedup and {speedup = print_opts.speedup} or nil
  end
  write_view(r, args, print_opts)
  return r
end

return cli

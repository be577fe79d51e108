-- fp8_sweep.lua: what an fp8 output and its transposed copy cost a norm's forward (issue 17),
-- and the transpose kernels alone. For each shape, one line with the columns
--   <v>                      the norm (strategy v, default auto) writing y in x's dtype
--   <v>:fp8                  the norm writing y in fp8 (scale 1, amax; --scaling)
--   <v>:fp8+yt:<t>           the same plus the transposed fp8 copy yt, written the way t:
--                            strided (by the norm kernel), external (the norm, then the tiled
--                            transpose), fused_tiled (staged on chip by the norm kernel),
--                            chunked (the norm in chunks of rows, each launch also transposing
--                            the chunk before it from L2)
--   transpose:<s>            the transpose op alone on x (x's dtype out), strategy s
--   cast_transpose:<s>       the transpose op casting x to fp8: y and yt (TransformerEngine's
--                            cast_transpose), strategy s
-- in GB/s by the byte model (fp8 elements count one byte) and % of the copy roofline, each
-- checked against the fp64 reference first; a cell a variant cannot do says `skip: <reason>`.
-- Speedups: external and chunked over strided (time strided / time t) and tiled over naive.
--
--   normlab experiments/fp8_sweep.lua [--op rmsnorm|layernorm|add_rmsnorm] [--device cuda]
--       [--M 4096,32768] [--N 1024..16384] [--dtypes bf16] [--variants auto]
--       [--fp8 fp8e4m3|fp8e5m2] [--scaling delayed|current] [--weight x|fp32|none] [--graph]
--       [--set key=value] [--csv f] [--json f] [--markdown f] [--svg f]
-- --set holds a setting for the whole run (e.g. bench.max_sets=16). The table merges
-- several sweeps, so --shard and --devices are refused.
local nl = require("normlab")
local cli = require("normlab.cli")
local report = require("normlab.report")
local settings = require("normlab.settings")

local p = cli.parser("A norm's forward with an fp8 output and a transposed copy, and the "
  .. "transpose kernels alone.",
  {M = "4096,32768", N = "1024..16384", dtypes = "bf16", variants = "auto", weight = "x"})
cli.op_options(p, {pass = "fwd"})
cli.hold_option(p)
cli.fp8_options(p, {fp8 = "fp8e4m3"})
local args = cli.parse(p, nil, {devices = false})
local held = cli.held(args, nl.get)
if args.op == "transpose" then
  error(cli.usage_error(p:get_usage() .. "\n\nError: --op: the norm whose fp8 output is measured "
    .. "(rmsnorm, layernorm or add_rmsnorm); the transposes alone are columns of the table"))
end
if args.shard then
  error(cli.usage_error(p:get_usage() .. "\n\nError: --shard: this table merges several sweeps; "
    .. "run it whole"))
end
local dev = nl.device(args.device)

local WAYS = {"strided", "external", "fused_tiled", "chunked"}

-- The runs of the table: nl.bench options over the command line's, and each row's column.
local runs = {}
for _, v in ipairs(args.variants) do
  runs[#runs + 1] = {opts = {}, column = v}
  runs[#runs + 1] = {opts = {out_dtype = args.fp8, scaling = args.scaling}, column = v .. ":fp8"}
  for _, t in ipairs(WAYS) do
    runs[#runs + 1] = {opts = {out_dtype = args.fp8, scaling = args.scaling, transpose = t},
      column = v .. ":fp8+yt:" .. t}
  end
end
local function strategies()
  local list = {}
  for _, v in ipairs(nl.variants{op = "transpose", pass = "fwd", backend = dev.kind}) do
    if v.strategy ~= "ref" and v.strategy ~= "auto" then list[#list + 1] = v.strategy end
  end
  return list
end
local transposes = strategies()
for _, s in ipairs(transposes) do
  runs[#runs + 1] = {op = "transpose.fwd", variant = s, opts = {weight = "none"},
    column = "transpose:" .. s}
end
for _, s in ipairs(transposes) do
  runs[#runs + 1] = {op = "transpose.fwd", variant = s, column = "cast_transpose:" .. s,
    opts = {weight = "none", out_dtype = args.fp8, scaling = args.scaling, rowwise = true}}
end

-- Each run's rows under its column, on the norm's line (op and pass), so that one table holds
-- them all.
local results = {}
for _, run in ipairs(runs) do
  local o = cli.bench_opts(args, {device = dev})
  o.op = run.op or args.opname
  o.variants = {run.variant or run.column:match("^[^:]+")}
  for k, v in pairs(run.opts) do o[k] = v end
  io.stderr:write(run.column, "\n")
  local r = settings.with(held, nl.bench, o)
  local rows = {}
  for i, row in ipairs(r.rows) do
    local copy = {}
    for k, v in pairs(row) do copy[k] = v end
    copy.op, copy.pass, copy.variant = args.op, args.pass, run.column
    rows[i] = copy
  end
  local meta = {}
  for k, v in pairs(r.meta) do meta[k] = v end
  meta.sweep = nil
  results[#results + 1] = report.new(rows, meta)
end

local unpack_ = table.unpack or unpack
local speedup = {}
for _, v in ipairs(args.variants) do
  speedup[#speedup + 1] = {v .. ":fp8+yt:external", v .. ":fp8+yt:strided"}
  speedup[#speedup + 1] = {v .. ":fp8+yt:chunked", v .. ":fp8+yt:strided"}
end
local have = {}
for _, s in ipairs(transposes) do have[s] = true end
if have.tiled and have.naive then
  speedup[#speedup + 1] = {"transpose:tiled", "transpose:naive"}
  speedup[#speedup + 1] = {"cast_transpose:tiled", "cast_transpose:naive"}
end
cli.emit(report.merge(unpack_(results)), args, {speedup = speedup})

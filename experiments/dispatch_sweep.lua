-- dispatch_sweep.lua: sweep runtime settings (dispatch thresholds, packs per thread, CTA
-- sizes, CTAs per SM, the fused reduction) over shapes and variants, one column per
-- combination. Every combination is checked against the fp64 reference, then timed.
--
--   normlab experiments/dispatch_sweep.lua --op rmsnorm --pass bwd --variants persistent \
--       --set rmsnorm.bwd.items=1,2,4 --set rmsnorm.bwd.block=256,512,1024 --M 4096 --N 4096
-- --op is rmsnorm (the default), layernorm or add_rmsnorm, and --pass fwd or bwd (default
-- bwd); --op <op>.<pass> (--op rmsnorm.bwd) says both at once. --weight x|fp32|none (default
-- x) and, for layernorm, --bias (default: as the weight) choose the weight and bias dtypes.
-- Each --set key=v1,v2,... adds an axis; the cartesian product of all axes is run. A value
-- given twice runs twice (A/B rounds), its second column labelled #2. --shard I/N runs every
-- combination on every Nth cell (dtype, M, N) from the Ith; `normlab merge` puts the shards'
-- --json back together (README, "Sharding a sweep"). A forward with --fp8 <dtype> writes y in
-- fp8 with its amax (--scaling delayed or current), and with --transpose <way> its transposed
-- copy yt too, so that the fp8 settings (rmsnorm.fwd.fp8_max_threads, transpose.tile_m, ...)
-- sweep as the others do.
local nl = require("normlab")
local cli = require("normlab.cli")
local report = require("normlab.report")
local settings = require("normlab.settings")

local p = cli.parser("Sweep runtime settings; one column per combination.",
  {M = "4096", N = "1024..16384", dtypes = "bf16", variants = "auto", weight = "x"})
cli.op_options(p, {pass = "bwd", choose = true})
cli.set_option(p)
cli.fp8_options(p, {transpose = true})
local args = cli.parse(p)
if args.fp8 and args.pass ~= "fwd" then
  error(cli.usage_error("--fp8: the forward pass writes y (--op " .. args.op .. " is " .. args.pass .. ")"))
end

-- Axes of the sweep, checked against the context's settings before anything runs.
local axes = cli.set_axes(args.set, nl.get)

-- The cartesian product, in command-line order.
local combos = {{}}
for _, axis in ipairs(axes) do
  local grown = {}
  for _, c in ipairs(combos) do
    for _, v in ipairs(axis.values) do
      local n = {}
      for i, kv in ipairs(c) do n[i] = kv end
      n[#n + 1] = {axis.key, v}
      grown[#grown + 1] = n
    end
  end
  combos = grown
end

local function label(combo)
  local parts = {}
  for _, kv in ipairs(combo) do
    parts[#parts + 1] = kv[1]:match("([^.]+)$") .. "=" .. kv[2]
  end
  return #parts > 0 and table.concat(parts, ",") or "defaults"
end

local dev = nl.device(args.device)
-- nl.bench's options, the same for every combination (--scaling or --transpose without --fp8
-- refused here, before anything runs)
local opts = cli.fp8_bench_opts(args, cli.bench_opts(args, {device = dev}))
local results, runs = {}, {}
for i, combo in ipairs(combos) do
  io.stderr:write(string.format("[combination %d/%d] %s\n", i, #combos, label(combo)))
  -- the combination in force for this run only; settings the user had not set go back to
  -- the GPU model's defaults afterwards
  local r = settings.with(combo, nl.bench, opts)
  -- a combination given twice (A/B rounds: --set k=0,1,0,1) gets its round in the label
  local name = label(combo)
  runs[name] = (runs[name] or 0) + 1
  results[#results + 1] = r:label(runs[name] > 1 and name .. "#" .. runs[name] or name)
end
local unpack_ = table.unpack or unpack
cli.emit(report.merge(unpack_(results)), args)

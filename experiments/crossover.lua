-- crossover.lua: which strategy wins at each shape, by how much, and how close `auto` comes to
-- the winner. For every cell (dtype, M, N) of a grid, every registered strategy of the op and
-- pass (and `auto`) is checked against the fp64 reference, then timed, as the sweeps do; the
-- table has a line per cell: the winner (the fastest variant that passed; auto picks among
-- the others and never wins itself), its GB/s and % of the copy roofline, the runner-up and
-- the winner's margin over it, the variant auto resolved to and auto's GB/s over the
-- winner's (marked * below 0.97x). Below it: the share of cells where auto is within 3%, 2%
-- and 1% of the winner, its minimum and where, and whether the acceptance criterion holds
-- (within 3% on at least 95% of the cells, never below 0.9x). --svg draws the heat map: N
-- across, M up, a square per cell coloured by its winner, labelled and shaded by the margin,
-- outlined where auto falls below 0.97x. The thresholds auto runs with are found once on
-- a GPU and drift with every kernel change; this is the experiment that shows where they
-- are wrong.
--
--   normlab experiments/crossover.lua [--op rmsnorm.fwd|layernorm.bwd|...] [--device cuda]
--       [--M 1,16,...,65536] [--N 64,96,...,65536] [--dtypes bf16] [--variants row,blockrow,auto]
--       [--set bench.batch_ms=5 ...] [--with-tuned [--cache f.json]] [--graph] [--shard I/N]
--       [--devices all] [--csv f] [--json f] [--markdown f] [--svg f]
-- --op is rmsnorm (the default), layernorm or add_rmsnorm, --pass fwd (default) or bwd, or
-- --op <op>.<pass>. Without --M and --N the grid is the acceptance grid of `auto`: M in {1, 16,
-- 128, 1024, 4096, 16384, 32768, 65536} x N in {64, 96, 128, 192, 256, 384, 512, 768, 1024,
-- 1536, 2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384, 32768, 65536} (160 cells). Without
-- --variants: every strategy registered for the op on the device, auto included. auto runs
-- with its built-in thresholds (the tuning cache is not consulted); --with-tuned adds a column
-- auto@tuned, auto with the cache consulted (--cache, else $NORMLAB_TUNE_CACHE or the default
-- place; a second pass over the cells with auto alone). --set key=value (repeatable) holds a
-- setting for the whole run: bench.warmup_ms and bench.batch_ms shorten the timing of a large
-- grid, a dispatch threshold shows what auto would do with it. --shard I/N runs every Nth cell
-- from the Ith; `normlab merge s1.json ...` puts the shards' --json back into this table and
-- heat map, and --devices runs the shards on several devices at once (README, "Sharding a
-- sweep"). Weights (and LayerNorm's bias, unless --bias says otherwise) are in x's dtype.
local nl = require("normlab")
local cli = require("normlab.cli")
local report = require("normlab.report")
local settings = require("normlab.settings")
local tune = require("normlab.tune")
local util = require("normlab.util")

local p = cli.parser("Which strategy wins at each (M, N), by how much, and how close auto comes.",
  {M = "1,16,128,1024,4096,16384,32768,65536",
   N = "64,96,128,192,256,384,512,768,1024,1536,2048,3072,4096,5120,6144,8192,12288,16384,32768,"
     .. "65536",
   dtypes = "bf16", weight = "x"})
cli.op_options(p, {pass = "fwd", choose = true})
cli.hold_option(p)
p:flag("--with-tuned", "Also run auto with the tuning cache consulted (column auto@tuned).")
p:option("--cache", "The tuning cache of --with-tuned: a *.json file or a directory.")
  :argname("<path>")
local args = cli.parse(p)

local held = cli.held(args, nl.get)
if args.cache and not args.with_tuned then
  error(cli.usage_error("--cache: the tuning cache is consulted with --with-tuned only"))
end

local dev = nl.device(args.device)
local opts = cli.bench_opts(args, {device = dev, variants = args.variants or
  cli.strategies(args, dev)})
local tuned = args.cache or true

-- Before the long run: --with-tuned needs a cache auto can read on this device.
if args.with_tuned then
  local c = tune.with_cache(tuned, tune.load, dev)
  if c.state ~= "loaded" then
    error(cli.usage_error(string.format("--with-tuned: no tuning cache for %s (%s%s%s); "
      .. "experiments/tune.lua writes one", dev.name, c.file or "caching is off", c.file and
      (": " .. c.state) or "", c.reason and (", " .. c.reason) or "")))
  end
end

local function run()
  -- auto as built in; then, asked for, auto again with the cache: a column of its own
  local r = tune.with_cache(false, nl.bench, opts)
  if args.with_tuned then
    local o = util.copy(opts)
    o.variants = {"auto"}
    r = report.merge(r, tune.with_cache(tuned, nl.bench, o):label("tuned"))
  end
  return r
end

cli.emit(settings.with(held, run), args, {crossover = true})

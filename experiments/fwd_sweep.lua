-- fwd_sweep.lua: the forward pass of one op (--op rmsnorm, the default, layernorm or
-- add_rmsnorm), every strategy the registry has for it on the device and `auto`, on the
-- M = 4096 shapes of the main experiment and the large ones (M x N >= 32M elements) where
-- the forward should run at the copy roofline. Checked against the fp64 reference first;
-- the speedup column is auto / row.
--
--   normlab experiments/fwd_sweep.lua [--op rmsnorm|layernorm|add_rmsnorm] [--device cuda]
--       [--M 4096,32768] [--N 1024..16384] [--dtypes bf16] [--weight x|fp32|none]
--       [--bias x|fp32|none] [--graph] [--set key=value] [--shard I/N] [--csv f] [--json f]
-- --set holds a setting for the whole run (e.g. bench.max_sets=16, the anchors' buffer sets).
-- --shard I/N runs every Nth cell (dtype, M, N) from the Ith; `normlab merge s1.json ...` puts
-- the shards' --json back into this table (README, "Sharding a sweep").
-- Weights (and LayerNorm's bias, unless --bias says otherwise) are in x's dtype by default.
local nl = require("normlab")
local cli = require("normlab.cli")
local settings = require("normlab.settings")

local p = cli.parser("Forward pass of an op: every strategy and auto.",
  {M = "4096,32768", N = "1024..16384", dtypes = "bf16", weight = "x"})
cli.op_options(p, {pass = "fwd"})
cli.hold_option(p)
local args = cli.parse(p)
local held = cli.held(args, nl.get)
local dev = nl.device(args.device)

-- Without --variants: every forward strategy registered for the op on this device, in the
-- registry's order, auto included.
local variants = args.variants or cli.strategies(args, dev)

local r = settings.with(held, nl.bench, cli.bench_opts(args, {device = dev, variants = variants}))
cli.emit(r, args, {speedup = {"auto", "row"}})

-- bwd_sweep.lua: the main experiment. The backward pass of one op (--op rmsnorm, the
-- default, layernorm or add_rmsnorm): the old one-row-per-CTA design (`row`: dW through an
-- M x N fp32 temp) against the persistent one (dW in registers, grid x N partials), plus
-- every other backward strategy the registry has for the op on the device. Each variant is
-- first checked against the fp64 reference on the same shape, then timed; the table shows
-- GB/s by the one byte model, % of the measured copy roofline and the speedup
-- persistent / row.
--
--   normlab experiments/bwd_sweep.lua [--op rmsnorm|layernorm|add_rmsnorm] [--device cpu|cuda]
--       [--M 4096] [--N 1024..16384] [--dtypes bf16,fp16,fp32] [--variants row,persistent]
--       [--weight x|fp32|none] [--bias x|fp32|none] [--graph] [--set key=value] [--shard I/N]
--       [--csv f] [--json f]
-- --set holds a setting for the whole run (e.g. rmsnorm.bwd.grid_sms=128).
-- --shard I/N runs every Nth cell (dtype, M, N) from the Ith; `normlab merge s1.json ...` puts
-- the shards' --json back into this table (README, "Sharding a sweep").
-- Weights (and LayerNorm's bias, unless --bias says otherwise) are in x's dtype by default.
local nl = require("normlab")
local cli = require("normlab.cli")
local settings = require("normlab.settings")

local p = cli.parser("Backward pass of an op: the old row design against persistent (and the "
  .. "rest).",
  {M = "4096", N = "1024..16384", dtypes = "bf16,fp16,fp32", weight = "x"})
cli.op_options(p, {pass = "bwd"})
cli.hold_option(p)
local args = cli.parse(p)
local held = cli.held(args, nl.get)
local dev = nl.device(args.device)

-- Without --variants: every backward strategy registered for the op on this device, row and
-- persistent first, and on a GPU `auto` too, to show what the dispatch settings pick (on the
-- CPU it only repeats persistent).
local variants = args.variants
if not variants then
  local registered, rest = {}, {}
  for _, s in ipairs(cli.strategies(args, dev)) do
    registered[s] = true
    if s ~= "row" and s ~= "persistent" and (s ~= "auto" or dev.kind == "cuda") then
      rest[#rest + 1] = s
    end
  end
  variants = {}
  for _, s in ipairs({"row", "persistent"}) do
    if registered[s] then variants[#variants + 1] = s end
  end
  for _, s in ipairs(rest) do
    variants[#variants + 1] = s
  end
end

-- Weights in x's dtype, as in the anchors (HF models keep the norm weight in the model dtype).
local r = settings.with(held, nl.bench, cli.bench_opts(args, {device = dev, variants = variants}))
cli.emit(r, args, {speedup = {"persistent", "row"}})

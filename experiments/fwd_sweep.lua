-- fwd_sweep.lua: RMSNorm forward, every registered strategy of the device and `auto`, on the
-- M = 4096 shapes of the main experiment and the large ones (M x N >= 32M elements) where
-- the forward should run at the copy roofline. Checked against the fp64 reference first.
--
--   normlab experiments/fwd_sweep.lua [--device cuda] [--M 4096,32768] [--N 1024..16384]
--       [--dtypes bf16] [--graph] [--csv f] [--json f]
local nl = require("normlab")
local cli = require("normlab.cli")

local p = cli.parser("RMSNorm forward: every strategy and auto.",
  {M = "4096,32768", N = "1024..16384", dtypes = "bf16"})
local args = cli.parse(p)
local dev = nl.device(args.device)

local variants = args.variants
if not variants then
  variants = {}
  for _, v in ipairs(nl.variants{op = "rmsnorm", pass = "fwd", backend = dev.kind}) do
    if v.strategy ~= "ref" then
      variants[#variants + 1] = v.strategy
    end
  end
end

local r = nl.bench(cli.bench_opts(args, {op = "rmsnorm.fwd", device = dev, variants = variants,
  weight = "x"}))
cli.emit(r, args, {speedup = {"auto", "row"}})

-- bwd_sweep.lua: the main experiment. RMSNorm backward, the old one-row-per-CTA design
-- (`row`: dW through an M x N fp32 temp) against the persistent one (dW in registers,
-- grid x N partials), plus every other registered backward strategy of the device. Each
-- variant is first checked against the fp64 reference on the same shape, then timed;
-- the table shows GB/s by the one byte model, % of the measured copy roofline and the
-- speedup persistent / row.
--
--   normlab experiments/bwd_sweep.lua [--device cpu|cuda] [--M 4096] [--N 1024..16384]
--       [--dtypes bf16,fp16,fp32] [--variants row,persistent] [--graph] [--csv f] [--json f]
local nl = require("normlab")
local cli = require("normlab.cli")

local p = cli.parser("RMSNorm backward: the old row design against persistent (and the rest).",
  {M = "4096", N = "1024..16384", dtypes = "bf16,fp16,fp32"})
local args = cli.parse(p)
local dev = nl.device(args.device)

-- Without --variants: every backward strategy registered for this device, row first, and
-- on a GPU `auto` too, to show what the dispatch settings pick (on the CPU it only
-- repeats persistent).
local variants = args.variants
if not variants then
  variants = {"row", "persistent"}
  for _, v in ipairs(nl.variants{op = "rmsnorm", pass = "bwd", backend = dev.kind}) do
    local s = v.strategy
    if s ~= "row" and s ~= "persistent" and s ~= "ref" and (s ~= "auto" or dev.kind == "cuda") then
      variants[#variants + 1] = s
    end
  end
end

-- Weights in x's dtype, as in the anchors (HF models keep the norm weight in the model dtype).
local r = nl.bench(cli.bench_opts(args, {op = "rmsnorm.bwd", device = dev, variants = variants,
  weight = "x"}))
cli.emit(r, args, {speedup = {"persistent", "row"}})

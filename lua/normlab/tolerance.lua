-- normlab.tolerance: how far a variant's output may be from the fp64 reference, as
-- (atol, rtol) for compare's test |a - ref| <= atol + rtol * |ref|.
--
-- `dtype` is the op's activation dtype (x's), not the output buffer's: an fp32 dw computed
-- from bf16 activations carries bf16-sized errors (the llama cast rounds x*rstd to bf16
-- before dw pairs it with dy). The bounds assume randn-scaled inputs and allow what the
-- numerics contract permits: up to three roundings to the dtype on the way to y (x*rstd,
-- the weight product, the store), fp32 accumulation over rows of up to ~10^6 elements, and
-- the cancellation in dx = rstd * (w*dy - xhat * mean(w*dy*xhat)). dw and db sum M rows of
-- such terms, so their absolute bound grows with sqrt(M).
local util = require("normlab.util")

-- atol, rtol for outputs in the activation dtype (y, residual_out, dx) and for dw, db.
local ACT = {
  fp64 = {1e-10, 1e-10},
  fp32 = {1e-4, 1e-4},
  fp16 = {2e-3, 4e-3},
  bf16 = {1.6e-2, 1.6e-2},
  fp8e4m3 = {0.1, 0.15},
  fp8e5m2 = {0.2, 0.3},
}
-- rstd and mean are stored in fp32 whatever the dtype, but add_rmsnorm computes rstd from
-- h = x + residual rounded to the dtype: with few columns its relative error is that
-- rounding's (half an ulp), so the bound is about one ulp of the dtype.
local STAT = {
  fp64 = {1e-6, 1e-6},
  fp32 = {1e-5, 1e-4},
  fp16 = {1e-5, 1e-3},
  bf16 = {1e-5, 8e-3},
  fp8e4m3 = {1e-5, 0.07},
  fp8e5m2 = {1e-5, 0.13},
}

-- yt is y transposed; an fp8 y (and yt) takes the fp8 dtype's bound (one fp8 ulp is up to an
-- eighth of the value); amax (max |y|) and the scale current scaling derives from it are
-- fp32 values off by what y is off by before its last rounding, a stat's bound.
local KIND = {y = "act", yt = "act", residual_out = "act", dx = "act", rstd = "stat",
  mean = "stat", amax = "stat", scale = "stat", dw = "grad", db = "grad"}
local OUTPUTS = "y, yt, residual_out, dx, rstd, mean, amax, scale, dw, db"

-- nl.tolerance(dtype, output [, M]) -> atol, rtol
return function(dtype, output, M)
  local base = ACT[dtype]
  if base == nil then
    util.failf("tolerance: unknown dtype %s (expected fp32, fp16, bf16, fp8e4m3, fp8e5m2, fp64)",
      util.show(dtype))
  end
  local kind = KIND[output]
  if kind == nil then
    util.failf("tolerance: unknown output %s (expected %s)", util.show(output), OUTPUTS)
  end
  if M ~= nil and (type(M) ~= "number" or not (M >= 1)) then
    util.failf("tolerance: M must be a number >= 1, got %s", tostring(M))
  end
  if kind == "stat" then
    return STAT[dtype][1], STAT[dtype][2]
  elseif kind == "grad" then
    return base[1] * math.sqrt(M or 1), base[2]
  end
  return base[1], base[2]
end
